"""Section 4: the scaling note — how TTFT and memory grow with the stable-context size."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contenox_lsp.benchmark.config import BenchConfig
from contenox_lsp.benchmark.corpus import Corpus
from contenox_lsp.benchmark.progress import Progress
from contenox_lsp.benchmark.stats import median, ratio, summary


def planned_units(cfg: BenchConfig) -> int:
    return len(cfg.scaling_sizes) * (cfg.reps + cfg.cold_reps + 1)


def rss_bytes() -> int | None:
    """Resident set size of this process (Linux); None where /proc is missing."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def run(session: Any, corpus: Corpus, cfg: BenchConfig, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    q = cfg.scaling_question
    sizes = [n for n in cfg.scaling_sizes if n + q + 1 <= session.n_ctx]
    skipped = [n for n in cfg.scaling_sizes if n not in sizes]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        stable = corpus.stable(size).tokens
        cold: list[float] = []
        for rep in range(cfg.cold_reps):
            session.reset()
            session.prefill(stable + corpus.question(q, variant=300 + rep))
            cold.append(session.generate(1).ttft_ms)
            progress.step(f"scaling {size}: cold {rep + 1}/{cfg.cold_reps}")
        # Memory with the stable context plus one question resident.
        saved = session.save_snapshot(tmp / "scaling.snap")
        rss = rss_bytes()
        progress.step(f"scaling {size}: memory")
        warm: list[float] = []
        reused: list[int] = []
        for rep in range(cfg.reps):
            r = session.prefill(stable + corpus.question(q, variant=400 + rep))
            warm.append(session.generate(1).ttft_ms)
            reused.append(r.reused_tokens)
            progress.step(f"scaling {size}: warm {rep + 1}/{cfg.reps}")
        w, c = summary(warm, "ms"), summary(cold, "ms")
        prev = rows[-1] if rows else None
        rows.append({
            "stable_tokens": size,
            "question_tokens": q,
            "warm_ttft_ms": w,
            "cold_ttft_ms": c,
            "warm_over_cold": ratio(median(w), median(c)),
            "reused_tokens": reused,
            "kv_state_bytes": saved.bytes,
            "kv_bytes_per_token": saved.bytes / saved.tokens if saved.tokens else None,
            # Growth per extra token since the previous size (the fixed part cancels out).
            "kv_marginal_bytes_per_token": None if prev is None else
            (saved.bytes - prev["kv_state_bytes"]) / (size - prev["stable_tokens"]),
            "process_rss_bytes": rss,
        })
    return {
        "status": "ok",
        "n_ctx": session.n_ctx,
        "reps_warm": cfg.reps,
        "reps_cold": cfg.cold_reps,
        "skipped_sizes": skipped,
        "note": "kv_state_bytes is the size of the live sequence's llama.cpp state (what a "
                "snapshot holds) with the stable context and one question resident; its growth "
                "per token is kv_marginal_bytes_per_token (the rest is a fixed part). "
                "process_rss_bytes includes the model and the whole preallocated n_ctx KV "
                "buffer, so it barely moves with the stable size.",
        "rows": rows,
    }
