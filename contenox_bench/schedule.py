"""Section "schedule": what the exact-reuse schedule costs, side by side in one run.

The same model under five engine settings, each an in-process session of the bench profile
with a few overrides, measured in interleaved rounds (the order alternates per round, so a
busy machine slows all of them alike):

- ``invariant``: the default (weights not repacked, micro-batches of ``n_ubatch``, the
  minimum micro-batch measured at load; token-granular reuse);
- ``flash``: the same with flash attention on (two regimes measured at load: tile-sized
  micro-batches up to a prompt's last few tokens, small ones for those);
- ``landed``: round 2's default (the chunked schedule: micro-batches of 32 aligned to 32,
  repacked weights);
- ``chunked``: the chunked schedule without repacking (the fallback where the kernels are not
  batch-invariant);
- ``inexact``: ``cache.exact_reuse = false`` with repacked weights and micro-batches of
  ``n_ubatch`` (round 1's engine; llama-server's kernels), the fast-but-inexact reference.

Rows: cold prefill of ``cold`` tokens (tokens/s), a ``suffix``-token prefill after a
``depth``-token prefix (ms: an ask's question part at depth), and decode tokens/s at that
depth. Which schedule each session chose is recorded (the measurement happens at load).

``contention``: the default session's prefill of ``CONTENDED_PREFILL`` tokens and decode at depth
while another Python thread computes (the language server's context thread assembling or
indexing), as the server runs now (the engine's abort flag, read in C; the GIL handed over
every ``GIL_SWITCH_INTERVAL_S``) and as it ran before stop 48 (a Python abort callback, which
takes the GIL after every graph node; CPython's 5 ms switch interval), beside the same with no
other thread busy.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import llama_cpp

from contenox_bench import applicable
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import read_stdlib
from contenox_bench.progress import Progress
from contenox_bench.stats import median, ratio, summary
from contenox_lsp.process import GIL_SWITCH_INTERVAL_S
from engine import open_session
from engine.llama.model import AMX_REFUSAL, amx_kernels
from engine.profile import Profile

SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("invariant", "default: invariant schedule, weights not repacked", {}),
    ("flash", "invariant schedule, flash attention on (two regimes)",
     {"context.flash_attn": "on"}),
    ("landed", "round 2's default: chunked by 32, repacked weights, flash attention off",
     {"cache.exact_schedule": "chunked", "context.repack_weights": True,
      "context.flash_attn": "off"}),
    ("chunked", "chunked by 32, weights not repacked, flash attention off",
     {"cache.exact_schedule": "chunked", "context.flash_attn": "off"}),
    ("inexact", "exact reuse off, repacked weights (round 1; llama-server's kernels)",
     {"cache.exact_reuse": False, "context.repack_weights": True}),
)
TEXT_FILES = ("json/decoder.py", "textwrap.py", "shlex.py", "argparse.py")
DECODE_TOKENS = 16
CONTENDED_PREFILL = 48  # tokens at depth: a keystroke's or a small edit's prefill
CONTENDED_DECODE = 6  # tokens: the old callback decodes ~0.3 tokens/s under contention


def runnable(overrides: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A setting as this llama.cpp build can run it, and why it differs: repacked weights are
    refused where the build has AMX kernels (they crash), so such a setting runs without."""
    if overrides.get("context.repack_weights") and amx_kernels():
        return ({**overrides, "context.repack_weights": False},
                f"run with weights not repacked: {AMX_REFUSAL}")
    return overrides, None


def sizes(cfg: BenchConfig) -> tuple[int, int, int]:
    """(cold, depth, suffix): 2,048 / 2,816 / 256 by default, smaller in --quick."""
    return (512, 768, 64) if cfg.mode == "quick" else (2048, 2816, 256)


def planned_units(cfg: BenchConfig) -> int:
    return max(1, cfg.cold_reps) * len(SETTINGS) + 2


