"""Section 1: the runtime report — where the time goes on one warm engine session.

Per repetition, on one stable prefix P and one changed suffix S: cold prefill of P, warm same
prefix, warm changed suffix, an edited stable segment, snapshot save/restore, decode, and the
failure cases. Every answer is checked against a cold greedy reference of the same prompt.
Then the engine's cold prefill is paired with a bare llama.cpp loop on the same tokens.

On a backend without snapshots (``session.capabilities``) the snapshot rows and the corrupt
snapshot case are ``not applicable`` and decode is measured after the warm changed suffix; on a
backend other than llama.cpp the engine-vs-bare-loop comparison is ``not applicable``
(``applicable``).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contenox_bench import applicable
from contenox_bench.bare import BareContext, BareModel
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import Corpus, cold_reset
from contenox_bench.progress import Progress
from contenox_bench.stats import check, first_mismatch, summary
from engine.errors import (
    CancelledError,
    ContextOverflowError,
    EngineError,
    SnapshotCorruptError,
)

UNITS_PER_REP = 8


def planned_units(cfg: BenchConfig) -> int:
    return 2 + cfg.reps * UNITS_PER_REP + cfg.overhead_pairs


def not_applicable(session: Any) -> dict[str, str | None]:
    """Per requirement of some rows (``snapshots``, ``cancel``, ``bare_loop``): None where this
    session meets it, else the ``not applicable: ...`` status those rows get."""
    return {"snapshots": applicable.lacks(session, "snapshots"),
            "cancel": applicable.lacks(session, "cancel"),
            "bare_loop": applicable.bare_loop(session)}


class _Samples(dict[str, list[float]]):
    def add(self, key: str, value: float) -> None:
        self.setdefault(key, []).append(value)


def run(session: Any, bare_model: BareModel | None, corpus: Corpus, cfg: BenchConfig,
        tmp: Path, progress: Progress) -> dict[str, Any]:
    """``bare_model`` is None where the bare-loop comparison does not apply (its row says
    why)."""
    P, S, G = cfg.runtime_prefix, cfg.runtime_suffix, cfg.greedy_tokens
    na = not_applicable(session)
    if na["bare_loop"] is None and bare_model is None:
        raise ValueError("the bare-loop comparison applies to this session: pass a BareModel")
    snapshots = na["snapshots"] is None
    prefix = corpus.stable(P)
    edited = corpus.stable(P, edited=True)
    suffix = corpus.suffix(S, variant=1)
    full = prefix.tokens + suffix
    edited_full = edited.tokens + suffix
    # None when the prefix is too short to reach the repo map (tiny sizes only).
    edit_at = first_mismatch(prefix.tokens, edited.tokens)
    seg = next((s for s in prefix.segments if edit_at is not None and s[1] <= edit_at < s[2]),
               ("none", 0, 0))

    # Cold greedy references (what every warm path must reproduce).
    progress.note("runtime: cold reference of P+S")
    cold_reset(session, corpus.primer())
    session.prefill(full)
    ref_full = session.generate(G)
    progress.step("runtime: cold reference of the edited prompt")
    ref_edited: list[int] | None = None
    if edit_at is not None:
        cold_reset(session, corpus.primer())
        session.prefill(edited_full)
        ref_edited = session.generate(G).tokens
    progress.step("runtime: repetitions")

    s = _Samples()
    checks: dict[str, list[bool]] = {}
    facts: dict[str, Any] = {"cancel_committed": [], "cancel_missed": 0}
    snap = tmp / "prefix.snap"
    ref_prefix: list[int] | None = None
    for rep in range(cfg.reps):
        cold_reset(session, corpus.primer())
        r = session.prefill(prefix.tokens)
        s.add("cold_ms", r.prefill_ms)
        s.add("cold_tps", P / r.prefill_ms * 1000.0)
        if snapshots:
            saved = session.save_snapshot(snap)
            s.add("save_ms", saved.ms)
            facts["snapshot_bytes"] = saved.bytes
        g = session.generate(G)
        s.add("cold_ttft", g.ttft_ms)
        if ref_prefix is None:
            ref_prefix = g.tokens
        progress.step(f"runtime {rep + 1}/{cfg.reps}: warm same prefix")

        r = session.prefill(prefix.tokens)
        g = session.generate(G)
        s.add("same_ms", r.prefill_ms)
        s.add("same_ttft", g.ttft_ms)
        facts["same_tokens"] = (r.reused_tokens, r.new_tokens)
        checks.setdefault("warm_same_prefix", []).append(g.tokens == ref_prefix)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: warm changed suffix")

        r = session.prefill(full)
        g = session.generate(G)
        s.add("suffix_ms", r.prefill_ms)
        s.add("suffix_ttft", g.ttft_ms)
        facts["suffix_tokens"] = (r.reused_tokens, r.new_tokens)
        checks.setdefault("warm_changed_suffix", []).append(g.tokens == ref_full.tokens)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: edited stable segment")

        if ref_edited is not None:
            r = session.prefill(edited_full)
            g = session.generate(G)
            s.add("edited_ms", r.prefill_ms)
            s.add("edited_ttft", g.ttft_ms)
            facts["edited_tokens"] = (r.reused_tokens, r.new_tokens)
            checks.setdefault("edited_stable_segment", []).append(g.tokens == ref_edited)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: "
                      + ("snapshot restore + decode" if snapshots else "decode"))

        if snapshots:
            session.reset()
            t0 = time.perf_counter()
            loaded = session.load_snapshot(snap)
            s.add("restore_ms", (time.perf_counter() - t0) * 1000.0)
            facts["restore_state_bytes"] = loaded.bytes
        # Without snapshots: P+S again after the edited prompt (warm up to the edit).
        r = session.prefill(full)
        g = session.generate(max(G, cfg.decode_tokens))
        facts["restore_tokens" if snapshots else "decode_prompt_tokens"] = (r.reused_tokens,
                                                                           r.new_tokens)
        if snapshots:
            s.add("restore_ttft", g.ttft_ms)
        if g.decode_tokens > 1 and g.decode_tok_s > 0:
            s.add("decode_tps", g.decode_tok_s)
            s.add("decode_step_ms", 1000.0 / g.decode_tok_s)
        checks.setdefault("snapshot_restore" if snapshots else "decode", []).append(
            g.tokens[:G] == ref_full.tokens)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: over-context rejection")

        _over_context(session, corpus, full, ref_full.tokens, s, checks, facts)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: corrupt snapshot")
        if snapshots:
            _corrupt_snapshot(session, snap, tmp, full, ref_full.tokens, s, checks, facts)
        progress.step(f"runtime {rep + 1}/{cfg.reps}: cancelled prefill")
        if na["cancel"] is None:
            _cancelled_prefill(session, corpus, full, ref_full.tokens, s, checks, facts)
        progress.step(f"runtime {rep + 1}/{cfg.reps} done")

    if bare_model is not None and na["bare_loop"] is None:
        overhead = _overhead(session, bare_model, corpus, cfg, progress)
    else:
        overhead = {"status": na["bare_loop"]}
        progress.step("runtime: engine vs bare loop not applicable", cfg.overhead_pairs)
    report = _report(cfg, P, S, G, s, checks, facts, seg, edit_at, ref_full.ttft_ms, na)
    report["backend"] = applicable.backend_of(session)
    report["capabilities"] = dict(getattr(session, "capabilities", {}))
    report["reuse_granularity"] = int(getattr(session, "reuse_granularity", 1))
    report["overhead"] = overhead
    return report


def _overhead(session: Any, bare_model: BareModel, corpus: Corpus, cfg: BenchConfig,
              progress: Progress) -> dict[str, Any]:
    """Engine cold prefill vs the bare loop on the same tokens, in interleaved pairs."""
    n = cfg.overhead_tokens
    tokens = corpus.stable(n).tokens
    bare = BareContext(bare_model)
    eng_ms: list[float] = []
    bare_ms: list[float] = []
    try:
        for i in range(cfg.overhead_pairs):
            # Alternate who goes first so slow drift (other load) hits both alike.
            for who in ("engine", "bare") if i % 2 == 0 else ("bare", "engine"):
                if who == "engine":
                    session.reset()
                    eng_ms.append(session.prefill(tokens).prefill_ms)
                else:
                    bare.clear()
                    bare_ms.append(bare.prefill(tokens))
            progress.step(f"runtime: engine vs bare loop {i + 1}/{cfg.overhead_pairs}")
    finally:
        bare.close()
    paired = [e / b for e, b in zip(eng_ms, bare_ms, strict=True)]
    return {
        "status": "ok",
        "tokens": n,
        "pairs": cfg.overhead_pairs,
        "engine_ms": summary(eng_ms, "ms"),
        "bare_ms": summary(bare_ms, "ms"),
        "engine_tokens_per_s": summary([n / ms * 1000.0 for ms in eng_ms], "tokens/s"),
        "bare_tokens_per_s": summary([n / ms * 1000.0 for ms in bare_ms], "tokens/s"),
        "engine_over_bare_time": summary(paired, "ratio"),
    }


def _over_context(session: Any, corpus: Corpus, full: list[int], ref: list[int],
                  s: _Samples, checks: dict[str, list[bool]], facts: dict[str, Any]) -> None:
    too_long = corpus.filler(session.n_ctx + 1)
    _rejection(session, lambda: session.prefill(too_long), ContextOverflowError,
               "overctx", "over_context", full, ref, s, checks, facts)


def _corrupt_snapshot(session: Any, snap: Path, tmp: Path, full: list[int], ref: list[int],
                      s: _Samples, checks: dict[str, list[bool]], facts: dict[str, Any]) -> None:
    bad = tmp / "corrupt.snap"
    shutil.copyfile(snap, bad)
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the KV state
    bad.write_bytes(bytes(data))
    _rejection(session, lambda: session.load_snapshot(bad), SnapshotCorruptError,
               "corrupt", "corrupt_snapshot", full, ref, s, checks, facts)


def _rejection(session: Any, call: Callable[[], object], error: type[EngineError], key: str,
               check_name: str, full: list[int], ref: list[int], s: _Samples,
               checks: dict[str, list[bool]], facts: dict[str, Any]) -> None:
    """Bad input must be refused with ``error`` and change no state: the resident tokens stay
    as they were and the next request still gives the cold reference ``ref``."""
    before = session.resident_tokens
    t0 = time.perf_counter()
    try:
        call()
        code = "accepted"
    except error as exc:
        code = exc.code
    s.add(f"{key}_ms", (time.perf_counter() - t0) * 1000.0)
    unchanged = session.resident_tokens == before
    facts[f"{key}_code"] = code
    session.prefill(full)
    g = session.generate(len(ref))
    checks.setdefault(check_name, []).append(
        code == error.code and unchanged and g.tokens == ref
    )
    facts.setdefault(f"{key}_unchanged", []).append(unchanged)


def _cancelled_prefill(session: Any, corpus: Corpus, full: list[int], ref: list[int],
                       s: _Samples, checks: dict[str, list[bool]],
                       facts: dict[str, Any]) -> None:
    """Cancel a cold prefill halfway, then time the next request on the same prompt."""
    cold_tps = s["cold_tps"][-1]
    delay = 0.5 * len(full) / cold_tps
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.perf_counter())
        session.cancel()

    cold_reset(session, corpus.primer())
    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        session.prefill(full)
        cancelled = False
    except CancelledError as exc:
        cancelled = True
        s.add("cancel_latency_ms", (time.perf_counter() - fired[-1]) * 1000.0)
        facts["cancel_committed"].append(int(exc.data.get("committed_tokens", 0)))
    finally:
        timer.cancel()
        timer.join()
    if not cancelled:
        facts["cancel_missed"] += 1  # the prefill finished before the timer fired
        return
    r = session.prefill(full)  # a new request clears the cancel flag
    g = session.generate(len(ref))
    s.add("recover_ttft", g.ttft_ms)
    facts.setdefault("recover_reused", []).append(r.reused_tokens)
    checks.setdefault("cancelled_prefill", []).append(g.tokens == ref)


def _all(xs: list[bool] | None) -> str:
    return check(None if not xs else all(xs))


def _report(cfg: BenchConfig, P: int, S: int, G: int, s: _Samples,
            checks: dict[str, list[bool]], facts: dict[str, Any], seg: tuple[str, int, int],
            edit_at: int | None, cold_full_ttft: float,
            na: dict[str, str | None]) -> dict[str, Any]:
    def st(key: str, unit: str = "ms") -> dict[str, Any]:
        return summary(s.get(key, []), unit)

    def toks(key: str) -> dict[str, int] | None:
        v = facts.get(key)
        return None if v is None else {"reused": v[0], "new": v[1]}

    def measured(item: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        """The row as measured, or (``reason``) its not-applicable line instead."""
        if reason is not None:
            return applicable.row(item["name"], item["label"], reason)
        return {"name": item["name"], "label": item["label"], "status": "ok"} | item

    rows: list[dict[str, Any]] = [
        {"name": "cold_prefill", "label": f"cold full prefill ({P} tokens)",
         "tokens": {"reused": 0, "new": P}, "ms": st("cold_ms"),
         "tokens_per_s": st("cold_tps", "tokens/s"), "ttft_ms": st("cold_ttft"), "check": "n/a"},
        {"name": "warm_same_prefix", "label": "warm same prefix", "tokens": toks("same_tokens"),
         "ms": st("same_ms"), "ttft_ms": st("same_ttft"),
         "check": _all(checks.get("warm_same_prefix"))},
        {"name": "warm_changed_suffix", "label": f"warm changed suffix ({S} tokens)",
         "tokens": toks("suffix_tokens"), "ms": st("suffix_ms"), "ttft_ms": st("suffix_ttft"),
         "check": _all(checks.get("warm_changed_suffix"))},
        {"name": "edited_stable_segment",
         "label": f"edited stable segment ('{seg[0]}', first change at token {edit_at})",
         "tokens": toks("edited_tokens"), "ms": st("edited_ms"), "ttft_ms": st("edited_ttft"),
         "segment": {"label": seg[0], "token_start": seg[1], "token_end": seg[2],
                     "first_changed_token": edit_at},
         "check": _all(checks.get("edited_stable_segment"))},
        {"name": "snapshot_save", "label": f"snapshot save ({P}-token prefix)",
         "ms": st("save_ms"), "bytes": facts.get("snapshot_bytes"), "check": "n/a"},
        {"name": "snapshot_restore", "label": f"snapshot restore ({P}-token prefix)",
         "ms": st("restore_ms"), "bytes": facts.get("restore_state_bytes"),
         "reprefill_ms": st("cold_ms"), "tokens": toks("restore_tokens"),
         "ttft_ms": st("restore_ttft"), "check": _all(checks.get("snapshot_restore"))},
        {"name": "decode", "label": f"decode ({cfg.decode_tokens} tokens)",
         "tokens_per_s": st("decode_tps", "tokens/s"), "step_ms": st("decode_step_ms"),
         # With snapshots the same decode is checked as snapshot_restore's answer.
         "tokens": toks("decode_prompt_tokens"), "check": _all(checks.get("decode"))},
    ]
    needs = {"snapshot_save": na["snapshots"], "snapshot_restore": na["snapshots"],
             "corrupt_snapshot": na["snapshots"], "cancelled_prefill": na["cancel"]}
    failures: list[dict[str, Any]] = [
        {"name": "cancelled_prefill", "label": "cancelled prefill, then the same request",
         "cancel_latency_ms": st("cancel_latency_ms"), "recover_ttft_ms": st("recover_ttft"),
         "committed_tokens": facts["cancel_committed"],
         "recover_reused_tokens": facts.get("recover_reused", []),
         "missed": facts["cancel_missed"], "check": _all(checks.get("cancelled_prefill"))},
        {"name": "over_context", "label": "over-context prompt (n_ctx + 1 tokens)",
         "reject_ms": st("overctx_ms"), "error_code": facts.get("overctx_code"),
         "state_unchanged": all(facts.get("overctx_unchanged", [False])),
         "check": _all(checks.get("over_context"))},
        {"name": "corrupt_snapshot", "label": "corrupt snapshot (one flipped byte)",
         "reject_ms": st("corrupt_ms"), "error_code": facts.get("corrupt_code"),
         "state_unchanged": all(facts.get("corrupt_unchanged", [False])),
         "check": _all(checks.get("corrupt_snapshot"))},
    ]
    rows = [measured(r, needs.get(r["name"])) for r in rows]
    failures = [measured(f, needs.get(f["name"])) for f in failures]
    return {
        "status": "ok",
        "prefix_tokens": P,
        "suffix_tokens": S,
        "greedy_tokens": G,
        "reps": cfg.reps,
        "cold_full_prompt_ttft_ms": cold_full_ttft,
        "rows": rows,
        "failures": failures,
        "greedy_checks": {k: _all(v) for k, v in checks.items()},
    }
