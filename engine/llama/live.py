"""What one KV sequence holds, as one value: its tokens and how much of them a later prefill
may keep (``engine.llama.session``'s module doc has the schedules).

The live sequence and every parked branch are a ``Computed`` each; the session changes its
live one only through these methods, so the three numbers never disagree: ``exact`` <=
``pieces`` <= ``len(tokens)``. Engine thread only (the session's calls are exclusive).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

#: How a committed batch was computed: whole chunks (or any batch of the invariant and off
#: schedules), one whole piece of the last partial chunk, or the rest of the prompt.
BatchKind = Literal["chunks", "piece", "rest"]


@dataclass
class Computed:
    """``tokens`` whose KV the sequence holds. ``exact``: the leading ones a cold prefill of a
    longer prompt computes the same way (reusable under exact reuse); ``pieces``: from there,
    under the chunked schedule, the whole pieces of the partial chunk after them."""

    tokens: list[int] = field(default_factory=list)
    exact: int = 0
    pieces: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.exact <= self.pieces <= len(self.tokens):
            raise ValueError(f"computed marks out of order: exact {self.exact}, pieces "
                             f"{self.pieces}, {len(self.tokens)} tokens")

    def __len__(self) -> int:
        return len(self.tokens)

    def copy(self) -> Computed:
        return Computed(list(self.tokens), self.exact, self.pieces)

    def set(self, other: Computed) -> None:
        """Hold what ``other`` holds (a branch restored, a snapshot loaded)."""
        self.tokens, self.exact, self.pieces = list(other.tokens), other.exact, other.pieces

    def clear(self) -> None:
        self.tokens, self.exact, self.pieces = [], 0, 0

    def cut(self, n: int) -> None:
        """Keep the first ``n`` tokens (the KV cells past them were removed)."""
        del self.tokens[n:]
        self.exact = min(self.exact, n)
        self.pieces = max(self.exact, min(self.pieces, n))

    def commit(self, batch: Sequence[int], kind: BatchKind) -> None:
        """A prefill batch that ends the resident tokens was decoded: it is the batch a cold
        prefill of this prompt computes there."""
        self.tokens.extend(batch)
        if kind == "chunks":
            self.exact = self.pieces = len(self.tokens)
        elif kind == "piece":
            self.pieces = len(self.tokens)

    def append(self, token: int) -> None:
        """A generated token (decoded one at a time: never reusable as computed)."""
        self.tokens.append(token)
