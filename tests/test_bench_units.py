"""Benchmark building blocks that need no model: stats, the trace script, prompt reordering for
the baselines, the bench profile file, the backends section's plan and summary, the report
on sections that did not run, and what is not applicable on a backend without snapshots."""

from __future__ import annotations

import ast
import io
import itertools
from pathlib import Path

from contenox_bench import (
    applicable,
    backends,
    backends_plan,
    goals,
    report,
    runtime,
    scaling,
    trace,
)
from contenox_bench.backends_plan import PromptSpec, Step
from contenox_bench.baselines import contenox_order, editor_order
from contenox_bench.config import QUICK
from contenox_bench.corpus import PRIMER_TEXT, cold_reset
from contenox_bench.profile_file import bench_profile, write_toml
from contenox_bench.progress import Progress
from contenox_bench.stats import first_mismatch, ratio, summary
from contenox_bench.trace_script import (
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


# ----------------------------------------------------------------------------- not applicable


class _Session:
    """What the applicability checks read of a session (``backend``, ``capabilities``), and a
    record of the calls ``cold_reset`` makes; no model behind it."""

    def __init__(self, backend: str, **caps: bool) -> None:
        self.backend = backend
        self.capabilities = {"snapshots": True, "branches": True, "cancel": True,
                             "prefix_reuse": True} | caps
        self.calls: list[tuple[str, int]] = []

    def reset(self) -> None:
        self.calls.append(("reset", 0))

    def prefill(self, tokens: list[int]) -> None:
        self.calls.append(("prefill", len(tokens)))


LLAMA = _Session("llama")
OPENVINO = _Session("openvino", snapshots=False, branches=False)


def test_not_applicable_follows_capabilities_then_the_bare_loop_backend() -> None:
    assert applicable.lacks(LLAMA, "snapshots") is None
    assert applicable.lacks(LLAMA, "branches") is None and applicable.bare_loop(LLAMA) is None
    snap = applicable.lacks(OPENVINO, "snapshots")
    assert snap == ("not applicable: the openvino backend has no snapshots (save/restore of the "
                    "sequence's KV state)")
    assert applicable.lacks(OPENVINO, "branches") == (
        "not applicable: the openvino backend has no parked branches")
    assert applicable.lacks(OPENVINO, "cancel") is None  # OpenVINO cancels between steps
    # The capability decides, not the backend's name.
    assert applicable.lacks(_Session("llama", branches=False), "branches") is not None
    assert applicable.lacks(_Session("other"), "snapshots") is None
    assert applicable.lacks(object(), "snapshots") is not None  # no capabilities: none
    bare = applicable.bare_loop(OPENVINO)
    assert bare is not None and bare.startswith("not applicable: ") and "openvino" in bare
    assert applicable.is_not_applicable(snap) and applicable.is_not_applicable({"status": snap})
    assert not applicable.is_not_applicable({"status": "ok"})
    assert not applicable.is_not_applicable(None)
    assert applicable.row("snapshot_save", "snapshot save", snap) == {
        "name": "snapshot_save", "label": "snapshot save", "status": snap, "check": "n/a"}
    assert runtime.not_applicable(LLAMA) == {"snapshots": None, "cancel": None,
                                             "bare_loop": None}
    assert runtime.not_applicable(OPENVINO) == {"snapshots": snap, "cancel": None,
                                                "bare_loop": bare}


def _runtime_section(session: _Session) -> dict[str, object]:
    """The runtime section as ``runtime.run`` reports it, from made-up samples."""
    s = runtime._Samples()
    for key, value in (("cold_ms", 200.0), ("cold_tps", 2560.0), ("same_ms", 5.0),
                       ("suffix_ms", 30.0), ("decode_tps", 50.0), ("decode_step_ms", 20.0)):
        s.add(key, value)
    checks = {"warm_same_prefix": [True], "warm_changed_suffix": [True]}
    na = runtime.not_applicable(session)
    if na["snapshots"] is None:
        s.add("save_ms", 3.0)
        s.add("restore_ms", 2.0)
        checks["snapshot_restore"] = [True]
    else:
        checks["decode"] = [True]
    facts: dict[str, object] = {"cancel_committed": [], "cancel_missed": 0}
    sec = runtime._report(QUICK, 512, 64, 4, s, checks, facts, ("repo map", 100, 300), 120,
                          250.0, na)
    if na["bare_loop"] is None:
        ms = summary([100.0], "ms")
        sec["overhead"] = {"status": "ok", "tokens": 512, "pairs": 1, "engine_ms": ms,
                           "bare_ms": ms, "engine_tokens_per_s": summary([5120.0], "tokens/s"),
                           "bare_tokens_per_s": summary([5120.0], "tokens/s"),
                           "engine_over_bare_time": summary([1.0], "ratio")}
    else:
        sec["overhead"] = {"status": na["bare_loop"]}
    return sec


def test_runtime_rows_without_snapshots_are_not_applicable_never_dropped() -> None:
    sec = _runtime_section(OPENVINO)
    rows = {r["name"]: r for r in sec["rows"]}  # type: ignore[attr-defined]
    assert set(rows) == {"cold_prefill", "warm_same_prefix", "warm_changed_suffix",
                         "edited_stable_segment", "snapshot_save", "snapshot_restore", "decode"}
    for name in ("snapshot_save", "snapshot_restore"):
        assert rows[name]["status"].startswith("not applicable: the openvino backend has no "
                                               "snapshots"), rows[name]
        assert rows[name]["check"] == "n/a" and "ms" not in rows[name]
    assert all(r["status"] == "ok" for n, r in rows.items() if not n.startswith("snapshot"))
    assert rows["decode"]["check"] == "pass"  # checked here instead of after a restore
    fails = {f["name"]: f for f in sec["failures"]}  # type: ignore[attr-defined]
    assert applicable.is_not_applicable(fails["corrupt_snapshot"])
    assert fails["cancelled_prefill"]["status"] == fails["over_context"]["status"] == "ok"

    on_llama = _runtime_section(LLAMA)
    assert all(r["status"] == "ok" for r in on_llama["rows"])  # type: ignore[attr-defined]
    assert all(f["status"] == "ok" for f in on_llama["failures"])  # type: ignore[attr-defined]


def test_goals_on_not_applicable_rows_are_not_evaluated_and_the_report_says_why() -> None:
    by = {g["id"]: g for g in goals.evaluate({"runtime": _runtime_section(OPENVINO)})}
    for gid in ("snapshot_restore", "engine_overhead"):
        assert by[gid]["met"] is None and by[gid]["status"] == "not evaluated", by[gid]
        assert by[gid]["measured"].startswith("not evaluated (not applicable: ")
    assert by["warm_suffix_ttft"]["status"] == "not measured"  # no curve section given
    on_llama = {g["id"]: g for g in goals.evaluate({"runtime": _runtime_section(LLAMA)})}
    assert on_llama["snapshot_restore"]["status"] == "met"  # 200 ms vs 2 ms: 100x
    assert on_llama["engine_overhead"]["status"] == "met"
    assert {g["status"] for g in on_llama.values()} <= set(goals.GOAL_STATUSES)

    sections: dict[str, dict[str, object]] = {
        name: {"status": "not run: test"} for name in ("curve", "trace", "scaling", "backends")}
    sections["runtime"] = _runtime_section(OPENVINO)
    r = {
        "mode": "quick", "started_at": "now", "duration_s": 1.0,
        "machine": {"cpu_count": 2, "loadavg_start": None, "loadavg_end": None},
        "profile": {"profile_id": "p", "model": "m", "backend": "openvino",
                    "values": {"profile.backend": "openvino"}},
        "sections": sections, "goals": goals.evaluate(sections), "plots": {},
    }
    md = report.markdown(r)
    assert "Backend **openvino**" in md
    assert md.count("| not evaluated |") == 2
    assert ("| snapshot save (512-token prefix) | – | – | – | not applicable: the openvino "
            "backend has no snapshots") in md
    assert "| engine cold prefill vs a bare llama-cpp-python loop | – | – | – | not applicable: "\
        in md
    assert "| corrupt snapshot (one flipped byte) | not applicable: " in md


def test_scaling_trace_and_profile_file_on_another_backend(tmp_path: Path) -> None:
    assert "not applicable: the openvino backend has no snapshots" in scaling._note(
        applicable.lacks(OPENVINO, "snapshots"))
    assert trace.systems("llama") == trace.SYSTEMS
    ov = trace.systems("openvino")
    assert ov["a"] == trace.SYSTEMS["a"] and "openvino" in ov["c"] and "openvino" in ov["d"]
    assert trace.ttft_definition("llama") == trace.TTFT_DEFINITION != trace.ttft_definition("ov")

    # A relative openvino.model_dir stays relative to the user's profile in the written copy.
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "ov.toml").write_text(
        '[profile]\nbackend = "openvino"\n[openvino]\nmodel_dir = "ir"\n', encoding="utf-8")
    profile, _ = bench_profile(str(tmp_path / "user" / "ov.toml"), None, 4096)
    written = load_profile(write_toml(profile, tmp_path / "bench.toml"))
    assert written.backend == "openvino"
    assert written.get("openvino.model_dir") == str((tmp_path / "user" / "ir").resolve())


