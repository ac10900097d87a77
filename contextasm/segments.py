"""Segment kinds A–J and cache classes: the fixed, stable-first order of every prompt.

J (code) came after the original plan's nine letters, so it sits between H and I: letters
name kinds, ``order`` is the position in the prompt."""

from __future__ import annotations

from enum import StrEnum


class SegmentKind(StrEnum):
    """The segment kinds, declared in prompt order (A first, I last)."""

    SYSTEM = "system"  # A: system / developer prompt (+ opening turn markers, BOS)
    TOOLS = "tools"  # B: tool schemas
    POLICY = "policy"  # C: chain / task policy
    INSTRUCTIONS = "instructions"  # D: repo instructions (AGENTS.md, ...)
    REPO_MAP = "repo_map"  # E: repo map / symbol graph
    PINNED = "pinned"  # F: pinned files / ranges (one segment per pin)
    DIFF = "diff"  # G: current diff
    DIAGNOSTICS = "diagnostics"  # H: diagnostics, test/terminal output (one segment per entry)
    CODE = "code"  # J: definitions the turn needs (cursor-keyed, then question-keyed)
    USER = "user"  # I: the user turn (+ closing / assistant turn markers)

    @property
    def letter(self) -> str:
        """The plan's letter for this kind: ``A`` .. ``J`` (``J`` sits between H and I)."""
        return _LETTERS[self.order]

    @property
    def order(self) -> int:
        """Position in the fixed segment order (0 for A .. 8 for I)."""
        return _ORDER[self]

    @property
    def display_name(self) -> str:
        """Human name used in explain tables (``repo map`` rather than ``repo_map``)."""
        return self.value.replace("_", " ")

    @property
    def default_cache_class(self) -> CacheClass:
        return _DEFAULT_CLASS[self]

    @classmethod
    def from_letter(cls, letter: str) -> SegmentKind:
        index = _LETTERS.find(letter.upper()) if len(letter) == 1 else -1
        if index < 0:
            raise ValueError(f"unknown segment letter {letter!r}")
        return list(cls)[index]


class CacheClass(StrEnum):
    """How valuable a cached prefix ending in this segment is; eviction goes low → highest."""

    HIGHEST = "highest"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """3 for highest .. 0 for low: an entry may only displace entries of lower or equal rank."""
        return _RANK[self]


_ORDER = {kind: i for i, kind in enumerate(SegmentKind)}
_LETTERS = "ABCDEFGHJI"  # by order
_RANK = {
    CacheClass.HIGHEST: 3,
    CacheClass.HIGH: 2,
    CacheClass.MEDIUM: 1,
    CacheClass.LOW: 0,
}
_DEFAULT_CLASS = {
    SegmentKind.SYSTEM: CacheClass.HIGHEST,
    SegmentKind.TOOLS: CacheClass.HIGHEST,
    SegmentKind.POLICY: CacheClass.HIGHEST,
    SegmentKind.INSTRUCTIONS: CacheClass.HIGHEST,
    SegmentKind.REPO_MAP: CacheClass.HIGH,
    SegmentKind.PINNED: CacheClass.HIGH,
    SegmentKind.DIFF: CacheClass.MEDIUM,
    SegmentKind.DIAGNOSTICS: CacheClass.MEDIUM,  # stale entries: LOW
    SegmentKind.CODE: CacheClass.LOW,
    SegmentKind.USER: CacheClass.LOW,
}

#: Kinds whose segments form the stable region (highest + high classes), A through F.
STABLE_KINDS = frozenset(
    {
        SegmentKind.SYSTEM,
        SegmentKind.TOOLS,
        SegmentKind.POLICY,
        SegmentKind.INSTRUCTIONS,
        SegmentKind.REPO_MAP,
        SegmentKind.PINNED,
    }
)
