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

import heapq
import keyword
import logging
import math
import re
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


log = logging.getLogger(__name__)
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


#: ``LexicalIndex._doc_file`` of a removed document.
_DEAD = 0xFFFFFFFF
#: A posting is ``doc << TF_BITS | tf``; a term count that does not fit is kept aside.
TF_BITS = 8
_TF_MASK = (1 << TF_BITS) - 1
#: Document numbers fit in the bits a posting leaves them.
MAX_DOCS = 1 << (32 - TF_BITS)


@dataclass(frozen=True)
class _File:
    """One file's documents: numbers ``first`` .. ``first + count - 1`` (a file's documents
    are numbered together and stay together), and the distinct term ids they hold (removing
    the file finds its documents in each of those terms' postings, which are sorted)."""

    version: str
    slot: int  # its place in LexicalIndex._paths
    first: int
    count: int
    term_ids: array[int]


class LexicalIndex:
    """BM25 scores of documents grouped by file; ``set_file`` replaces a file's documents.

    Compact, because a large workspace has millions of (term, chunk) pairs and half a million
    chunks: a term is a number (its word kept once), a posting a document number and a term
    count packed in 4 bytes (``doc << TF_BITS | tf``; a count past ``_TF_MASK`` - 1 is kept in
    ``_big_tf``) in one ``array`` per term, sorted by document (documents are numbered in the
    order they are added, and renumbering keeps that order), a document its file, line and
    length in three more columns, and a file its distinct term ids in one array. A removed
    file's documents are marked dead (their statistics leave at once) and skipped by searches
    until everything is renumbered (``_compact``), when the dead outnumber the living."""

    def __init__(self) -> None:
        self._files: dict[str, _File] = {}
        self._paths: list[str | None] = []  # file slot -> path; None: removed
        self._vocab: dict[str, int] = {}  # term -> id
        self._df = array("I")  # term id -> living documents with it
        # term id -> its postings (doc << TF_BITS | tf), by document: one array per term,
        # because most terms (identifiers) occur in one or two chunks.
        self._postings: list[array[int] | None] = []
        self._big_tf: dict[tuple[int, int], int] = {}  # (term id, doc) -> a count too large
        self._doc_file = array("I")  # doc number -> file slot; _DEAD: removed
        self._doc_line = array("I")  # doc number -> line (the key's second part)
        self._lengths = array("I")  # doc number -> length in terms
        self._total_length = 0
        self._n_docs = 0  # living documents

    def version(self, path: str) -> str | None:
        entry = self._files.get(path)
        return entry.version if entry is not None else None

    def paths(self) -> list[str]:
        return list(self._files)

    def file_count(self) -> int:
        return len(self._files)

    def _term_id(self, term: str) -> int:
        found = self._vocab.get(term)
        if found is not None:
            return found
        new = self._vocab[term] = len(self._df)
        self._df.append(0)
        self._postings.append(None)
        return new

    def set_file(self, path: str, version: str, docs: Iterable[tuple[int, str, str]]) -> None:
        """Replace ``path``'s documents by ``docs``: ``(line, name, text)`` each; a search
        finds them as ``(path, line)``."""
        self.remove_file(path)
        docs = list(docs)
        if len(self._doc_file) + len(docs) > MAX_DOCS and self._n_docs < len(self._doc_file):
            self._compact()  # renumbering frees the numbers of the dead
        if len(self._doc_file) + len(docs) > MAX_DOCS:
            log.warning("code search holds %d chunks, its most: %s is not searchable",
                        self._n_docs, path)
            docs = []
        slot = len(self._paths)
        self._paths.append(path)
        first = len(self._doc_file)
        file_terms: dict[int, None] = {}  # distinct, in first-seen order
        for line, name, text in docs:
            counts = Counter(terms(text))
            for t in terms(name):
                counts[t] += 1  # the name once more
            n = len(self._doc_file)
            length = sum(counts.values())
            self._doc_file.append(slot)
            self._doc_line.append(line)
            self._lengths.append(length)
            self._n_docs += 1
            self._total_length += length
            for t, tf in counts.items():
                tid = self._term_id(t)
                file_terms[tid] = None
                self._df[tid] += 1
                posting = self._postings[tid]
                if posting is None:
                    posting = self._postings[tid] = array("I")
                if tf >= _TF_MASK:
                    self._big_tf[(tid, n)] = tf
                    tf = _TF_MASK
                posting.append(n << TF_BITS | tf)
        self._files[path] = _File(version, slot, first, len(self._doc_file) - first,
                                  array("I", file_terms))

    def remove_file(self, path: str) -> None:
        entry = self._files.pop(path, None)
        if entry is None:
            return
        self._paths[entry.slot] = None
        for n in range(entry.first, entry.first + entry.count):
            self._doc_file[n] = _DEAD
            self._n_docs -= 1
            self._total_length -= self._lengths[n]
        lo, hi = entry.first << TF_BITS, (entry.first + entry.count) << TF_BITS
        for tid in entry.term_ids:
            posting = self._postings[tid]
            assert posting is not None  # the file's documents hold the term
            start, end = bisect_left(posting, lo), bisect_left(posting, hi)
            for v in posting[start:end]:
                if v & _TF_MASK == _TF_MASK:
                    del self._big_tf[(tid, v >> TF_BITS)]
            self._df[tid] -= end - start
            if not self._df[tid]:  # every document with the term is gone
                self._postings[tid] = None
        if len(self._doc_file) - self._n_docs > max(COMPACT_MIN_DEAD, self._n_docs):
            self._compact()

    def _compact(self) -> None:
        """Renumber the living documents, terms and files; drop the dead from every posting."""
        renumber: dict[int, int] = {}
        doc_file, doc_line, lengths = array("I"), array("I"), array("I")
        slots: dict[int, int] = {}
        paths: list[str | None] = []
        for n, slot in enumerate(self._doc_file):
            if slot == _DEAD:
                continue
            renumber[n] = len(doc_file)
            if slot not in slots:
                slots[slot] = len(paths)
                paths.append(self._paths[slot])
            doc_file.append(slots[slot])
            doc_line.append(self._doc_line[n])
            lengths.append(self._lengths[n])
        term_ids: dict[int, int] = {}
        vocab: dict[str, int] = {}
        df = array("I")
        postings: list[array[int] | None] = []
        big_tf: dict[tuple[int, int], int] = {}
        for term, tid in self._vocab.items():
            posting = self._postings[tid]
            if posting is None:
                continue
            new_tid = term_ids[tid] = vocab[term] = len(df)
            df.append(self._df[tid])
            kept = array("I")
            for v in posting:
                doc = renumber.get(v >> TF_BITS)
                if doc is None:
                    continue
                kept.append(doc << TF_BITS | (v & _TF_MASK))
                if v & _TF_MASK == _TF_MASK:
                    big_tf[(new_tid, doc)] = self._big_tf[(tid, v >> TF_BITS)]
            postings.append(kept)
        for path, f in self._files.items():
            new_slot = slots.get(f.slot, len(paths))
            if new_slot == len(paths):  # a file without documents
                paths.append(path)
            # A living file's documents are all living: its first one was renumbered.
            self._files[path] = _File(f.version, new_slot, renumber[f.first] if f.count else 0,
                                      f.count, array("I", (term_ids[t] for t in f.term_ids)))
        self._paths, self._vocab, self._df, self._postings = paths, vocab, df, postings
        self._big_tf = big_tf
        self._doc_file, self._doc_line, self._lengths = doc_file, doc_line, lengths

    def scores(self, query: Mapping[str, float]) -> Scores:
        """The BM25 scores of the living documents with a query term."""
        return Scores(self, self._scores(query))

    def _scores(self, query: Mapping[str, float]) -> dict[int, float]:
        """Document number -> BM25 score, for the living documents with a query term."""
        if not self._n_docs:
            return {}
        avg = self._total_length / self._n_docs
        doc_file, lengths = self._doc_file, self._lengths
        scores: dict[int, float] = {}
        for term, weight in query.items():
            tid = self._vocab.get(term)
            if tid is None or weight <= 0:
                continue
            posting = self._postings[tid]
            if posting is None:  # every chunk with the term is gone
                continue
            df = self._df[tid]
            idf = math.log(1 + (self._n_docs - df + 0.5) / (df + 0.5))
            for v in posting:
                n = v >> TF_BITS
                if doc_file[n] == _DEAD:
                    continue
                tf = v & _TF_MASK
                if tf == _TF_MASK:
                    tf = self._big_tf[(tid, n)]
                norm = tf * (K1 + 1) / (tf + K1 * (1 - B + B * lengths[n] / avg))
                scores[n] = scores.get(n, 0.0) + weight * idf * norm
        return scores

    def search(self, query: Mapping[str, float], limit: int) -> list[tuple[float, tuple[str, int]]]:
        """The ``limit`` best documents' keys ``(path, line)`` for weighted query terms, best
        first (ties by key, so results do not depend on the order files were added in)."""
        return self.scores(query).top(limit)

    def _doc_key(self, n: int) -> tuple[str, int]:
        return (self._paths[self._doc_file[n]] or "", self._doc_line[n])

    def _doc_at(self, key: tuple[str, int]) -> int | None:
        entry = self._files.get(key[0])
        if entry is None:
            return None
        for n in range(entry.first, entry.first + entry.count):
            if self._doc_line[n] == key[1]:
                return n
        return None


