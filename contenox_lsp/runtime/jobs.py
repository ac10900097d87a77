"""The bodies of engine jobs: they run on the engine worker thread, one at a time.

A job is ``fn(session, job)``; it calls ``job.check()`` between engine calls so that
cancellation (by the client, by preemption, by shutdown) lands within one step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contenox_lsp.progress import Reporter
from contenox_lsp.runtime.worker import Job
from contextasm.manifest import common_prefix_length
from engine import Session
from engine.results import drain

#: Tokens per background prefill step (at most n_batch): a preempted step loses its work,
#: and a user request should not wait behind a long one.
BACKGROUND_STEP = 256


@dataclass(frozen=True)
class PrefillStats:
    reused_tokens: int
    new_tokens: int
    prefill_ms: float
    miss_reason: str | None
    last_step_ms: float = 0.0  # the last step's share of prefill_ms


@dataclass(frozen=True)
class DecodeStats:
    text: str
    ttft_ms: float  # from when the request arrived (assembly and prefill included)
    engine_ttft_ms: float  # the engine's own figure, from prefill start
    decode_tokens: int
    decode_tokens_per_second: float
    finish_reason: str | None


def chunked_prefill(session: Session, tokens: list[int], job: Job,
                    report: Callable[[int], None], step: int | None = None) -> PrefillStats:
    """Prefill ``tokens`` in n_batch-sized steps, checking for cancellation between steps.

    Each step is a normal prefix-reusing ``prefill`` of a longer prefix, so the engine decodes
    only the new chunk and commits it; a preempted job leaves every finished chunk resident.
    """
    n_batch = session.profile.n_batch
    step = max(16, min(n_batch, step or n_batch))
    # Where the engine will start: the live sequence or a parked branch (a first step that
    # ended before a branch's end would restore only that much of it).
    pos = session.warm_prefix(tokens)
    reused: int | None = None
    miss: str | None = None
    prefill_ms = 0.0
    unit = max(1, session.reuse_granularity)
    tile = min_batch = 0
    if len(tokens) - pos > step:
        # Only a prefill of several steps needs the schedule (exact_reuse reads a cache file
        # on some backends; a completion's one-step prefill should not).
        exact = session.exact_reuse or {}
        tile, min_batch = int(exact.get("tile") or 0), int(exact.get("minBatch") or 1)
    while True:
        job.check()
        if len(tokens) - pos <= step:
            end = len(tokens)
        elif tile:
            # Two regimes (engine/README.md): a step's last tokens are computed in small
            # micro-batches and the next step computes them again in tile-sized ones; ending
            # a minimum micro-batch past a tile boundary (at most a tile past the step) leaves
            # only that many to redo.
            end = -(-(pos + step - min_batch) // tile) * tile + min_batch
        else:
            # A step ends on a reuse-block boundary (the start may be a piece inside one):
            # the next step then reuses it whole.
            aligned = (pos + step) // unit * unit
            end = aligned if aligned > pos else pos + step
        r = session.prefill(tokens[:end], identity=session.identity)
        if reused is None:
            # The engine may keep less than the common prefix (identity miss, SWA clamp,
            # whole reuse blocks): its own count is the truth.
            reused = r.reused_tokens
            miss = r.miss_reason
        prefill_ms += r.prefill_ms
        pos = end
        report(pos)
        if end >= len(tokens):
            break
    assert reused is not None
    return PrefillStats(reused, len(tokens) - reused, prefill_ms, miss, r.prefill_ms)


def background_prefill(target: list[int], progress: Reporter | None
                       ) -> Callable[[Session, Job], PrefillStats]:
    """The idle pre-prefill job: bring ``target`` into KV in small, preemptible steps."""

    def fn(session: Session, job: Job) -> PrefillStats:
        start = common_prefix_length(session.resident_tokens, target)
        todo = len(target) - start
        if todo == 0:
            # Already resident (a user request got there first). Don't call prefill: it
            # would re-decode the last token and drop what follows it.
            return PrefillStats(start, 0, 0.0, None)

        def report(pos: int) -> None:
            if progress is not None:
                done = max(0, pos - start)
                progress.report(done, todo, f"warming {done}/{todo} tokens")

        return chunked_prefill(session, target, job, report, step=BACKGROUND_STEP)

    return fn


def decode(session: Session, max_tokens: int, emit: Callable[[str], None],
           t0: float, stop: Sequence[str] = (), lead: str = "",
           opening: Sequence[str] = (), lookup: int = 0) -> DecodeStats:
    """Stream up to ``max_tokens`` tokens; ``emit`` gets each text piece as it is decoded;
    ``lookup``: prompt-lookup draft length (0 = the plain loop; for answers that rewrite code
    the prompt holds).

    ``ttft_ms`` is measured from ``t0`` (when the server received the request, so it includes
    assembly and prefill)."""
    first: float | None = None

    def on_piece(piece: str) -> None:
        nonlocal first
        if first is None:
            first = time.perf_counter()
        if piece:
            emit(piece)

    result = drain(session.stream(max_tokens=max_tokens, lookup=lookup), on_piece, stop, lead,
                   opening)
    t_end = time.perf_counter()
    return DecodeStats(
        text=result.text,
        ttft_ms=((first or t_end) - t0) * 1000.0,
        engine_ttft_ms=result.ttft_ms,
        decode_tokens=result.decode_tokens,
        decode_tokens_per_second=result.decode_tok_s,
        finish_reason=result.finish_reason,
    )
