"""The bench's bigrepo section (issue 32) at a tiny size: the workspace it copies, its edits,
and ``contenox-lsp bench --sections bigrepo`` end to end — the report's structure and sane
values (positive, counts right), never timings against a bound."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from contenox_bench import bigrepo, bigrepo_edits, bigrepo_workspace, goals
from contenox_bench.main import SECTIONS, selected_sections
from contenox_lsp.errors import InputError

SIZE = 60
EDITS = 3


def _apply(source: str, change: dict[str, Any]) -> str:
    """One insertion event (ASCII sources: utf-16 units are characters)."""
    start, end = change["range"]["start"], change["range"]["end"]
    assert start == end
    lines = source.splitlines(keepends=True)
    offset = sum(len(x) for x in lines[: start["line"]]) + start["character"]
    return source[:offset] + change["text"] + source[offset:]


def test_workspace_is_deterministic_and_repeats_under_copy_prefixes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in ("b/x.py", "b/y.py", "a/z.py", "c.py", "a/notes.txt", "a/__pycache__/q.py"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(f"# {rel}\n", encoding="utf-8")
    order = bigrepo_workspace.source_files(src, seed=1)
    assert order == bigrepo_workspace.source_files(src, seed=1)
    assert sorted(map(str, order)) == ["a/z.py", "b/x.py", "b/y.py", "c.py"]
    ws = bigrepo_workspace.make(tmp_path / "ws", 10, src, seed=1)
    assert (ws.files, ws.copies, ws.source_files) == (10, 3, 4)
    copied = sorted(p.relative_to(ws.root) for p in ws.root.rglob("*.py"))
    assert len(copied) == 10
    assert {p.parts[0] for p in copied} == {"copy0", "copy1", "copy2"}
    # The last copy holds the first files of the same sequence.
    assert sorted(p.relative_to("copy2") for p in copied if p.parts[0] == "copy2") == \
        sorted(order[:2])
    assert ws.bytes == sum((ws.root / p).stat().st_size for p in copied)


def test_edits_are_single_insertions_that_keep_the_module_valid(tmp_path: Path) -> None:
    source = ("import os\n\n\nclass A:\n    def one(self, x):\n        return x\n\n\n"
              "def two(*args, **kw):\n    y = os.sep\n    return y\n")
    sig = bigrepo_edits.signature_edit("m.py", source)
    assert sig is not None and sig.function == "one"
    assert _apply(source, sig.change) == sig.text
    assert "def one(self, x, bench_extra: int = 0):" in sig.text
    # Past **kw nothing can be appended: the next function that takes it is chosen instead.
    only_kw = "def f(**kw):\n    pass\n\n\ndef g():\n    pass\n"
    sig2 = bigrepo_edits.signature_edit("n.py", only_kw)
    assert sig2 is not None and sig2.function == "g" and "def g(bench_extra: int = 0):" in sig2.text
    body = bigrepo_edits.body_edit("m.py", source)
    assert body is not None and body.function == "one"
    assert _apply(source, body.change) == body.text
    assert "        return x\n        _bench_edit = 1\n" in body.text
    for edit in (sig, sig2, body):
        ast.parse(edit.text)
    files = []
    for i, text in enumerate((source, "x = 1\n", only_kw)):
        files.append(str(tmp_path / f"f{i}.py"))
        Path(files[-1]).write_text(text, encoding="utf-8")
    picked = bigrepo_edits.pick(files, 5, 0, bigrepo_edits.signature_edit)
    assert sorted(e.path for e in picked) == [files[0], files[2]]  # f1 has no function
    assert bigrepo_edits.pick(files, 5, 0, bigrepo_edits.signature_edit) == picked
    assert [e.path for e in bigrepo_edits.pick(files, 1, 0, bigrepo_edits.signature_edit,
                                               first=[files[2]])] == [files[2]]
    # The functions a map shows are edited first where asked.
    shown = bigrepo_edits.shown_functions(
        "f0.py:\n  class A:\n    def two(*args, **kw):\nREADME.md\nf2.py:\n  def g():\n",
        str(tmp_path))
    assert shown == {files[0]: {"two"}, files[2]: {"g"}}
    two_defs = "def f(x):\n    pass\n\n\ndef g(y):\n    pass\n"
    preferred = bigrepo_edits.signature_edit("p.py", two_defs, {"g"})
    assert preferred is not None and "def g(y, bench_extra: int = 0):" in preferred.text
    # A shown function that cannot take one more parameter: another one is edited.
    fallback = bigrepo_edits.signature_edit(files[0], source, shown[files[0]])
    assert fallback is not None and fallback.function == "one"


def test_sections_option() -> None:
    assert selected_sections(None) == SECTIONS and "bigrepo" in SECTIONS
    assert selected_sections("bigrepo, runtime") == ("runtime", "bigrepo")
    with pytest.raises(InputError):
        selected_sections("bigrepo,nope")


@pytest.mark.timeout(300)
def test_bigrepo_section_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", "bench", "--sections", "bigrepo",
         "--bigrepo-sizes", f"{SIZE},{SIZE * 2}", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert len(proc.stdout.strip().splitlines()) == 1
    r = json.loads((out / "report.json").read_text("utf-8"))
    assert r["config"]["bigrepo"]["sizes"] == [SIZE, SIZE * 2]
    for name in SECTIONS:
        if name != "bigrepo":
            assert r["sections"][name]["status"].startswith("skipped: not selected")
    sec = r["sections"]["bigrepo"]
    assert sec["status"] == "ok", sec["status"]
    assert sec["source_files"] > SIZE * 2 and sec["map_tokens"] == 1024  # the server's default
    assert [row["files"] for row in sec["rows"]] == [SIZE, SIZE * 2]
    edits = r["config"]["bigrepo"]["edits"]
    for row in sec["rows"]:
        n = row["files"]
        assert row["status"] == "ok" and row["copies"] == 1 and row["bytes"] > 0
        assert row["indexed_files"] + row["skipped_files"] == n
        assert row["parsed_files"] == row["indexed_files"] and row["definitions"] > n
        for key in ("cold_build_s", "first_map_s", "restart_build_s", "restart_first_map_s",
                    "save_s", "walk_s"):
            assert row[key] > 0, key
        assert row["first_answer_s"] == pytest.approx(row["cold_build_s"] + row["first_map_s"])
        assert 0 < row["first_map"]["tokens"] <= 1024 and row["first_map"]["files"] > 0
        for kind in ("signature", "body"):
            figures = row[kind]
            assert figures["n"] == edits and figures["map_ms"]["n"] == edits
            assert all(x > 0 for x in figures["map_ms"]["samples"])
            assert 0 < figures["map_p50_ms"] <= figures["map_p95_ms"]
            assert figures["update_ms"]["n"] == edits
        # A signature edit changes the file's outline; a body edit changes nothing shown.
        assert row["signature"]["index_changed"] == edits
        assert row["body"]["maps_changed"] == 0
        assert row["focus_map_s"]["n"] == r["config"]["bigrepo"]["focus_changes"]
        # The restart parses nothing and shows the map it saved.
        assert row["restart_reused_files"] == row["indexed_files"]
        assert row["restart_parsed_files"] == 0 and row["restart_map_same"] is True
        assert row["cache_bytes"] > 0
        assert row["peak_rss_bytes"] >= max(row["cold_peak_rss_bytes"],
                                            row["restart_peak_rss_bytes"]) > 0
        assert set(row["goals"]) == {"cold_build", "restart", "signature_map", "rss"}
        assert all(v in (True, False) for v in row["goals"].values())

    judged = [g for g in r["goals"] if g["id"].startswith("bigrepo_")]
    assert {g["id"] for g in judged} == {"bigrepo_cold_build", "bigrepo_restart",
                                         "bigrepo_signature_map", "bigrepo_rss"}
    for g in judged:
        assert g["status"] in ("met", "not met") and g["values"]["files"] == SIZE * 2
        assert f"{SIZE * 2} files, not the goal's 20,000" in g["note"]
    md = (out / "report.md").read_text("utf-8")
    assert "## 13. Big repositories" in md
    assert f"| {SIZE} files (" in md and f"| {SIZE * 2} files (" in md
    assert "cold build() ≤ 60 s" in md


def test_goals_without_the_section_are_not_measured() -> None:
    judged = [g for g in goals.evaluate({}) if g["id"].startswith("bigrepo_")]
    assert len(judged) == 4 and all(g["status"] == "not measured" for g in judged)
    assert bigrepo.markdown({"status": "not run"})[2] == "Section not run."
