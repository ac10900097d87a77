"""Metrics returned by every engine call (the engine boundary's instrumentation)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any


def ms_since(t0: float) -> float:
    """Milliseconds since ``t0`` (a ``time.perf_counter()`` reading)."""
    return (time.perf_counter() - t0) * 1000.0


@dataclass(frozen=True)
class PrefillResult:
    reused_tokens: int
    new_tokens: int
    prefill_ms: float
    total_tokens: int
    # Why fewer tokens were reused than the common prefix allowed (None: nothing was lost).
    miss_reason: str | None = None
    # A parked branch the prefix was restored from, if any.
    restored_branch: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GenerateResult:
    tokens: list[int]
    text: str
    # From the start of the prefill that prepared this generation to the first sampled token.
    ttft_ms: float
    decode_tokens: int
    decode_ms: float
    decode_tok_s: float
    finish_reason: str  # "stop" (end-of-generation token or stop text), "length", "context_full"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ttft_over_steps(ttft_ms: float, prefill_ms: float, last_prefill_ms: float) -> float:
    """A ``GenerateResult.ttft_ms`` counts from the start of the last ``prefill()`` call; for
    a prompt prefilled in several calls (``prefill_ms``: all of them, ``last_prefill_ms``: the
    last), the TTFT from the start of the first."""
    return prefill_ms - last_prefill_ms + ttft_ms


def decode_rate(tokens: int, decode_ms: float) -> float:
    """Tokens per second after the first (the first token's time is the TTFT's)."""
    return (tokens - 1) / (decode_ms / 1000.0) if tokens > 1 and decode_ms > 0 else 0.0


@dataclass(frozen=True)
class SnapshotResult:
    path: str
    tokens: int
    bytes: int
    ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BranchInfo:
    name: str
    seq_id: int
    tokens: int


#: A prefill computing fewer tokens than this is not counted in ``SessionMetrics.prefill_rate``.
RATE_MIN_TOKENS = 64


@dataclass
class SessionMetrics:
    """Running totals and the last call's figures; read by status views and benchmarks."""

    last_prefill: PrefillResult | None = None
    last_generate: GenerateResult | None = None
    last_snapshot_save: SnapshotResult | None = None
    last_snapshot_load: SnapshotResult | None = None
    prefill_calls: int = 0
    reused_tokens_total: int = 0
    new_tokens_total: int = 0
    decode_tokens_total: int = 0
    # Prefills that computed at least RATE_MIN_TOKENS (smaller ones say little about speed).
    rated_tokens_total: int = 0
    rated_ms_total: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def record_prefill(self, result: PrefillResult) -> PrefillResult:
        self.last_prefill = result
        self.prefill_calls += 1
        self.reused_tokens_total += result.reused_tokens
        self.new_tokens_total += result.new_tokens
        if result.new_tokens >= RATE_MIN_TOKENS and result.prefill_ms > 0:
            self.rated_tokens_total += result.new_tokens
            self.rated_ms_total += result.prefill_ms
        return result

    def prefill_rate(self) -> float | None:
        """Tokens/s this session has prefilled at (None until a prefill of at least
        ``RATE_MIN_TOKENS`` new tokens ran)."""
        if not self.rated_tokens_total:
            return None
        return self.rated_tokens_total / (self.rated_ms_total / 1000.0)

    def record_generate(self, result: GenerateResult) -> GenerateResult:
        self.last_generate = result
        self.decode_tokens_total += result.decode_tokens
        return result

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def drain(
    stream: Generator[str, bool | None, GenerateResult],
    on_piece: Callable[[str], None] | None = None,
    stop: Sequence[str] = (),
    lead: str = "",
    opening: Sequence[str] = (),
) -> GenerateResult:
    """Run a session's ``stream()`` to its end: each text piece goes to ``on_piece`` (if any)
    as it is decoded; returns the stream's ``GenerateResult``.

    ``stop``: text that ends the answer (a prompt format's stop sequences). Text that could be
    the start of one is held back until it is clearly not; when one appears, the text before
    it is the answer, the stream is told to stop (``send(True)``: it ends within one token)
    and the result says ``finish_reason="stop"``.

    ``lead``: text the answer starts with that the prompt already holds (a base model's
    answer cue, e.g. ``In `` before a file name); it goes out with the first piece and starts
    the result's text.

    ``opening``: those of ``stop`` that may also open an answer (a code fence, blank lines):
    before the answer has any text they do not end it. The next stop ends it as usual, except
    that a fence the answer opened is kept as its last line (the block is closed)."""
    stops = [s for s in stop if s]
    keep = max((len(s) for s in stops), default=1) - 1
    out: list[str] = []
    held = ""
    stopped = False
    opened: set[str] = set()

    def emit(text: str) -> None:
        if not text:
            return
        if not out:
            text = lead + text
        out.append(text)
        if on_piece is not None:
            on_piece(text)

    while True:
        try:
            piece = stream.send(True) if stopped else next(stream)
        except StopIteration as end:
            result: GenerateResult = end.value
            emit(held)
            text = "".join(out) or lead
            return replace(result, text=text, finish_reason="stop" if stopped
                           else result.finish_reason)
        if stopped:
            continue  # a decoder tail after the stop: not part of the answer
        held += piece
        at, hit = min(((i, s) for s in stops if (i := held.find(s)) >= 0), default=(-1, ""))
        if at >= 0:
            started = bool((lead + "".join(out) + held[:at]).strip())
            if hit in opening and not started and hit not in opened:
                opened.add(hit)  # the answer starts with it (a fenced block, blank lines)
                emit(held[: at + len(hit)])
                held = ""
                continue
            closes = hit in opened and bool(hit.strip())  # the fence the answer opened
            emit(held[: at + len(hit)] if closes else held[:at])
            held, stopped = "", True
        elif len(held) > keep:
            emit(held[: len(held) - keep])
            held = held[len(held) - keep :]