class Scores:
    """One query's BM25 scores over a ``LexicalIndex`` (by document), valid until the index
    changes. A query's score is linear in its term weights, so two queries' scores add up to
    the score of their sum (``plus``): one pass per part, and each part's own score kept."""

    def __init__(self, index: LexicalIndex, by_doc: dict[int, float]) -> None:
        self._index = index
        self._by_doc = by_doc

    def plus(self, other: Scores, weight: float) -> Scores:
        """These scores plus ``weight`` times ``other``'s."""
        out = dict(self._by_doc)
        for n, v in other._by_doc.items():
            out[n] = out.get(n, 0.0) + weight * v
        return Scores(self._index, out)

    def top(self, limit: int) -> list[tuple[float, tuple[str, int]]]:
        """The ``limit`` best documents, best first; ties by key."""
        key_of, scores = self._index._doc_key, self._by_doc
        if limit <= 0:
            return []
        chosen = list(scores)
        if len(chosen) > limit:  # the limit-th best score, then every document reaching it
            floor = heapq.nlargest(limit, scores.values())[-1]
            chosen = [n for n in chosen if scores[n] >= floor]
        chosen.sort(key=lambda n: (-scores[n], key_of(n)))
        return [(scores[n], key_of(n)) for n in chosen[:limit]]

    def of(self, key: tuple[str, int]) -> float:
        """The score of the document ``key`` (0: no term of the query, or no such document)."""
        n = self._index._doc_at(key)
        return self._by_doc.get(n, 0.0) if n is not None else 0.0
