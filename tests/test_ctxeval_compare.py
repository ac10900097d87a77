"""``contenox-lsp eval compare``: two context reports task by task — the rows each report
scored its tasks with (held out, its own split, or a named split), paired differences, tasks
won and lost, and clear errors for reports that cannot be compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from contenox_bench.ctxeval_compare import compare, format_compare
from contenox_lsp.cli import main
from contenox_lsp.errors import InputError

SMALL, LARGE = "map=0,cursor=0", "map=0.35,cursor=0"


def _row(located: float, body: float | None = None) -> dict[str, Any]:
    return {"file_recall": 1.0, "def_located": located, "body_present": body}


def _report(located: dict[str, dict[str, float]], own: dict[str, float],
            chosen: dict[str, str] | None = None) -> dict[str, Any]:
    """Tasks ``a-1``, ``a-2`` (repository a) and ``b-1`` (b); ``located[split][task]`` at
    1024 tokens for each grid split, ``own[task]`` at the report's own split."""
    tasks = []
    for tid in ("a-1", "a-2", "b-1"):
        results = {f"map+code@1024/{s}": _row(located[s][tid]) for s in located}
        results["map+code@1024"] = _row(own[tid], None if tid == "b-1" else own[tid])
        tasks.append({"id": tid, "repo": tid[0], "results": results})
    doc: dict[str, Any] = {"budgets": [1024], "tasks": tasks}
    if chosen is not None:
        doc["loro"] = {"grid": list(located), "chosen": chosen}
    return doc


def test_held_out_rows_are_compared_task_by_task() -> None:
    a = _report({SMALL: {"a-1": 1.0, "a-2": 0.0, "b-1": 0.5},
                 LARGE: {"a-1": 0.0, "a-2": 0.0, "b-1": 0.0}},
                {"a-1": 0.0, "a-2": 0.0, "b-1": 0.0}, {"a": SMALL, "b": SMALL})
    # B: a's tasks at the large split (a-1 lost, a-2 won), b's at the small one (won).
    b = _report({SMALL: {"a-1": 1.0, "a-2": 0.0, "b-1": 1.0},
                 LARGE: {"a-1": 0.0, "a-2": 1.0, "b-1": 0.0}},
                {"a-1": 1.0, "a-2": 1.0, "b-1": 1.0}, {"a": LARGE, "b": SMALL})
    held = compare(a, b)
    assert held["rows"] == "held out" and held["tasks"] == 3
    located = held["summary"]["1024"]["def_located"]
    assert (located["a"], located["b"], located["won"], located["lost"]) == (0.5, 2 / 3, 2, 1)
    assert located["diff"] == pytest.approx(1 / 6)
    assert located["ci95"][0] <= located["diff"] <= located["ci95"][1]
    # A fixed split of the grid, and each report's own split, are other rows of the same runs.
    fixed = compare(a, b, LARGE)["summary"]["1024"]["def_located"]
    assert (fixed["won"], fixed["lost"], fixed["diff"]) == (1, 0, pytest.approx(1 / 3))
    own_rows = compare(a, b, "default")
    own = own_rows["summary"]["1024"]
    assert own["def_located"]["won"] == 3 and own["def_located"]["diff"] == 1.0
    # Body present: a task that cannot be scored (None) is left out of its pairs.
    assert own["body_present"]["tasks"] == 2
    table = format_compare(own_rows, ("base.json", "new.json"))
    assert "A: base.json, B: new.json" in table
    assert "| 1024 | def_located | 0.000 | 1.000 | +1.000 [+1.000, +1.000] | 3 / 0 |" in table


def test_reports_that_cannot_be_compared_say_why() -> None:
    grid = {SMALL: {"a-1": 1.0, "a-2": 0.0, "b-1": 0.5}}
    own = {"a-1": 0.0, "a-2": 0.0, "b-1": 0.0}
    held = _report(grid, own, {"a": SMALL, "b": SMALL})
    plain = _report(grid, own)
    with pytest.raises(InputError, match="one report is held out"):
        compare(held, plain)
    assert compare(held, plain, "default")["tasks"] == 3  # the same rows of both: comparable
    with pytest.raises(InputError, match="no split 'map=1,cursor=0' in the report: it has "
                                         "default, map=0,cursor=0"):
        compare(held, held, "map=1,cursor=0")
    other = dict(held, tasks=[dict(t, id="x" + t["id"]) for t in held["tasks"]])
    with pytest.raises(InputError, match="share no task"):
        compare(held, other)


def test_the_command_reads_report_folders_and_refuses_what_is_not_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    grid = {SMALL: {"a-1": 1.0, "a-2": 0.0, "b-1": 0.5}}
    for name, value in (("base", 0.0), ("new", 1.0)):
        (tmp_path / name).mkdir()
        doc = _report(grid, {"a-1": value, "a-2": value, "b-1": value})
        (tmp_path / name / "context-eval.json").write_text(json.dumps(doc), encoding="utf-8")
    assert main(["eval", "compare", str(tmp_path / "base"), str(tmp_path / "new")]) == 0
    assert "| 1024 | def_located | 0.000 | 1.000 | +1.000" in capsys.readouterr().out
    assert main(["eval", "compare", str(tmp_path / "base"),
                 str(tmp_path / "new" / "context-eval.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["1024"]["def_located"]["won"] == 3
    (tmp_path / "junk.json").write_text('{"tasks": []}', encoding="utf-8")
    assert main(["eval", "compare", str(tmp_path / "base"), str(tmp_path / "junk.json")]) == 1
    assert "is not an eval context report" in capsys.readouterr().err
    assert main(["eval", "compare", str(tmp_path / "base"), str(tmp_path / "missing")]) == 1
    assert "cannot read" in capsys.readouterr().err
