"""What the index keeps per file, and how cache entries turn into records."""

from __future__ import annotations

import logging
from typing import Any

from repo_index import pool
from repo_index.results import Symbol
from repo_index.symbols import FileSymbols
from repo_index.walker import WalkedFile

log = logging.getLogger(__name__)

# A cache entry: (size, mtime_ns, digest, language, grammar_key, status, symbols_plain).
CacheEntry = tuple[int, int, str, str, str, str, Any]
_CONTAINER_KINDS = ("class", "interface")


class FileRecord:
    """One indexed file. Symbols from the cache stay in their plain form until first used,
    so a warm start does not pay for decoding files nobody asks about."""

    __slots__ = (
        "_plain",
        "_symbols",
        "digest",
        "display",
        "from_buffer",
        "grammar_key",
        "lang",
        "mtime_ns",
        "path",
        "root",
        "size",
    )

    def __init__(
        self,
        path: str,
        root: int,
        display: str,
        lang: str | None,
        size: int,
        mtime_ns: int,
        digest: str,
        grammar_key: str,
        symbols: FileSymbols | None,
        from_buffer: bool = False,
        plain: Any = None,
    ) -> None:
        self.path = path
        self.root = root
        self.display = display
        self.lang = lang
        self.size = size
        self.mtime_ns = mtime_ns
        self.digest = digest
        self.grammar_key = grammar_key
        self.from_buffer = from_buffer  # symbols come from an editor buffer, not the disk
        self._symbols = symbols
        self._plain = plain

    @property
    def symbols(self) -> FileSymbols | None:
        if self._plain is not None:
            try:
                self._symbols = FileSymbols.from_plain(self._plain)
            except (TypeError, ValueError) as exc:  # checksummed, so only a format bug
                log.error("cannot decode cached symbols of %s: %s", self.path, exc)
                self._symbols = None
            self._plain = None
        return self._symbols

    def cache_entry(self) -> CacheEntry:
        plain = self._plain
        if plain is None and self._symbols is not None:
            plain = self._symbols.to_plain()
        mtime = -1 if self.from_buffer else self.mtime_ns  # buffers: match by digest only
        return (self.size, mtime, self.digest, self.lang or "", self.grammar_key, "ok", plain)

    def outline(self) -> tuple[Any, ...]:
        """What the map could show of this file (empty without symbols)."""
        symbols = self.symbols
        return symbols.outline() if symbols is not None else ()

    def public_symbols(self) -> list[Symbol]:
        symbols = self.symbols
        if symbols is None:
            return []
        parents = symbols.parents()
        out = []
        for i, d in enumerate(symbols.defs):
            container = symbols.defs[parents[i]] if parents[i] >= 0 else None
            kind = d.kind
            if kind == "function" and container is not None and container.kind in _CONTAINER_KINDS:
                kind = "method"  # Python's tags query does not tell methods apart
            name = container.name if container is not None else ""
            out.append(
                Symbol(self.path, d.line, d.column, d.name, kind, d.end_line, d.signature, name)
            )
        return out


def binary_entry(size: int, mtime_ns: int) -> CacheEntry:
    return (size, mtime_ns, "", "", "", pool.BINARY, None)


def is_entry(entry: Any) -> bool:
    return isinstance(entry, tuple) and len(entry) == 7


def same_binary(entry: Any, wf: WalkedFile) -> bool:
    """A cached "binary" verdict for this exact file version (saves reading it again)."""
    return is_entry(entry) and entry[5] == pool.BINARY and entry[:2] == (wf.size, wf.mtime_ns)


def from_cache(
    entry: Any, wf: WalkedFile, lang: str | None, key: str, display: str
) -> FileRecord | None:
    """A record from a cache entry whose size, mtime, language and grammar still match."""
    if not is_entry(entry):
        return None
    size, mtime, digest, e_lang, e_key, status, plain = entry
    if (size, mtime, e_lang, e_key, status) != (wf.size, wf.mtime_ns, lang or "", key, "ok"):
        return None
    if not isinstance(digest, str) or (plain is not None and not isinstance(plain, tuple)):
        return None
    return FileRecord(wf.path, wf.root, display, lang, size, mtime, digest, key, None, plain=plain)


def expected_digest(entry: Any, size: int, lang: str | None, key: str) -> str | None:
    """A cached digest worth comparing against (same size, language and grammar): a file
    that was only touched is recognised without parsing it."""
    if is_entry(entry):
        e_size, _mtime, digest, e_lang, e_key, status, _plain = entry
        if (e_size, e_lang, e_key, status) == (size, lang or "", key, "ok"):
            return digest if isinstance(digest, str) else None
    return None


def plain_symbols(entry: Any) -> Any:
    return entry[6] if is_entry(entry) else None