def test_cold_reset_empties_the_cache_then_runs_the_untimed_primer() -> None:
    session = _Session("openvino", snapshots=False)
    cold_reset(session, [7, 8, 9])
    assert session.calls == [("reset", 0), ("prefill", 3)]
    assert not PRIMER_TEXT.startswith("<")  # plain text: never a turn marker or BOS first


def test_rebuilt_server_prompt_pads_the_stable_region_to_whole_blocks() -> None:
    """With cache.block_size > 1 the assembler pads segments A–F with newline tokens (in no
    segment's text); the rebuild for system c must too, or it is shorter than the server's."""
    segs = [
        {"kind": "system", "text": OPEN + "SYSTEM\n\n"},
        {"kind": "pinned", "text": "PIN\n\n"},
        {"kind": "user", "text": "Question: why?" + CLOSE},
    ]

    def tok(text: str, special: bool) -> list[int]:
        return [-1] if special else [ord(c) for c in text]

    plain = contenox_order(segs, tok, 2, OPEN, CLOSE)
    padded = contenox_order(segs, tok, 2, OPEN, CLOSE, block_size=32)
    stable = 1 + 1 + len("SYSTEM\n\n") + len("PIN\n\n")  # BOS, open marker, A, F
    assert plain[:stable] == padded[:stable] and len(padded[:stable]) == stable
    assert padded[stable:32] == [ord("\n")] * (32 - stable)  # after F, before the user turn
    assert padded[32:] == plain[stable:]
    assert contenox_order(segs, tok, 2, OPEN, CLOSE, block_size=1) == plain


def test_rebuilt_server_prompt_pads_before_the_user_turn_too() -> None:
    """With a diff between the stable region and the user turn, the assembler also pads the
    diff's end to a whole block (the idle pre-prefill ends there); so must the rebuild."""
    segs = [
        {"kind": "system", "text": OPEN + "SYSTEM\n\n"},
        {"kind": "diff", "text": "DIFF\n\n"},
        {"kind": "user", "text": "Question: why?" + CLOSE},
    ]

    def tok(text: str, special: bool) -> list[int]:
        return [-1] if special else [ord(c) for c in text]

    plain = contenox_order(segs, tok, 2, OPEN, CLOSE)
    padded = contenox_order(segs, tok, 2, OPEN, CLOSE, block_size=16)
    stable = 1 + 1 + len("SYSTEM\n\n")
    assert padded[:stable] == plain[:stable]
    assert padded[stable:16] == [ord("\n")] * (16 - stable)
    assert padded[16 : 16 + len("DIFF\n\n")] == [ord(c) for c in "DIFF\n\n"]
    assert padded[16 + len("DIFF\n\n") : 32] == [ord("\n")] * (16 - len("DIFF\n\n"))
    assert padded[32:] == plain[stable + len("DIFF\n\n") :]
