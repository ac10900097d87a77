"""The tokenizer seam and a bounded cache of segment tokenizations.

The engine session satisfies ``Tokenizer``; ``contextasm`` never loads a model itself. Segments
are tokenized one by one, and an unchanged segment is looked up by (text hash, tokenizer digest,
special flag) instead of being tokenized again: the stable prefix of a 100k-token prompt costs a
dictionary lookup per turn, not a tokenizer pass.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Protocol, runtime_checkable

from contextasm.hashing import text_hash

logger = logging.getLogger(__name__)


@runtime_checkable
class Tokenizer(Protocol):
    """What assembly needs from a model's tokenizer (the engine session provides it)."""

    @property
    def tokenizer_digest(self) -> str: ...

    @property
    def bos_token_id(self) -> int | None: ...

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]: ...


CacheKey = tuple[str, str, bool]


class _Lru:
    """An LRU map of token tuples bounded by entry count and total tokens (not thread-safe)."""

    def __init__(self, max_entries: int, max_tokens: int) -> None:
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.entries: OrderedDict[CacheKey, tuple[int, ...]] = OrderedDict()
        self.n_tokens = 0

    def get(self, key: CacheKey) -> tuple[int, ...] | None:
        found = self.entries.get(key)
        if found is not None:
            self.entries.move_to_end(key)
        return found

    def put(self, key: CacheKey, tokens: tuple[int, ...]) -> None:
        if key in self.entries:
            self.entries.move_to_end(key)
            return
        if len(tokens) > self.max_tokens:
            return
        self.entries[key] = tokens
        self.n_tokens += len(tokens)
        while len(self.entries) > self.max_entries or self.n_tokens > self.max_tokens:
            _, dropped = self.entries.popitem(last=False)
            self.n_tokens -= len(dropped)

    def pop(self, key: CacheKey) -> None:
        dropped = self.entries.pop(key, None)
        if dropped is not None:
            self.n_tokens -= len(dropped)

    def clear(self) -> None:
        self.entries.clear()
        self.n_tokens = 0


class TokenCache:
    """Tokenizations keyed by (text sha256, tokenizer digest, special flag), in two LRU tiers.

    The main tier holds renderings that are (or were) in a prompt; a separate, smaller trial
    tier holds the budget's trial renderings, so trying twenty cuts of a huge diff never pushes
    the stable segments out. Bounded by entries and total tokens; thread-safe (the LSP may
    assemble on a worker thread while another thread explains).
    """

    def __init__(
        self, max_entries: int = 1024, max_tokens: int = 1_000_000, trial_tokens: int = 250_000
    ) -> None:
        if max_entries < 1 or max_tokens < 1 or trial_tokens < 0:
            raise ValueError("token cache bounds must be positive")
        self._main = _Lru(max_entries, max_tokens)
        self._trials = _Lru(max_entries, trial_tokens)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._main.entries)

    @property
    def cached_tokens(self) -> int:
        """Tokens held in the main tier."""
        return self._main.n_tokens

    def clear(self) -> None:
        with self._lock:
            self._main.clear()
            self._trials.clear()

    def tokenize(
        self, tokenizer: Tokenizer, text: str, *, special: bool, store: bool = True
    ) -> tuple[int, ...]:
        """Tokens of ``text`` (never with BOS: BOS is placed by the assembler, not per piece).

        ``store=False`` marks a trial rendering: a miss goes to the trial tier only (``put``
        promotes it once it is known to be used).
        """
        if not text:
            return ()
        key: CacheKey = (text_hash(text), tokenizer.tokenizer_digest, special)
        with self._lock:
            found = self._main.get(key)
            if found is None:
                found = self._trials.get(key)
            if found is not None:
                self.hits += 1
                return found
        tokens = tuple(int(t) for t in tokenizer.tokenize(text, add_bos=False, special=special))
        with self._lock:
            self.misses += 1
            (self._main if store else self._trials).put(key, tokens)
        return tokens

    def put(self, tokenizer_digest: str, text: str, special: bool, tokens: tuple[int, ...]) -> None:
        """Keep (or mark as recently used) the tokens of ``text`` in the main tier."""
        if not text:
            return
        key: CacheKey = (text_hash(text), tokenizer_digest, special)
        with self._lock:
            self._trials.pop(key)
            self._main.put(key, tokens)


_default_cache = TokenCache()


def default_token_cache() -> TokenCache:
    """The process-wide cache ``assemble`` uses when none is passed."""
    return _default_cache


class TokenCounter:
    """Token counts of small texts (repo-map lines, code snippets), remembered by text: the
    budgets count the same few hundred items on every assembly, and the counts of an
    unchanged workspace never change. Bounded LRU, thread-safe."""

    def __init__(self, max_entries: int = 65_536) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()

    def count(self, tokenizer: Tokenizer, text: str) -> int:
        """Tokens of ``text`` as content (``special=False``, no BOS)."""
        key = (tokenizer.tokenizer_digest, text)
        with self._lock:
            n = self._counts.get(key)
            if n is not None:
                self._counts.move_to_end(key)
                return n
        n = len(tokenizer.tokenize(text, add_bos=False, special=False))
        with self._lock:
            self._counts[key] = n
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)
        return n


_default_counter = TokenCounter()


def default_token_counter() -> TokenCounter:
    """The process-wide counter the repo map and code budgets use."""
    return _default_counter
