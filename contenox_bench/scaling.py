"""Section 4: the scaling note — how TTFT and memory grow with the stable-context size.

The KV state of the live sequence is measured with a snapshot of it: on a backend without
snapshots (``session.capabilities``) those columns are ``not applicable`` and the backend's
own cache figures (``metrics.extra["pipeline"]`` on OpenVINO) are recorded instead."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contenox_bench import applicable
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import Corpus, cold_reset
from contenox_bench.progress import Progress
from contenox_bench.stats import median, ratio, summary
from engine.errors import UnsupportedCapabilityError


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
    no_snapshots = applicable.lacks(session, "snapshots")
    rows: list[dict[str, Any]] = []
    for size in sizes:
        stable = corpus.stable(size).tokens
        cold: list[float] = []
        for rep in range(cfg.cold_reps):
            cold_reset(session, corpus.primer())
            session.prefill(stable + corpus.question(q, variant=300 + rep))
            cold.append(session.generate(1).ttft_ms)
            progress.step(f"scaling {size}: cold {rep + 1}/{cfg.cold_reps}")
        # Memory with the stable context plus one question resident.
        kv_bytes: int | None = None
        kv_tokens = 0
        kv_status = no_snapshots or "ok"
        if no_snapshots is None:
            try:
                saved = session.save_snapshot(tmp / "scaling.snap")
                kv_bytes, kv_tokens = saved.bytes, saved.tokens
            except UnsupportedCapabilityError as exc:  # past the sliding window, on this CPU
                kv_status = applicable.not_applicable(str(exc))
        engine_cache = _engine_cache(session)
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
        prev_kv = rows[-1]["kv_state_bytes"] if rows else None  # None: not measured there
        prev_size = rows[-1]["stable_tokens"] if rows else size
        rows.append({
            "stable_tokens": size,
            "question_tokens": q,
            "warm_ttft_ms": w,
            "cold_ttft_ms": c,
            "warm_over_cold": ratio(median(w), median(c)),
            "reused_tokens": reused,
            "kv_state_status": kv_status,
            "kv_state_bytes": kv_bytes,
            "kv_bytes_per_token": kv_bytes / kv_tokens if kv_bytes and kv_tokens else None,
            # Growth per extra token since the previous size (the fixed part cancels out).
            "kv_marginal_bytes_per_token": None if kv_bytes is None or prev_kv is None else
            (kv_bytes - prev_kv) / (size - prev_size),
            "engine_cache": engine_cache,
            "process_rss_bytes": rss,
        })
    return {
        "status": "ok",
        "backend": applicable.backend_of(session),
        "n_ctx": session.n_ctx,
        "reps_warm": cfg.reps,
        "reps_cold": cfg.cold_reps,
        "skipped_sizes": skipped,
        "kv_state_status": next((r["kv_state_status"] for r in rows
                                 if r["kv_state_status"] != "ok"), no_snapshots or "ok"),
        "note": _note(no_snapshots),
        "rows": rows,
    }


def _engine_cache(session: Any) -> dict[str, float] | None:
    """The backend's own cache figures after the last prefill, where it reports them."""
    metrics = getattr(session, "metrics", None)
    extra = getattr(metrics, "extra", None)
    figures = extra.get("pipeline") if isinstance(extra, dict) else None
    return dict(figures) if isinstance(figures, dict) else None


def _note(no_snapshots: str | None) -> str:
    if no_snapshots is None:
        return ("kv_state_bytes is the size of the live sequence's llama.cpp state (what a "
                "snapshot holds) with the stable context and one question resident; its growth "
                "per token is kv_marginal_bytes_per_token (the rest is a fixed part). "
                "process_rss_bytes includes the model and the whole preallocated n_ctx KV "
                "buffer, so it barely moves with the stable size.")
    return (f"KV state of the sequence: {no_snapshots} (it is measured with a snapshot). "
            "engine_cache holds the backend's own figures after the cold prefill of each size "
            "(OpenVINO: cache_usage, the share of its paged KV pool in use, in %; "
            "kv_cache_size_in_bytes, the pool). process_rss_bytes includes the model and the "
            "KV pool.")
