"""``contenox-lsp eval context`` on a small task file: the real pipeline, the real model's
tokenizer; a definition without a unique body line is left out of "body present", not a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contenox_bench import ctxeval

SOURCE = '''"""Shapes."""


def area(width, height):
    product = width * height
    return product


def perimeter(width, height):
    return 2 * (width + height)
'''

TEST = '''from shapes import area, perimeter


def test_area():
    assert area(2, 3) == 6
'''


def _task(body_line: str | None, name: str) -> dict[str, Any]:
    return {
        "id": f"t-{name}", "tree": "tree", "open_file": "test_shapes.py", "cursor_line": 5,
        "question": "Why does area return the wrong value?",
        "gt_files": ["shapes.py"],
        "gt_defs": [{"file": "shapes.py", "name": name, "kind": "def", "body_line": body_line}],
    }


def test_eval_context_scores_what_it_can(tmp_path: Path, llama_session: Any) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "shapes.py").write_text(SOURCE, encoding="utf-8")
    (tree / "test_shapes.py").write_text(TEST, encoding="utf-8")
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [_task("product = width * height", "area"),
                                           _task(None, "perimeter")]}), encoding="utf-8")
    doc = ctxeval.run(tasks, tmp_path / "out", [1024], llama_session)
    by_id = {t["id"]: t["results"] for t in doc["tasks"]}
    assert by_id["t-area"]["map+code@1024"]["body_present"] == 1.0
    assert by_id["t-perimeter"]["map+code@1024"]["body_present"] is None  # nothing to look for
    body = doc["summary"]["map+code@1024"]["body_present"]
    assert body["tasks"] == 1 and body["mean"] == 1.0
    assert doc["summary"]["map+code@1024"]["file_recall"]["tasks"] == 2
    report = (tmp_path / "out" / "context-eval.md").read_text(encoding="utf-8")
    assert "body present over 1 tasks: 1 have no definition with a unique body line" in report
    # Where the changed definition is: in the repo map alone, its code beside it.
    assert [d["shown"] for d in by_id["t-area"]["map@1024"]["defs"]] == ["map"]
    assert by_id["t-area"]["map+code@1024"]["defs"] == [
        {"file": "shapes.py", "name": "area", "shown": "code", "body": True}]
    # perimeter, which the question does not ask about, is in the repo map only.
    assert [d["shown"] for d in by_id["t-perimeter"]["map+code@1024"]["defs"]] == ["map"]
    shares = doc["summary"]["map+code@1024"]["placements"]
    assert shares == {"code": 0.5, "header": 0.0, "cursor": 0.0, "pin": 0.0, "map": 0.5,
                      "none": 0.0}
    assert "| map+code | 1024 | 0.50 | 0.00 | 0.00 | 0.00 | 0.50 | 0.00 |" in report
    # The budget bounds what was built beside the question (the server's one budget).
    assert all(0 < r["map+code@1024"]["tokens_beside_question"] <= 1024
               for r in by_id.values())
    # The server's time bound on the question's code: said in the report, kept in the JSON.
    bounded = ctxeval.run(tasks, tmp_path / "bounded", [1024], llama_session, question_max=0)
    assert bounded["question_max"] == 0
    assert "question's code bounded to 0 tokens" in (
        tmp_path / "bounded" / "context-eval.md").read_text(encoding="utf-8")


def _row(def_located: float, body: float | None) -> dict[str, Any]:
    shown = "code" if def_located else None
    return {"file_recall": 1.0, "def_located": def_located, "body_present": body,
            "defs": [{"file": "x.py", "name": "f", "shown": shown, "body": bool(body)}]}


def test_leave_one_repository_out_scores_each_repository_with_the_others_choice() -> None:
    """Repository ``a`` prefers a small map, ``b`` and ``c`` a large one: ``a`` is scored
    with what ``b`` and ``c`` chose, which is worse for it; ``b`` and ``c`` each with the
    small map that ``a``'s two tasks and the other's one favour."""
    small, large = ctxeval.ContextSplit(0.1), ctxeval.ContextSplit(0.5)

    def task(repo: str, good: ctxeval.ContextSplit) -> dict[str, Any]:
        rows = {ctxeval._grid_key(1024, s): _row(1.0 if s == good else 0.0,
                                                 1.0 if s == good else 0.0)
                for s in (small, large)}
        return {"id": f"{repo}-1", "repo": repo, "results": rows}

    per_task = [task("a", small), task("a", small), task("b", large), task("c", large)]
    out = ctxeval.loro(per_task, [1024], (small, large))
    assert out["chosen"] == {"a": large.label, "b": small.label, "c": small.label}
    held = out["summary"]["map+code@1024"]
    assert held["def_located"]["mean"] == 0.0  # every repository held out loses here
    assert held["body_present"]["tasks"] == 4
    assert held["placements"]["none"] == 1.0
    report = ctxeval.format_loro(out, [1024])
    assert "held out" in report
    assert "| map+code, held out | 1024 | 0.00 | 0.00 | 0.00 | 0.00 | 0.00 | 1.00 |" in report
