"""Public result types of ``RepoIndex`` queries."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Symbol:
    """A definition. ``line``/``end_line`` are 0-based; ``column`` is a UTF-8 byte offset into
    the line (convert with the line text for other position encodings)."""

    path: str  # absolute
    line: int
    column: int
    name: str
    kind: str  # from the tags query: function, method, class, interface, type, constant, ...
    end_line: int
    signature: str
    container: str  # name of the enclosing definition, "" at top level


@dataclass(frozen=True, order=True)
class Location:
    """A reference: absolute path, 0-based line, UTF-8 byte column of the name."""

    path: str
    line: int
    column: int


@dataclass(frozen=True)
class BuildReport:
    files: int  # files in the index (with or without a grammar)
    parsed: int  # files parsed in this build
    reused: int  # files taken from the in-memory index or the persistent cache
    skipped: int  # paths left out (see RepoIndex.skipped)
    seconds: float
    cache_loaded: bool  # a persistent cache was found and was valid
