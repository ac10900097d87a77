"""Section 2: the suffix-growth curve — TTFT against changed-suffix size after a fixed stable
prefix, warm (prefix resident) versus cold (everything prefilled)."""

from __future__ import annotations

from typing import Any

from contenox_bench.config import BenchConfig
from contenox_bench.corpus import Corpus, cold_reset
from contenox_bench.progress import Progress
from contenox_bench.stats import check, median, ratio, summary

GOAL_FACTOR = 1.2  # warm ≤ 1.2 × (changed ÷ total) × cold + one decode step


def points_that_fit(cfg: BenchConfig, n_ctx: int) -> tuple[list[int], list[int]]:
    fit = [k for k in cfg.curve_points if cfg.curve_prefix + k + 1 <= n_ctx]
    return fit, [k for k in cfg.curve_points if k not in fit]


def planned_units(cfg: BenchConfig) -> int:
    return 1 + len(cfg.curve_points) * (cfg.reps + cfg.cold_reps)


def run(session: Any, corpus: Corpus, cfg: BenchConfig, decode_step_ms: float | None,
        progress: Progress) -> dict[str, Any]:
    P = cfg.curve_prefix
    points, skipped = points_that_fit(cfg, session.n_ctx)
    prefix = corpus.stable(P).tokens
    prompts = {k: prefix + corpus.suffix(k, variant=100 + i) for i, k in enumerate(points)}

    progress.note("curve: prefilling the stable prefix")
    cold_reset(session, corpus.primer())
    session.prefill(prefix)
    progress.step("curve: points")
    warm: dict[int, list[float]] = {k: [] for k in points}
    reused: dict[int, list[int]] = {k: [] for k in points}
    cold: dict[int, list[float]] = {k: [] for k in points}
    first_warm: dict[int, int | None] = {}
    first_cold: dict[int, int | None] = {}
    # Warm and cold of a point run back to back, so load from other work on the machine hits
    # both alike. A cold run leaves the stable prefix resident, so the next warm run reuses it.
    for rep in range(max(cfg.reps, cfg.cold_reps)):
        for i, k in enumerate(points):
            if rep < cfg.reps:
                # A new suffix every repetition: nothing but the stable prefix is ever reused.
                toks = prompts[k] if rep == 0 else prefix + corpus.suffix(
                    k, variant=100 + (rep + 1) * len(cfg.curve_points) + i
                )
                r = session.prefill(toks)
                g = session.generate(1)
                warm[k].append(g.ttft_ms)
                reused[k].append(r.reused_tokens)
                if rep == 0:
                    first_warm[k] = g.tokens[0] if g.tokens else None
                progress.step(f"curve warm {rep + 1}/{cfg.reps}: {k} changed tokens")
            if rep < cfg.cold_reps:
                cold_reset(session, corpus.primer())
                session.prefill(prompts[k])
                g = session.generate(1)
                cold[k].append(g.ttft_ms)
                first_cold[k] = g.tokens[0] if g.tokens else None
                progress.step(f"curve cold {rep + 1}/{cfg.cold_reps}: {P + k} tokens")

    rows = []
    for k in points:
        w, c = summary(warm[k], "ms"), summary(cold[k], "ms")
        total = P + k
        bound = None
        cm = median(c)
        if cm is not None and decode_step_ms is not None:
            bound = GOAL_FACTOR * (k / total) * cm + decode_step_ms
        wm = median(w)
        rows.append({
            "changed_tokens": k,
            "total_tokens": total,
            "warm_ttft_ms": w,
            "cold_ttft_ms": c,
            "warm_over_cold": ratio(wm, cm),
            "reused_tokens": reused[k],
            "goal_bound_ms": bound,
            "goal_met": None if bound is None or wm is None or k == 0 else wm <= bound,
            "first_token_check": check(first_warm.get(k) == first_cold.get(k)),
        })
    return {
        "status": "ok",
        "stable_prefix_tokens": P,
        "reps_warm": cfg.reps,
        "reps_cold": cfg.cold_reps,
        "decode_step_ms": decode_step_ms,
        "skipped_points": skipped,
        "skipped_reason": f"do not fit n_ctx = {session.n_ctx}" if skipped else None,
        "rows": rows,
    }
