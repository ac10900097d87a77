"""Benchmark building blocks that need no model: stats, the trace script, prompt reordering for
the baselines, the bench profile file, the backends section's plan and summary, and the report
on sections that did not run."""

from __future__ import annotations

import ast
import io
import itertools
from pathlib import Path

from contenox_lsp.benchmark import backends, backends_plan, goals, report
from contenox_lsp.benchmark.backends_plan import PromptSpec, Step
from contenox_lsp.benchmark.baselines import contenox_order, editor_order
from contenox_lsp.benchmark.config import QUICK
from contenox_lsp.benchmark.profile_file import bench_profile, write_toml
from contenox_lsp.benchmark.progress import Progress
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
                for name in ("runtime", "curve", "trace", "scaling", "backends")}
    r = {
        "mode": "quick", "started_at": "now", "duration_s": 1.0,
        "machine": {"cpu_count": 2, "loadavg_start": None, "loadavg_end": None},
        "profile": {"profile_id": "p", "model": "m", "values": {}},
        "sections": sections, "goals": goals.evaluate(sections), "plots": {},
    }
    md = report.markdown(r)
    assert md.count("Section not run: test.") == 5
    assert "## 5. Backends: llama.cpp vs OpenVINO" in md
    assert all(g["met"] is None for g in r["goals"])


# ----------------------------------------------------------------------------- backends section


def test_largest_at_most_gallops_and_bisects() -> None:
    calls: list[int] = []

    def f(k: int) -> int:
        calls.append(k)
        return 3 * k

    assert backends_plan.largest_at_most(f, 100, 1, 10_000) == 33
    assert max(calls) < 70  # never probes far beyond the answer
    assert backends_plan.largest_at_most(f, 2, 1, 50) == 1  # even lo is over: lo
    assert backends_plan.largest_at_most(f, 10**6, 1, 50) == 50  # all fit: hi
    assert backends_plan.largest_at_most(f, 9, 3, 3) == 3


def test_nonce_text_differs_at_the_first_digit_from_the_previous_nonce() -> None:
    texts = [backends_plan.nonce_text(n) for n in range(0, 40)]
    assert all(len(t) == 6 and t.isdigit() for t in texts)
    assert all(a[0] != b[0] for a, b in itertools.pairwise(texts))


def test_build_inputs_is_deterministic_and_sized_by_lines() -> None:
    spec = PromptSpec(nonce=7, pin_lines=50, variant=2, cursor_lines=5)
    a, b = backends_plan.build_inputs(spec), backends_plan.build_inputs(spec)
    assert a == b
    assert sum(p.end_line - p.start_line + 1 for p in a.pins) == 50
    assert a.user.cursor_context is not None and a.user.cursor_context.count("\n") == 5
    assert backends_plan.nonce_text(7) in a.system_prompt
    other = backends_plan.build_inputs(PromptSpec(7, 50, 1, 5))
    assert other.pins == a.pins and other.user != a.user  # only the suffix changes
    many = backends_plan.pins(backends_plan.max_pin_lines() + 100)  # capped by the files
    assert sum(p.end_line for p in many) == backends_plan.max_pin_lines()


def _fake_count(spec: PromptSpec) -> tuple[int, int]:
    """Like the assembler: 100 fixed tokens + 10 per pinned line, padded to 32-token blocks,
    then a user turn of 20 + 7 per line (variant 2 a little longer)."""
    stable = 100 + 10 * spec.pin_lines
    stable += -stable % 32
    return stable + 20 + 7 * spec.cursor_lines + (3 if spec.variant == 2 else 0), stable


def test_fit_meets_the_sizes_and_the_schedule_keeps_cold_prompts_cold() -> None:
    plan = backends_plan.fit(_fake_count, QUICK)
    total, stable = _fake_count(PromptSpec(0, plan.warm_pin_lines, 2, plan.cursor_lines))
    assert stable <= QUICK.backends_prefix < _fake_count(
        PromptSpec(0, plan.warm_pin_lines + 4, 2, plan.cursor_lines))[1]
    assert total - stable <= QUICK.backends_suffix
    for size, lines in plan.cold_pin_lines:
        assert _fake_count(PromptSpec(0, lines, 1, plan.cursor_lines))[0] <= size
    assert plan.warmup_pin_lines == max(k for _, k in plan.cold_pin_lines)

    steps = backends_plan.schedule(plan, QUICK)
    assert len(steps) == backends_plan.n_steps(QUICK)
    assert len({s.key for s in steps}) == len(steps)
    assert {s.kind for s in steps} == set(backends_plan.KINDS)
    # Every cold request has a nonce no earlier request had; warm reuses its prime's nonce.
    seen: set[int] = {backends_plan.warmup(plan).nonce}
    for i, s in enumerate(steps):
        if s.kind == "warm":
            prime = steps[i - 1]
            assert prime.kind == "prime" and prime.prompt.nonce == s.prompt.nonce
            assert prime.prompt.variant != s.prompt.variant
            assert s.max_tokens >= QUICK.decode_tokens
        else:
            assert s.prompt.nonce not in seen
        seen.add(s.prompt.nonce)
        if s.kind == "cold_same":
            warm = steps[i - 1]
            assert (s.prompt.pin_lines, s.prompt.variant) == (warm.prompt.pin_lines,
                                                               warm.prompt.variant)
    assert Step.from_dict(steps[0].to_dict()) == steps[0]


