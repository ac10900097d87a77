"""Prompt lookup: draft tokens for speculative decoding from the sequence's own n-grams.

A rewrite mostly copies text the prompt already holds (the region being edited, the code a fix
repeats). After each emitted token the last ``n`` tokens (``n`` from ``MAX_NGRAM`` down to
``MIN_NGRAM``) are looked up among earlier positions of the sequence; the tokens that followed
their most recent earlier occurrence are the draft, which the engine verifies in one batch and
keeps up to the first token the model would not have chosen (greedy). Backend-independent: it
sees token ids only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_NGRAM, MAX_NGRAM = 2, 4
#: Draft length for rewrites (next edits, fixes): they mostly copy text the prompt holds.
#: Measured on 2 cores with the embedded model: 16 tokens ~2.5x the plain decode rate, 8 ~1.6x.
REWRITE_DRAFT_TOKENS = 16


class NgramIndex:
    """Where each n-gram (``MIN_NGRAM``..``MAX_NGRAM``) of a token sequence last ended."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self._tokens: list[int] = []
        self._last: dict[tuple[int, ...], int] = {}
        self._prev: dict[tuple[int, ...], int] = {}
        for tok in tokens:
            self.append(tok)

    def __len__(self) -> int:
        return len(self._tokens)

    def append(self, tok: int) -> None:
        self._tokens.append(tok)
        end = len(self._tokens)
        for n in range(MIN_NGRAM, MAX_NGRAM + 1):
            if end >= n:
                key = tuple(self._tokens[end - n:end])
                if key in self._last:
                    self._prev[key] = self._last[key]
                self._last[key] = end

    def draft(self, max_tokens: int) -> list[int]:
        """Up to ``max_tokens`` tokens that followed the latest earlier occurrence of the
        sequence's longest matching tail n-gram; empty when none recurs."""
        end = len(self._tokens)
        if max_tokens <= 0:
            return []
        for n in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
            if end < n:
                continue
            key = tuple(self._tokens[end - n:end])
            at = self._prev.get(key) if self._last.get(key) == end else self._last.get(key)
            if at is not None and at < end:
                return self._tokens[at:min(at + max_tokens, end)]
        return []


@dataclass(frozen=True)
class LookupStats:
    """Drafted and accepted tokens of one generation with prompt lookup."""

    drafted: int
    accepted: int

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None
