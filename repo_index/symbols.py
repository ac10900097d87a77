"""Plain-data symbol records: what one file defines and references.

Everything here is tuples, strings and ints so that it crosses process boundaries and goes
into the on-disk cache (``marshal``) without custom serialisation.
"""

from __future__ import annotations

import sys
from array import array
from collections import Counter
from dataclasses import dataclass, field
from operator import lt
from typing import Any, NamedTuple

# Definitions inside these kinds are locals (closures, nested helpers): they stay queryable
# through ``RepoIndex.definitions`` but are not part of a file's outline in the repo map.
FUNCTION_KINDS = frozenset({"function", "method"})


class Definition(NamedTuple):
    """One definition. Lines are 0-based; columns and bytes are UTF-8 byte offsets."""

    name: str
    kind: str
    name_byte: int  # where the name starts: the definition's identity inside its file
    line: int  # row of the name
    column: int  # byte column of the name
    start_byte: int  # extent of the definition (its signature owner), for nesting
    end_byte: int
    start_line: int
    end_line: int
    signature: str  # header text shown in the repo map (whitespace-collapsed, no comments)


@dataclass(eq=False)
class FileSymbols:
    """The symbols of one file: definitions sorted by ``name_byte``, and references as a tuple
    of names with a parallel flat array of ``(byte, line, column)`` triples, sorted by byte
    (an ``array`` loads from the cache as one memcpy)."""

    defs: tuple[Definition, ...] = ()
    ref_names: tuple[str, ...] = ()
    ref_pos: array[int] = field(default_factory=lambda: array("I"))
    _parents: tuple[int, ...] | None = field(default=None, repr=False)
    _visible: list[bool] | None = field(default=None, repr=False)
    _outline: tuple[tuple[str, str, str, int], ...] | None = field(default=None, repr=False)
    _name_counts: tuple[Counter[str], Counter[str]] | None = field(default=None, repr=False)
    _counts: Counter[str] | None = field(default=None, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileSymbols):
            return NotImplemented
        return (self.defs, self.ref_names, self.ref_pos) == (
            other.defs,
            other.ref_names,
            other.ref_pos,
        )

    __hash__ = None  # type: ignore[assignment]

    def parents(self) -> tuple[int, ...]:
        """Index of each definition's innermost enclosing definition (-1 at top level)."""
        if self._parents is None:
            self._parents = compute_parents(self.defs)
        return self._parents

    def visible(self) -> list[bool]:
        """Whether each definition belongs in the outline (not nested in a function)."""
        if self._visible is None:
            parents = self.parents()
            defs = self.defs
            out: list[bool] = []
            for i in range(len(defs)):
                p = parents[i]
                if p < i:  # the usual case: a parent's name comes before its children
                    out.append(p < 0 or (out[p] and defs[p].kind not in FUNCTION_KINDS))
                    continue
                ok = True
                while p >= 0 and ok:
                    ok = defs[p].kind not in FUNCTION_KINDS
                    p = parents[p]
                out.append(ok)
            self._visible = out
        return self._visible

    def outline(self) -> tuple[tuple[str, str, str, int], ...]:
        """What a repo map could show of this file: (name, kind, signature, parent index)
        of every outline definition. Positions are left out: moving code does not count."""
        if self._outline is None:
            visible = self.visible()
            parents = self.parents()
            self._outline = tuple(
                (d.name, d.kind, d.signature, parents[i])
                for i, d in enumerate(self.defs)
                if visible[i]
            )
        return self._outline

    def name_counts(self) -> tuple[Counter[str], Counter[str]]:
        """How often each name is defined: inside functions (not in the outline; usually
        none), and in the outline."""
        if self._name_counts is None:
            visible = self.visible()
            nested: Counter[str] = Counter()
            outline: Counter[str] = Counter()
            for d, v in zip(self.defs, visible, strict=True):
                (outline if v else nested)[d.name] += 1
            self._name_counts = (nested, outline)
        return self._name_counts

    def inherit_shape(self, other: FileSymbols) -> None:
        """Reuse ``other``'s nesting-derived data: for an edit that provably left the names,
        kinds, signatures and nesting of all definitions as they were."""
        self._visible = other._visible
        self._outline = other._outline
        self._name_counts = other._name_counts

    def ref_counts(self) -> Counter[str]:
        if self._counts is None:
            self._counts = Counter(self.ref_names)
        return self._counts

    def to_plain(self) -> tuple[Any, ...]:
        return (tuple(tuple(d) for d in self.defs), self.ref_names, self.ref_pos.tobytes())

    @classmethod
    def from_plain(cls, plain: Any) -> FileSymbols:
        """Inverse of ``to_plain``; raises ``ValueError``/``TypeError`` on malformed data."""
        defs_raw, names, raw_pos = plain
        if not isinstance(names, tuple) or not isinstance(raw_pos, bytes):
            raise TypeError("malformed reference tables")
        # Names and kinds are interned: symbols from worker processes arrive with a string
        # object per use, and a large workspace repeats its names millions of times.
        intern = sys.intern
        defs = tuple(
            Definition(intern(name), intern(kind), *rest) for name, kind, *rest in defs_raw
        )
        names = tuple(map(intern, names))
        pos = array("I")
        pos.frombytes(raw_pos)
        if len(pos) != 3 * len(names):
            raise ValueError("reference tables disagree in length")
        for d in defs:
            if not (isinstance(d.name, str) and isinstance(d.signature, str)):
                raise TypeError("malformed definition")
        return cls(defs, names, pos)


def compute_parents(defs: tuple[Definition, ...]) -> tuple[int, ...]:
    """Nesting by extent: a definition's parent is the innermost other definition whose extent
    contains it (identical extents, e.g. ``int a(void), b(void);``, are siblings)."""
    starts = [d.start_byte for d in defs]
    if all(map(lt, starts, starts[1:])):
        order: list[int] | range = range(len(defs))  # the usual case: already in order
    else:
        order = sorted(range(len(defs)), key=lambda i: (starts[i], -defs[i].end_byte, i))
    parents = [-1] * len(defs)
    stack: list[int] = []
    for i in order:
        d = defs[i]
        while stack:
            top = defs[stack[-1]]
            contains = top.start_byte <= d.start_byte and d.end_byte <= top.end_byte
            if contains and (top.start_byte, top.end_byte) != (d.start_byte, d.end_byte):
                break
            stack.pop()
        parents[i] = stack[-1] if stack else -1
        stack.append(i)
    return tuple(parents)