def run(profile: Profile, cfg: BenchConfig, progress: Progress) -> dict[str, Any]:
    if profile.backend != applicable.BARE_LOOP_BACKEND:
        return {"status": applicable.not_applicable("the schedules compared are llama.cpp's")}
    cold_n, depth, suffix_n = sizes(cfg)
    n_ctx = max(profile.n_ctx, depth + suffix_n + DECODE_TOKENS + 64)
    sessions: dict[str, Any] = {}
    ran = {key: runnable(overrides) for key, _, overrides in SETTINGS}
    try:
        for key, _, _ in SETTINGS:
            sessions[key] = open_session(profile.with_overrides(
                {**ran[key][0], "context.n_ctx": n_ctx}, source=f"bench schedule {key}"))
        progress.step("schedule: sessions loaded")
        text = "".join(t for _, t in read_stdlib(TEXT_FILES))
        tokens = sessions["invariant"].tokenize(text, add_bos=True)
        if len(tokens) < depth + suffix_n:
            tokens = (tokens * (1 + (depth + suffix_n) // len(tokens)))
        samples: dict[str, dict[str, list[float]]] = {
            k: {"cold": [], "suffix": [], "decode": []} for k in sessions}
        keys = list(sessions)
        for rep in range(max(1, cfg.cold_reps)):
            for key in keys if rep % 2 == 0 else reversed(keys):
                _measure(sessions[key], tokens, cold_n, depth, suffix_n, samples[key])
                progress.step(f"schedule: {key}")
        contention = _contention(sessions["invariant"], tokens, depth)
        progress.step("schedule: contention")
        rows = []
        for key, label, _ in SETTINGS:
            s = sessions[key]
            overrides, note = ran[key]
            rows.append({
                "key": key, "label": label, "overrides": overrides, "note": note,
                "exact_reuse": s.exact_reuse,
                "cold_tok_s": summary(samples[key]["cold"], "tokens/s"),
                "suffix_ms": summary(samples[key]["suffix"], "ms"),
                "decode_tok_s": summary(samples[key]["decode"], "tokens/s"),
            })
    finally:
        for s in sessions.values():
            s.close()
    by = {r["key"]: r for r in rows}

    def over(a: str, b: str, field: str, faster_is_lower: bool = False) -> float | None:
        x, y = median(by[a][field]), median(by[b][field])
        return ratio(y, x) if faster_is_lower else ratio(x, y)

    return {
        "status": "ok", "cold_tokens": cold_n, "depth": depth, "suffix_tokens": suffix_n,
        "decode_tokens": DECODE_TOKENS, "rows": rows, "contention": contention,
        "ratios": {
            "cold_invariant_over_inexact": over("invariant", "inexact", "cold_tok_s"),
            "cold_invariant_over_landed": over("invariant", "landed", "cold_tok_s"),
            "suffix_speedup_over_landed": over("invariant", "landed", "suffix_ms", True),
            "cold_flash_over_invariant": over("flash", "invariant", "cold_tok_s"),
            "suffix_flash_speedup_over_invariant": over("flash", "invariant", "suffix_ms",
                                                        True),
            "suffix_flash_speedup_over_landed": over("flash", "landed", "suffix_ms", True),
            "decode_flash_over_invariant": over("flash", "invariant", "decode_tok_s"),
            "decode_invariant_over_inexact": over("invariant", "inexact", "decode_tok_s"),
        },
    }


def _measure(s: Any, tokens: Sequence[int], cold_n: int, depth: int, suffix_n: int,
             out: dict[str, list[float]]) -> None:
    s.reset()
    r = s.prefill(tokens[:cold_n])
    out["cold"].append(r.new_tokens / (r.prefill_ms / 1000.0))
    s.reset()
    s.prefill(tokens[:depth])
    r = s.prefill(tokens[: depth + suffix_n])
    assert r.reused_tokens >= depth - 64, (r.reused_tokens, depth)  # the prefix stayed warm
    out["suffix"].append(r.prefill_ms)
    g = s.generate(max_tokens=DECODE_TOKENS)
    if g.decode_tokens > 1 and g.decode_tok_s:
        out["decode"].append(g.decode_tok_s)


#: (key, label, abort check, GIL switch interval in s, another Python thread busy)
CONTENTION_CASES = (
    ("idle", "no other thread busy", "flag", GIL_SWITCH_INTERVAL_S, False),
    ("busy", "another Python thread busy: the server now (abort flag, "
     f"{GIL_SWITCH_INTERVAL_S * 1000:g} ms switch)", "flag", GIL_SWITCH_INTERVAL_S, True),
    ("busy_before", "another Python thread busy: before stop 48 (Python abort callback, "
     "5 ms switch)", "python", 0.005, True),
)


def _contention(s: Any, tokens: Sequence[int], depth: int) -> dict[str, Any]:
    """The default session under contention (module doc): per case, a prefill of
    ``CONTENDED_PREFILL`` tokens after ``depth`` and a decode of ``CONTENDED_DECODE`` tokens."""
    out: dict[str, Any] = {"prefill_tokens": CONTENDED_PREFILL, "depth": depth,
                           "decode_tokens": CONTENDED_DECODE, "cases": []}
    for key, label, check, interval, busy in CONTENTION_CASES:
        s.reset()
        s.prefill(tokens[:depth])  # the prefix with no contention: only the step is measured
        with _abort_check(s, check), _switch_interval(interval), _busy_thread(busy):
            r = s.prefill(tokens[:depth + CONTENDED_PREFILL])
            g = s.generate(max_tokens=CONTENDED_DECODE)
        out["cases"].append({
            "key": key, "label": label,
            "prefill_tok_s": r.new_tokens / (r.prefill_ms / 1000.0),
            "decode_tok_s": g.decode_tok_s if g.decode_tokens > 1 else None})
    by = {c["key"]: c for c in out["cases"]}
    out["ratios"] = {
        f"{field}_busy_over_{ref}": ratio(by["busy"][f"{field}_tok_s"], by[ref][f"{field}_tok_s"])
        for field in ("prefill", "decode") for ref in ("idle", "busy_before")}
    return out


@contextmanager
def _abort_check(s: Any, check: str) -> Iterator[None]:
    """The session's abort flag, or (``python``) a Python callback reading the same cancel
    state, as the engine had before stop 48. Reaches into the llama session: a bench of the
    engine's own internals."""
    if check == "flag":
        yield
        return
    callback = llama_cpp.ggml_abort_callback(lambda _data: s._cancel.is_set())
    llama_cpp.llama_set_abort_callback(s._ctx, callback, None)
    try:
        yield
    finally:
        s._abort.attach(s._ctx)


@contextmanager
def _switch_interval(seconds: float) -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@contextmanager
def _busy_thread(busy: bool) -> Iterator[None]:
    """A Python thread computing (pure bytecode, holding the GIL between switches)."""
    if not busy:
        yield
        return
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i * i

    thread = threading.Thread(target=spin, name="bench-busy-python", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def markdown(sec: dict[str, Any]) -> list[str]:
    out = ["## Schedule: what exact reuse costs", ""]
    if sec.get("status") != "ok":
        return [*out, f"Status: {sec.get('status')}", ""]
    out += [f"Cold prefill of {sec['cold_tokens']} tokens; {sec['suffix_tokens']} new tokens "
            f"after a {sec['depth']}-token prefix; decode of {sec['decode_tokens']} tokens at "
            "that depth. Medians of interleaved rounds in one run.", "",
            "| setting | schedule chosen at load | cold tok/s | suffix ms | decode tok/s |",
            "|---|---|---|---|---|"]
    for r in sec["rows"]:
        desc = (r.get("exact_reuse") or {}).get("description", "—")
        label = r["label"] + (" (*)" if r.get("note") else "")
        out.append(f"| {label} | {desc} | {_fmt(median(r['cold_tok_s']))} | "
                   f"{_fmt(median(r['suffix_ms']), 0)} | {_fmt(median(r['decode_tok_s']))} |")
    q = sec["ratios"]
    out += ["", "Invariant vs round 1's inexact engine: cold "
            f"{_fmt(q['cold_invariant_over_inexact'], 2)}×, "
            f"decode {_fmt(q['decode_invariant_over_inexact'], 2)}×; vs round 2's landed "
            f"schedule: cold {_fmt(q['cold_invariant_over_landed'], 2)}×, suffix at depth "
            f"{_fmt(q['suffix_speedup_over_landed'], 2)}× faster. Flash attention on vs off: "
            f"cold {_fmt(q.get('cold_flash_over_invariant'), 2)}×, suffix "
            f"{_fmt(q.get('suffix_flash_speedup_over_invariant'), 2)}× faster "
            f"({_fmt(q.get('suffix_flash_speedup_over_landed'), 2)}× round 2's), decode "
            f"{_fmt(q.get('decode_flash_over_invariant'), 2)}×.", ""]
    notes = sorted({r["note"] for r in sec["rows"] if r.get("note")})
    out += [f"(*) {n}" for n in notes] + ([""] if notes else [])
    c = sec.get("contention")
    if c:
        out += [f"Under contention (the default session; {c['prefill_tokens']} tokens "
                f"prefilled after {c['depth']}, {c['decode_tokens']} decoded):", "",
                "| case | prefill tok/s | decode tok/s |", "|---|---|---|"]
        out += [f"| {x['label']} | {_fmt(x['prefill_tok_s'])} | {_fmt(x['decode_tok_s'])} |"
                for x in c["cases"]]
        cr = c["ratios"]
        out += ["", f"Busy now vs before: prefill {_fmt(cr['prefill_busy_over_busy_before'], 2)}"
                f"×, decode {_fmt(cr['decode_busy_over_busy_before'], 2)}×; busy vs idle: "
                f"prefill {_fmt(cr['prefill_busy_over_idle'], 2)}×, decode "
                f"{_fmt(cr['decode_busy_over_idle'], 2)}×.", ""]
    return out


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"
