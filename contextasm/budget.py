"""Fitting a prompt into its token budget by shrinking segments in cache-class order.

Each segment is a ``Slot`` with a ladder of renderings indexed by ``k``: ``k_max`` is the full
rendering, smaller ``k`` keep less (fewer lines, fewer hunks, a smaller repo map), ``k == 0`` is
the floor (dropped, or for the user turn: the bare question). ``fit`` walks the stages (low,
medium, high, user turn) and gives each slot the largest ``k`` that makes the whole prompt fit
(binary search), so every step removes no more than needed. Before the stages, a slot with a
``share`` is held to that share of the limit. Deterministic: same inputs, same cuts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from contextasm.segments import STABLE_KINDS, CacheClass, SegmentKind

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variant:
    """One rendering of a slot: its text pieces and their tokens."""

    pieces: tuple[tuple[str, bool], ...]
    tokens: tuple[int, ...]  # BOS (segment A only) + the pieces' tokens
    piece_tokens: tuple[tuple[int, ...], ...]
    truncated: bool = False
    invalidation: str | None = None  # overrides the slot's (e.g. a re-rendered repo map)


@dataclass
class Slot:
    """A segment being fitted: its identity, its rendering ladder and the chosen rung."""

    kind: SegmentKind
    label: str
    cache_class: CacheClass
    invalidation: str
    render: Callable[[int], Variant | None]
    k_max: int
    soft_floor: int = 0  # first-pass floor: the smallest still useful rung
    question_keyed: bool = False  # depends on the question: counts with the user turn
    share: float | None = None  # most of the limit it may take before any class stage runs
    k: int = -1  # -1: not chosen yet → k_max
    _memo: dict[int, Variant | None] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.k < 0:
            self.k = self.k_max
        self.soft_floor = min(self.soft_floor, self.k_max)

    def variant(self, k: int | None = None) -> Variant | None:
        k = self.k if k is None else k
        if k not in self._memo:
            self._memo[k] = self.render(k)
        return self._memo[k]

    @property
    def full_tokens(self) -> int:
        full = self.variant(self.k_max)
        return len(full.tokens) if full else 0


def padding_for(stable_len: int, block_size: int) -> int:
    """Neutral tokens needed after a region (the stable one, and everything before the user
    turn) to end on a block boundary, so a backend that reuses whole blocks reuses all of it."""
    return (-stable_len) % block_size if block_size > 1 else 0


def region(slot: Slot) -> int:
    """0 stable (A–F), 1 volatile (diff, outputs), 2 cursor-keyed code, 3 what depends on
    the question (its code, the user turn). Each of 0–2 ends on a block boundary."""
    if slot.kind in STABLE_KINDS:
        return 0
    if slot.kind is SegmentKind.USER or slot.question_keyed:
        return 3
    return 2 if slot.kind is SegmentKind.CODE else 1


def total_tokens(
    slots: Sequence[Slot], block_size: int, override: tuple[int, int] | None = None
) -> int:
    """Prompt length with the slots' chosen variants (``override``: slot index → k to try)."""
    sizes = [0, 0, 0, 0]
    for i, slot in enumerate(slots):
        k = override[1] if override is not None and override[0] == i else slot.k
        v = slot.variant(k)
        sizes[region(slot)] += len(v.tokens) if v is not None else 0
    total = sizes[0] + padding_for(sizes[0], block_size)
    for n in sizes[1:3]:  # a group that is absent adds no padding
        total += n + (padding_for(total + n, block_size) if n else 0)
    return total + sizes[3]


def fit(slots: Sequence[Slot], stages: Sequence[Sequence[int]], limit: int, block_size: int) -> int:
    """Shrink ``slots`` stage by stage until the prompt fits ``limit``; returns the final total.

    Within a stage, a first pass takes each slot (in order) no lower than its ``soft_floor``
    (a still useful form: a test-output tail, the nearest diff hunks), and only a second pass
    goes down to ``k == 0``. So a huge diff is cut to its nearest hunks before a small test
    log of the same class is dropped. The caller raises if the total still exceeds ``limit``.
    """
    total = total_tokens(slots, block_size)
    # One budget, shared: a segment larger than its share of the limit (a huge diff, test
    # log or pasted selection) is cut to that share before lower classes lose anything, so
    # it truncates itself instead of evicting the code segments or the repo map.
    for i, slot in enumerate(slots):
        if total > limit and slot.share is not None:
            total = _cap(slots, i, int(limit * slot.share), block_size)
    for stage in stages:
        if total <= limit:
            break
        start = {i: slots[i].k for i in stage}
        for soft in (True, False):
            for i in stage:
                if total > limit:
                    total = _shrink(slots, i, limit, block_size, slots[i].soft_floor if soft else 0)
        # A slot cut to its floor early may fit again now that later ones gave more: hand the
        # room back, most important (shrunk last) first.
        for i in reversed(stage):
            total = _grow(slots, i, limit, block_size, start[i])
    return total


def _own_tokens(slot: Slot, k: int) -> int:
    v = slot.variant(k)
    return len(v.tokens) if v is not None else 0


def _cap(slots: Sequence[Slot], i: int, cap: int, block_size: int) -> int:
    """Give slot ``i`` the largest ``k`` whose own tokens are at most ``cap``."""
    slot = slots[i]
    if _own_tokens(slot, slot.k) > cap:
        lo, hi = 0, slot.k  # invariant: hi is over the cap; lo is the best known (0: floor)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _own_tokens(slot, mid) <= cap:
                lo = mid
            else:
                hi = mid
        logger.debug("budget: %s capped at %d tokens: k=%d/%d", slot.label, cap, lo, slot.k_max)
        slot.k = lo
    return total_tokens(slots, block_size)


def _grow(slots: Sequence[Slot], i: int, limit: int, block_size: int, k_hi: int) -> int:
    """Raise slot ``i`` to the largest ``k`` in ``[k, k_hi]`` that still fits."""
    slot = slots[i]
    total = total_tokens(slots, block_size)
    if total > limit or slot.k >= k_hi:
        return total
    lo, hi = slot.k, k_hi + 1  # invariant: lo fits, hi does not (or is out of range)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if total_tokens(slots, block_size, (i, mid)) <= limit:
            lo = mid
        else:
            hi = mid
    if lo != slot.k:
        logger.debug("budget: %s regrown to k=%d/%d", slot.label, lo, slot.k_max)
        slot.k = lo
    return total_tokens(slots, block_size)


def _shrink(slots: Sequence[Slot], i: int, limit: int, block_size: int, floor: int) -> int:
    """Give slot ``i`` the largest ``k`` in ``[floor, k]`` that fits (``floor`` if none)."""
    slot = slots[i]
    before = total_tokens(slots, block_size)
    floor = min(floor, slot.k)
    if total_tokens(slots, block_size, (i, floor)) > limit:
        slot.k = floor  # even the floor does not fit: take it, later slots must give more
    else:
        lo, hi = floor, slot.k  # invariant: lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if total_tokens(slots, block_size, (i, mid)) <= limit:
                lo = mid
            else:
                hi = mid
        slot.k = lo
    after = total_tokens(slots, block_size)
    logger.debug(
        "budget: %s shrunk to k=%d/%d (%d -> %d tokens, limit %d)",
        slot.label,
        slot.k,
        slot.k_max,
        before,
        after,
        limit,
    )
    return after
