"""Benchmark building blocks that need no model: stats, the trace script, prompt reordering for
the baselines, the bench profile file, and the report on sections that did not run."""

from __future__ import annotations

import ast
from pathlib import Path

from contenox_lsp.benchmark import goals, report
from contenox_lsp.benchmark.baselines import contenox_order, editor_order
from contenox_lsp.benchmark.profile_file import bench_profile, write_toml
from contenox_lsp.benchmark.stats import first_mismatch, ratio, summary
from contenox_lsp.benchmark.trace_script import (
    STDLIB_TARGETS,
    Script,
    copy_stdlib_part,
    find_targets,
)
from engine import load_profile

OPEN, CLOSE = "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"


def test_summary_and_helpers() -> None:
    s = summary([3.0, 1.0, 2.0], "ms")
    assert (s["n"], s["median"], s["min"], s["max"], s["unit"]) == (3, 2.0, 1.0, 3.0, "ms")
    assert summary([], "ms")["median"] is None
    assert ratio(1.0, 0.0) is None and ratio(1.0, 4.0) == 0.25
    assert first_mismatch([1, 2, 3], [1, 2, 3]) is None
    assert first_mismatch([1, 2, 3], [1, 5, 3]) == 1
    assert first_mismatch([1, 2], [1, 2, 3]) == 2


def test_trace_script_edits_stay_valid_python(tmp_path: Path) -> None:
    root = copy_stdlib_part(tmp_path)
    targets = find_targets(root, STDLIB_TARGETS)
    script = Script(root, targets)
    texts: dict[Path, str] = {}
    kinds = ("open", "body_edit", "body_edit_2", "signature", "pin", "test_output",
             "body_edit_3")
    for kind in kinds:
        step = script.plan(kind, texts)
        for p in step.open_files:
            texts[p] = p.read_text("utf-8")
        for t in step.typing:
            lines = texts[t.path].split("\n")
            lines[t.line] = lines[t.line][: t.character] + t.text + lines[t.line][t.character :]
            texts[t.path] = "\n".join(lines)
        assert step.question
    for text in texts.values():
        ast.parse(text)
    assert "strict=False" in texts[targets.sig_file]
    # Nothing is written to the workspace: edits live in the buffers only.
    assert "strict=False" not in targets.sig_file.read_text("utf-8")


def test_baseline_prompts_keep_the_text_and_move_the_cursor_context_first() -> None:
    segs = [
        {"text": OPEN + "SYSTEM\n\n"},
        {"text": "TOOLS\n\n"},
        {"text": "MAP\n\n"},
        {"text": "File: a.py, line 3\n\nCode around the cursor:\nCURSOR\nQuestion: why?" + CLOSE},
    ]

    def tok(text: str, special: bool) -> list[int]:
        return [-1] if special else [ord(c) for c in text]

    ours = contenox_order(segs, tok, 2, OPEN, CLOSE)
    plugin = editor_order(segs, "why?", tok, 2, OPEN, CLOSE)
    assert sorted(ours) == sorted(plugin)  # same content, other order
    text = "".join(chr(t) for t in plugin if t > 2)
    assert text.index("CURSOR") < text.index("SYSTEM") < text.index("MAP") < text.index("why?")
    assert plugin[:2] == [2, -1] and plugin[-1] == -1  # BOS, open marker ... close marker


def test_bench_profile_file_round_trips(tmp_path: Path) -> None:
    profile, overrides = bench_profile(None, None, 10240)
    assert overrides["context.n_ctx"] == 10240 and profile.get("sampler.temperature") == 0.0
    written = load_profile(write_toml(profile, tmp_path / "p.toml"))
    assert dict(written.values) == dict(profile.values)


def test_report_renders_sections_that_did_not_run() -> None:
    sections = {name: {"status": "not run: test"}
                for name in ("runtime", "curve", "trace", "scaling")}
    r = {
        "mode": "quick", "started_at": "now", "duration_s": 1.0,
        "machine": {"cpu_count": 2, "loadavg_start": None, "loadavg_end": None},
        "profile": {"profile_id": "p", "model": "m", "values": {}},
        "sections": sections, "goals": goals.evaluate(sections), "plots": {},
    }
    md = report.markdown(r)
    assert md.count("Section not run: test.") == 4
    assert all(g["met"] is None for g in r["goals"])