def test_compare_prompts_and_greedy() -> None:
    same = backends.compare_prompts({"a": [1, 2], "b": [3]}, {"a": [1, 2], "b": [3]})
    assert same == {"same_tokens": True, "prompts_compared": 2, "first_difference": None}
    diff = backends.compare_prompts({"a": [1, 2], "b": [3]}, {"a": [1, 5], "b": [3]})
    assert diff["same_tokens"] is False
    assert diff["first_difference"] == {"step": "a", "at": 1, "tokens": [2, 2]}
    assert backends.compare_prompts({}, {"a": [1]})["same_tokens"] is None

    g = backends.compare_greedy({"a": [1, 2, 3], "b": [4]}, {"a": [1, 2, 9], "b": [5]}, 2)
    assert (g["first_tokens_equal"], g["first_token_equal"], g["all_equal"]) == (1, False, False)
    assert g["mismatches"] == [{"step": "b", "at": 0}]
    assert backends.compare_greedy({"a": [1, 2, 3]}, {"a": [1, 2, 9]}, 2)["all_equal"] is True


def _child_result(steps: list[Step], scale: float, status: str = "ok") -> dict[str, object]:
    out: dict[str, object] = {
        "status": status, "model": "m", "load_s": 1.0, "peak_rss_bytes": int(512 * scale) << 20,
        "steps": {}, "prompt_ids": {},
    }
    if status != "ok":
        return out
    for s in steps:
        n = 600 if s.kind != "cold" else s.size
        out["steps"][s.key] = {  # type: ignore[index]
            "kind": s.kind, "prompt_tokens": n, "stable_end": 512, "reused_tokens":
            512 if s.kind == "warm" else 0, "new_tokens": 88 if s.kind == "warm" else n,
            "prefill_ms": n * scale, "ttft_ms": (100.0 if s.kind == "warm" else 1000.0) * scale,
            "decode_tokens": s.max_tokens, "decode_tok_s": 20.0 / scale, "output": [1, 2, 3, 4],
        }
        out["prompt_ids"][s.key] = [1, 2, n]  # type: ignore[index]
    return out


def test_summarize_rows_ratios_and_a_failed_backend() -> None:
    steps = backends_plan.schedule(backends_plan.fit(_fake_count, QUICK), QUICK)
    sec = backends.summarize(QUICK, steps, {"llama": _child_result(steps, 2.0),
                                            "openvino": _child_result(steps, 1.0)})
    assert sec["status"] == "ok" and sec["same_tokens"] is True
    names = [r["name"] for r in sec["rows"]]
    assert names == [f"cold_prefill_{n}" for n in QUICK.backends_cold_sizes] + [
        "cold_ttft", "warm_suffix_ttft", "decode", "peak_rss"]
    by = {r["name"]: r for r in sec["rows"]}
    assert by["cold_ttft"]["ov_over_llama"] == 0.5  # OpenVINO twice as fast here
    assert by["decode"]["ov_over_llama"] == 2.0
    assert by["cold_prefill_512"]["llama"]["median"] == 500.0  # tokens / s
    assert by["peak_rss"]["llama"]["median"] == 1024.0
    assert by["warm_suffix_ttft"]["warm_over_cold"] == {"llama": 0.1, "openvino": 0.1}
    assert sec["greedy"]["all_equal"] is True
    md = report._backends(sec)
    assert any(line.startswith("| row | llama.cpp | OpenVINO | OV/llama ratio |") for line in md)
    assert any("Same token ids from the assembler on both backends: **yes**" in x for x in md)

    broken = backends.summarize(QUICK, steps, {
        "llama": _child_result(steps, 1.0),
        "openvino": _child_result(steps, 1.0, "failed: ModelLoadError: no"),
    })
    assert broken["status"] == "failed: openvino: ModelLoadError: no"
    assert broken["same_tokens"] is None
    cold = next(r for r in broken["rows"] if r["name"] == "cold_ttft")
    assert cold["llama"]["n"] > 0 and cold["openvino"]["n"] == 0 and cold["ov_over_llama"] is None
    assert "Section failed" in "\n".join(report._backends(broken))


def test_openvino_skip_reason_names_the_fix(tmp_path: Path) -> None:
    profile = load_profile(None)
    found, reason = backends.openvino_model_dir(profile, str(tmp_path / "nowhere"))
    assert found is None
    if "not importable" in reason:
        assert backends.OPENVINO_INSTALL in reason
    else:  # the folder given is not an IR folder: say so, and how to make one there
        assert "openvino_model.xml" in reason
        assert f"contenox-lsp model convert --to openvino embedded:gemma3-270m {tmp_path}" in reason


def test_backends_section_is_skipped_not_failed_without_a_model(tmp_path: Path) -> None:
    progress = Progress(backends.planned_units(QUICK), stream=io.StringIO())
    sec = backends.run(load_profile(None), QUICK, str(tmp_path / "nowhere"), tmp_path,
                       tmp_path, progress)
    assert set(sec) == {"status"} and sec["status"].startswith("skipped: ")
    assert "contenox-lsp model convert --to openvino" in sec["status"]
    assert progress.done == progress.total  # the bar still reaches 100%
