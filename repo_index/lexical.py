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
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from functools import lru_cache
from itertools import chain

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
#: Postings are compacted once this many documents are dead (and they outnumber the living).
COMPACT_MIN_DEAD = 4096


_STEMMER = snowballstemmer.stemmer("english")


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text`` (code or prose), in order, with repeats: each identifier
    whole, and its stemmed parts when it has several (or its stem when it has one)."""
    return list(chain.from_iterable(map(_word_terms, _WORD.findall(text))))


@lru_cache(maxsize=65_536)
def _word_terms(word: str) -> tuple[str, ...]:
    """One identifier's terms (code repeats its identifiers: indexing a large workspace looks
    most words up here instead of splitting and stemming them again)."""
    out: list[str] = []
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
    return tuple(out)


class LexicalIndex:
    """BM25 scores of documents grouped by file; ``set_file`` replaces a file's documents.

    Compact, because a large workspace has millions of (term, chunk) pairs: a posting is a
    document number and a term count in two ``array`` columns per term (8 bytes, where a
    dictionary entry per pair cost ~100); a document is its key, length and distinct terms. A
    removed file's documents are marked dead (their statistics leave at once) and skipped by
    searches until the postings are compacted, when the dead outnumber the living."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[str, list[int]]] = {}  # path -> (version, doc numbers)
        self._keys: list[tuple[str, int] | None] = []  # doc number -> key; None: removed
        self._lengths = array("I")  # doc number -> length in terms
        self._terms: list[tuple[str, ...]] = []  # doc number -> its distinct terms
        self._df: dict[str, int] = {}
        self._postings: dict[str, tuple[array[int], array[int]]] = {}  # term -> (docs, tfs)
        self._total_length = 0
        self._n_docs = 0  # living documents

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
        numbers: list[int] = []
        for key, name, text in docs:
            counts = Counter(terms(text))
            for t in terms(name):
                counts[t] += 1  # the name once more
            n = len(self._keys)
            length = sum(counts.values())
            self._keys.append(key)
            self._lengths.append(length)
            self._terms.append(tuple(counts))
            self._n_docs += 1
            self._total_length += length
            for t, tf in counts.items():
                self._df[t] = self._df.get(t, 0) + 1
                posting = self._postings.get(t)
                if posting is None:
                    posting = self._postings[t] = (array("I"), array("I"))
                posting[0].append(n)
                posting[1].append(tf)
            numbers.append(n)
        self._files[path] = (version, numbers)

    def remove_file(self, path: str) -> None:
        entry = self._files.pop(path, None)
        if entry is None:
            return
        for n in entry[1]:
            self._keys[n] = None
            self._n_docs -= 1
            self._total_length -= self._lengths[n]
            for t in self._terms[n]:
                left = self._df[t] - 1
                if left:
                    self._df[t] = left
                else:  # every document with the term is gone
                    del self._df[t]
                    del self._postings[t]
            self._terms[n] = ()
        if len(self._keys) - self._n_docs > max(COMPACT_MIN_DEAD, self._n_docs):
            self._compact()

    def _compact(self) -> None:
        """Renumber the living documents and drop the dead from every posting."""
        renumber: dict[int, int] = {}
        keys: list[tuple[str, int] | None] = []
        lengths = array("I")
        doc_terms: list[tuple[str, ...]] = []
        for n, key in enumerate(self._keys):
            if key is not None:
                renumber[n] = len(keys)
                keys.append(key)
                lengths.append(self._lengths[n])
                doc_terms.append(self._terms[n])
        for t, (docs, tfs) in self._postings.items():
            living = [(renumber[n], tf) for n, tf in zip(docs, tfs, strict=True)
                      if n in renumber]
            self._postings[t] = (array("I", [n for n, _ in living]),
                                 array("I", [tf for _, tf in living]))
        self._files = {p: (v, [renumber[n] for n in ns]) for p, (v, ns) in self._files.items()}
        self._keys, self._lengths, self._terms = keys, lengths, doc_terms

    def search(self, query: Mapping[str, float], limit: int) -> list[tuple[float, tuple[str, int]]]:
        """The ``limit`` best documents' keys for weighted query terms, best first (ties by
        key, so results do not depend on the order files were added in)."""
        if not self._n_docs:
            return []
        avg = self._total_length / self._n_docs
        keys, lengths = self._keys, self._lengths
        scores: dict[int, float] = {}
        for term, weight in query.items():
            posting = self._postings.get(term)
            if not posting or weight <= 0:
                continue
            df = self._df[term]
            idf = math.log(1 + (self._n_docs - df + 0.5) / (df + 0.5))
            for n, tf in zip(posting[0], posting[1], strict=True):
                if keys[n] is None:
                    continue
                norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[n] / avg))
                scores[n] = scores.get(n, 0.0) + weight * idf * norm
        order = sorted(scores, key=lambda n: (-scores[n], keys[n]))
        return [(scores[n], key) for n in order[:limit] if (key := keys[n]) is not None]
