"""BM25 over definition-sized chunks, updated file by file.

Why not ``rank_bm25`` or ``bm25s``: both build a static index over a fixed corpus, and an
editor changes one file at a time; rebuilding the whole corpus after every edit would cost more
than the whole ask is allowed. Here each file's chunks carry their own term counts and the
collection statistics (document frequencies, lengths) are updated by subtracting the old file
and adding the new one, so an edit costs one file.

Terms: identifiers are split into their snake_case/camelCase parts and also kept whole, all
lowercased; keywords and very common words are dropped; parts are stemmed (Snowball English,
``snowballstemmer``: "assembled" finds ``assemble``). A chunk's name terms count twice (the
name says what a definition is about).
"""

from __future__ import annotations

import keyword
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import snowballstemmer

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_STOP = frozenset(
    {k.lower() for k in keyword.kwlist}
    | {
        "self", "cls", "none", "true", "false", "a", "an", "the", "of", "to", "in", "on",
        "for", "and", "or", "is", "be", "it", "this", "that", "with", "by", "at", "from",
        "as", "are", "was", "when", "if", "not", "do", "does", "fix", "fixed", "fixes",
        "bug", "use", "using", "s", "t", "e", "i", "x", "args", "kwargs", "return",
        "where", "what", "which", "who", "how", "why", "can", "should", "there", "here",
    }
)  # fmt: skip

K1 = 1.2
B = 0.75


_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text`` (code or prose), in order, with repeats: each identifier
    whole, and its stemmed parts when it has several (or its stem when it has one)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        parts = [p.lower() for piece in word.split("_") for p in _CAMEL.findall(piece)]
        if low not in _STOP and len(low) > 1:
            out.append(low)
        words = parts if len(parts) > 1 else [low]
        for p in words:
            if p in _STOP or len(p) < 2:
                continue
            stem = _stem(p)
            if stem != low:
                out.append(stem)
    return out


@dataclass(frozen=True)
class _Doc:
    key: tuple[str, int]  # what the caller gets back: (path, line); also the tie-break
    counts: Counter[str]
    length: int


class LexicalIndex:
    """BM25 scores of documents grouped by file; ``set_file`` replaces a file's documents."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, list[_Doc]]] = {}  # path -> (version, docs)
        self._df: Counter[str] = Counter()
        self._postings: dict[str, dict[int, _Doc]] = {}  # term -> {id(doc): doc}
        self._total_length = 0
        self._n_docs = 0

    def version(self, path: str) -> str | None:
        entry = self._files.get(path)
        return entry[0] if entry is not None else None

    def paths(self) -> list[str]:
        return list(self._files)

    def set_file(
        self, path: str, version: str, docs: Iterable[tuple[tuple[str, int], str, str]]
    ) -> None:
        """Replace ``path``'s documents by ``docs``: ``(key, name, text)`` each."""
        self.remove_file(path)
        built = []
        for key, name, text in docs:
            counts = Counter(terms(text))
            for t in terms(name):
                counts[t] += 1  # the name once more
            built.append(_Doc(key, counts, sum(counts.values())))
        for doc in built:
            self._n_docs += 1
            self._total_length += doc.length
            for t in doc.counts:
                self._df[t] += 1
                self._postings.setdefault(t, {})[id(doc)] = doc
        self._files[path] = (version, built)

    def remove_file(self, path: str) -> None:
        entry = self._files.pop(path, None)
        if entry is None:
            return
        for doc in entry[1]:
            self._n_docs -= 1
            self._total_length -= doc.length
            for t in doc.counts:
                self._df[t] -= 1
                if not self._df[t]:
                    del self._df[t]
                posting = self._postings[t]
                del posting[id(doc)]
                if not posting:
                    del self._postings[t]

    def search(self, query: Mapping[str, float], limit: int) -> list[tuple[float, tuple[str, int]]]:
        """The ``limit`` best documents' keys for weighted query terms, best first (ties by
        key, so results do not depend on the order files were added in)."""
        if not self._n_docs:
            return []
        avg = self._total_length / self._n_docs
        scores: dict[int, float] = {}
        docs: dict[int, _Doc] = {}
        for term, weight in query.items():
            posting = self._postings.get(term)
            if not posting or weight <= 0:
                continue
            df = self._df[term]
            idf = math.log(1 + (self._n_docs - df + 0.5) / (df + 0.5))
            for doc_id, doc in posting.items():
                tf = doc.counts[term]
                norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * doc.length / avg))
                scores[doc_id] = scores.get(doc_id, 0.0) + weight * idf * norm
                docs[doc_id] = doc
        order = sorted(scores, key=lambda d: (-scores[d], docs[d].key))
        return [(scores[d], docs[d].key) for d in order[:limit]]
