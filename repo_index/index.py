"""``RepoIndex``: the workspace symbol index and repo map (the seam used by the server).

Thread-safe: every public method takes one re-entrant lock, so an LSP server may call
``update`` from its event loop and ``repo_map`` from a worker thread.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import platformdirs

from repo_index import languages, pool, records
from repo_index.cache import IndexCache
from repo_index.extract import parse_and_extract
from repo_index.graph import SymbolGraph
from repo_index.ignore import DEFAULT_IGNORES
from repo_index.incremental import OpenDocument, reparse
from repo_index.rank import RankGraph, Ranking, prepare, rank
from repo_index.records import FileRecord
from repo_index.render import Candidates, FileView, ItemKey, RepoMap, render
from repo_index.results import BuildReport, Location, Symbol
from repo_index.safe_read import read_regular_file
from repo_index.symbols import Definition
from repo_index.textedit import ENCODINGS, encode_text
from repo_index.walker import Skipped
from repo_index.workspace import Workspace

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int, str], None]
PathLike = str | os.PathLike[str]

# A stable map keeps its ranking until this share of (file, name) use counts changed.
_CHURN_SHARE = 0.01
_CHURN_MIN = 25
_RANKINGS_KEPT = 4  # (rankings are small; each one's map candidates are not: see _candidates)
# Paths whose outline changed, remembered so that a map patches its candidates file by file.
_OUTLINE_LOG_MAX = 4096
# Past this many changed files (or a quarter of the workspace) a rebuild is cheaper.
_PATCH_MAX_FILES = 256


@dataclass
class IndexStats:
    """Counters for tests and diagnostics (cumulative over the index's life)."""

    parsed: int = 0  # files parsed from scratch (build or update)
    reused: int = 0  # files whose symbols came from the cache or the previous build
    incremental: int = 0  # updates parsed incrementally with a full re-extraction
    region: int = 0  # updates parsed incrementally and re-extracted only around the edit
    unchanged: int = 0  # updates whose text was identical
    rankings: int = 0  # PageRank computations
    rank_graphs: int = 0  # PageRank's focus-independent graph built (else: kept)
    candidate_builds: int = 0  # map candidates scored for every file (else: patched per file)
    cache_loads: int = 0
    cache_saves: int = 0


@dataclass
class _Ranked:
    ranking: Ranking
    graph_version: int
    file_set_version: int
    churn: int
    candidates: Candidates | None = None
    outline_version: int = -1


class RepoIndex:
    """Symbol index and ranked, budgeted repo map of one or more workspace folders.

    Paths in and out are absolute (``str`` or ``PathLike`` accepted); the map text shows
    workspace-relative POSIX paths (prefixed with the folder name when there are several).
    """

    def __init__(
        self,
        roots: Iterable[PathLike],
        on_progress: ProgressCallback | None = None,
        *,
        cache_dir: PathLike | None = None,
        use_cache: bool = True,
        max_file_bytes: int = 1_000_000,
        ignore_patterns: Sequence[str] = (),
        default_ignores: Sequence[str] = DEFAULT_IGNORES,
        workers: int | None = None,
        parallel_min_files: int = 300,
        max_open_documents: int = 32,
    ) -> None:
        folders = [os.path.abspath(os.fspath(r)) for r in roots]
        if not folders:
            raise ValueError("RepoIndex needs at least one workspace folder")
        if not 0 < max_file_bytes < 2**31:
            raise ValueError("max_file_bytes must be positive and below 2 GiB")
        self.roots = folders
        self.on_progress = on_progress
        self.max_file_bytes = max_file_bytes
        self.workers = workers if workers is not None else _cpu_count()
        self.parallel_min_files = parallel_min_files
        self.max_open_documents = max_open_documents
        self._ws = Workspace(folders, ignore_patterns, default_ignores, max_file_bytes)
        folder = os.fspath(cache_dir) if cache_dir is not None else _default_cache_dir()
        self._cache = IndexCache(folder, folders) if use_cache else None
        self._lock = threading.RLock()
        self._records: dict[str, FileRecord] = {}
        self._skipped: list[Skipped] = []
        self._binaries: dict[str, tuple[int, int]] = {}  # path -> (size, mtime): known binary
        self._docs: OrderedDict[str, OpenDocument] = OrderedDict()  # open buffers, LRU
        self._graph: SymbolGraph | None = None  # built on first use
        # rank()'s focus-independent graph for (this graph object, its version).
        self._rank_graph: tuple[SymbolGraph, int, RankGraph] | None = None
        self._rankings: OrderedDict[tuple[Any, ...], _Ranked] = OrderedDict()
        self._outline_version = 0  # bumps whenever anything the map could show changes
        # The path of each bump since version ``_outline_log_start`` (see _outline_changed).
        self._outline_log: list[str] = []
        self._outline_log_start = 0
        self._selection: dict[int, list[ItemKey]] = {}  # budget -> last map's items
        self._dirty = False
        self.rescan_needed = False  # an ignore file changed: call build() to re-walk
        self.stats = IndexStats()

    # ----------------------------------------------------------------- building

    def build(self) -> BuildReport:
        """Walk the workspace and index it, reusing the in-memory index and the persistent
        cache for unchanged files. Safe to call again (e.g. after ignore files changed)."""
        with self._lock:
            return self._build()

    def _build(self) -> BuildReport:
        started = time.perf_counter()
        self._report(0, 0, "Scanning workspace")
        walk = self._ws.walk()
        self.rescan_needed = False

        previous = self._records
        cached: dict[str, Any] = {}
        cache_loaded = False
        if self._cache is not None and not previous:
            payload = self._cache.load()
            if payload is not None:
                cache_loaded = True
                self.stats.cache_loads += 1
                cached = payload["files"]
                self._restore_state(payload["state"])
        known_binary = {p: records.binary_entry(*v) for p, v in self._binaries.items()}

        found: dict[str, FileRecord] = {}
        binaries: dict[str, tuple[int, int]] = {}
        skipped = list(walk.skipped)
        jobs: list[pool.Job] = []
        sizes: list[int] = []
        reused = 0
        for wf in walk.files:
            spec = languages.spec_for_path(wf.path)
            lang = spec.name if spec is not None else None
            key = languages.grammar_key(lang) if lang is not None else ""
            old = previous.get(wf.path)
            if old is not None and old.from_buffer:
                found[wf.path] = old  # the editor's buffer is newer than the disk
                continue
            if old is not None and (old.lang, old.grammar_key) == (lang, key):
                if (old.size, old.mtime_ns) == (wf.size, wf.mtime_ns):
                    found[wf.path] = old
                    reused += 1
                    continue
                jobs.append((wf.path, lang, old.digest if old.size == wf.size else None))
                sizes.append(wf.size)
                continue
            entry = cached.get(wf.path) or known_binary.get(wf.path)
            if records.same_binary(entry, wf):  # no need to read it again
                binaries[wf.path] = (wf.size, wf.mtime_ns)
                skipped.append(Skipped(wf.path, pool.BINARY, pool.BINARY_DETAIL))
                continue
            record = records.from_cache(entry, wf, lang, key, self._ws.display(wf.root, wf.path))
            if record is not None:
                found[wf.path] = record
                reused += 1
                continue
            jobs.append((wf.path, lang, records.expected_digest(entry, wf.size, lang, key)))
            sizes.append(wf.size)

        parsed = self._run_jobs(jobs, sizes, found, previous, cached, skipped, binaries)
        for path, old in previous.items():  # buffers of files not on disk (yet) stay
            if old.from_buffer and path not in found and self._admits(path):
                found[path] = old

        self._records = found
        self._skipped = sorted(skipped)
        self._binaries = binaries
        for path in [p for p in self._docs if p not in found]:
            del self._docs[path]
        self._graph = None
        self._rank_graph = None
        self._rankings.clear()
        self._outline_changed(None)
        self.stats.reused += reused
        if jobs or not cache_loaded or cached.keys() != found.keys() | binaries.keys():
            self._dirty = True
        self._save_if_dirty()
        seconds = time.perf_counter() - started
        self._report(len(found), len(found), "Indexed")
        log.info(
            "indexed %d files (%d parsed, %d reused, %d skipped) in %.2fs",
            len(found),
            parsed,
            reused,
            len(skipped),
            seconds,
        )
        return BuildReport(len(found), parsed, reused, len(skipped), seconds, cache_loaded)

    def _run_jobs(
        self,
        jobs: list[pool.Job],
        sizes: list[int],
        found: dict[str, FileRecord],
        previous: dict[str, FileRecord],
        cached: dict[str, Any],
        skipped: list[Skipped],
        binaries: dict[str, tuple[int, int]],
    ) -> int:
        """Read/parse what the cache could not vouch for; fill ``found``, ``skipped`` and
        ``binaries``. Returns the number of files parsed."""
        total = len(jobs)
        if not total:
            return 0
        parsing = sum(1 for job in jobs if job[1] is not None)
        workers = self.workers if parsing >= self.parallel_min_files else 1
        self._report(0, total, f"Indexing {total} files")

        def progress(done: int) -> None:
            self._report(done, total, f"Indexing {done}/{total} files")

        results: dict[str, pool.FileResult] = {}
        try:
            for result in pool.run(jobs, sizes, workers, progress):
                results[result[0]] = result
        except Exception as exc:  # a broken pool must not lose the build: finish in-process
            log.warning("worker pool failed (%s); indexing the rest in-process", exc)
            rest = [job for job in jobs if job[0] not in results]
            for result in pool.run(rest, [0] * len(rest), 1, None):
                results[result[0]] = result

        parsed = 0
        for path, lang, _expected in jobs:
            _p, status, size, mtime, digest, _key, plain, detail = results[path]
            root = self._ws.root_of(path)
            if root is None:
                continue
            if status in (pool.BINARY, pool.UNREADABLE):
                skipped.append(Skipped(path, status, detail))
                if status == pool.BINARY:
                    binaries[path] = (size, mtime)
                continue
            key = languages.grammar_key(lang) if lang is not None else ""
            if status == pool.SAME:  # only touched: keep the known symbols
                old = previous.get(path)
                plain = (
                    old.cache_entry()[6]
                    if old is not None
                    else records.plain_symbols(cached.get(path))
                )
                if plain is None:  # nothing usable after all: parse here
                    plain = pool.index_file((path, lang, None))[6]
                    parsed += 1
            elif status == pool.PARSED:
                parsed += 1
            display = self._ws.display(root, path)
            found[path] = FileRecord(
                path, root, display, lang, size, mtime, digest, key, None, plain=plain
            )
        self.stats.parsed += parsed
        return parsed

    # ----------------------------------------------------------------- updates

    def update(
        self,
        path: PathLike,
        text: str | None = None,
        edits: Sequence[Any] | None = None,
        *,
        position_encoding: str = "utf-16",
    ) -> bool:
        """One file changed: ``text`` is the editor buffer (None: read the file from disk,
        e.g. after a file-watcher event or when a buffer is closed unsaved). ``edits`` are the
        LSP incremental changes that led from the previous buffer to ``text`` (dicts or
        objects with ``range``/``text``), in ``position_encoding`` units; they let tree-sitter
        re-parse incrementally. Returns True when the file's definitions, outline or
        references changed (the map may have changed), False otherwise."""
        if position_encoding not in ENCODINGS:
            raise ValueError(f"position_encoding must be one of {ENCODINGS}")
        with self._lock:
            return self._update(path, text, edits, position_encoding)

    def _update(
        self, path_in: PathLike, text: str | None, edits: Sequence[Any] | None, encoding: str
    ) -> bool:
        path = self._ws.normalize(path_in)
        root = self._ws.root_of(path) if path is not None else None
        if path is None or root is None:
            return False
        self._maybe_ignore_file(path)
        if not self._ws.admits(root, path):
            return self._drop(path)
        old = self._records.get(path)
        if text is None:
            self._docs.pop(path, None)
            loaded = self._read(path)
            if loaded is None:
                return self._drop(path)
            if isinstance(loaded, bool):
                return loaded
            source, mtime = loaded
            from_buffer = False
        else:
            source, mtime, from_buffer = encode_text(text), -1, True
        if len(source) > self.max_file_bytes:
            return self._drop(path)
        display = self._ws.display(root, path)
        spec = languages.spec_for_path(path)
        doc = self._docs.get(path) if spec is not None else None
        # An open buffer's digest is only needed when the cache is written: computed then.
        digest = "" if doc is not None and from_buffer else pool.content_digest(source)
        if spec is None:  # no grammar: listed by name only
            record = FileRecord(
                path, root, display, None, len(source), mtime, digest, "", None, from_buffer
            )
            return self._store(path, old, record)
        lang = languages.load(spec.name)
        if doc is None and old is not None and old.digest == digest and old.lang == spec.name:
            # Same content as indexed (didOpen, or a save): keep the symbols; an open buffer
            # gets a tree so that its next edits parse incrementally.
            if from_buffer:
                self.stats.parsed += 1
                self._remember(path, OpenDocument(lang, source, *parse_and_extract(lang, source)))
            old.from_buffer, old.mtime_ns = from_buffer, mtime
            return False
        result = reparse(doc, lang, source, edits, encoding)
        if result.mode == "full":
            self.stats.parsed += 1
        elif result.mode == "region":
            self.stats.region += 1
        elif result.mode == "incremental":
            self.stats.incremental += 1
        else:
            self.stats.unchanged += 1
        if from_buffer:
            self._remember(path, result.document)
        symbols = result.document.symbols
        record = FileRecord(
            path, root, display, spec.name, len(source), mtime, digest, lang.grammar_key,
            symbols, from_buffer,
        )  # fmt: skip
        return self._store(path, old, record)

    def _read(self, path: str) -> tuple[bytes, int] | bool | None:
        """File contents and mtime; None when it is gone, unreadable or binary; False for a
        folder (nothing to do)."""
        try:
            data, mtime = read_regular_file(path, max_bytes=self.max_file_bytes)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return False
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc)
            return None
        return None if pool.is_binary(data) else (data, mtime)

    def _store(self, path: str, old: FileRecord | None, new: FileRecord) -> bool:
        """Install a changed record; True if anything the map uses changed."""
        self._records[path] = new
        self._dirty = True
        outline_changed = old is None or old.outline() != new.outline()
        if outline_changed:
            self._outline_changed(path)
        if self._graph is not None:
            graph_changed = self._graph.set_file(path, new.symbols)
        elif old is not None and old.symbols is not None and new.symbols is not None:
            graph_changed = not dict.__eq__(old.symbols.ref_counts(), new.symbols.ref_counts())
        else:
            graph_changed = True
        return outline_changed or graph_changed

    def remove(self, path: PathLike) -> bool:
        """A file (or a folder: everything under it) was deleted. True if anything was."""
        with self._lock:
            norm = self._ws.normalize(path)
            if norm is None:
                return False
            self._maybe_ignore_file(norm)
            prefix = norm.rstrip(os.sep) + os.sep
            doomed = [p for p in self._records if p == norm or p.startswith(prefix)]
            for p in doomed:
                self._drop(p)
            return bool(doomed)

    def _drop(self, path: str) -> bool:
        self._docs.pop(path, None)
        old = self._records.pop(path, None)
        if old is None:
            return False
        self._dirty = True
        if self._graph is not None:
            self._graph.remove_file(path)
        self._outline_changed(path)
        return True

    def _outline_changed(self, path: str | None) -> None:
        """What the map could show changed, in ``path`` (None: anywhere)."""
        self._outline_version += 1
        if path is None or len(self._outline_log) >= _OUTLINE_LOG_MAX:
            # Maps built before now cannot know what changed: they rebuild their candidates.
            self._outline_log.clear()
            self._outline_log_start = self._outline_version
        else:
            self._outline_log.append(path)

    def _outline_changes_since(self, version: int) -> set[str] | None:
        """Paths whose outline changed after ``version``; None when not known."""
        if version < self._outline_log_start:
            return None
        return set(self._outline_log[version - self._outline_log_start :])

    def _admits(self, path: str) -> bool:
        root = self._ws.root_of(path)
        return root is not None and self._ws.admits(root, path)

    def _remember(self, path: str, doc: OpenDocument) -> None:
        self._docs[path] = doc
        self._docs.move_to_end(path)
        while len(self._docs) > self.max_open_documents:
            self._docs.popitem(last=False)

    def _maybe_ignore_file(self, path: str) -> None:
        parts = path.split(os.sep)
        if parts[-1] == ".gitignore" or parts[-2:] in (
            [".contenox", "ignore"],
            ["info", "exclude"],
        ):
            self._ws.reset_rules()
            self.rescan_needed = True
            log.info("ignore rules changed (%s); build() re-walks the workspace", path)

    # ----------------------------------------------------------------- the map

    def repo_map(
        self,
        budget_tokens: int = 1024,
        focus_files: Iterable[PathLike] = (),
        focus_idents: Iterable[str] = (),
        count_tokens: Callable[[str], int] | None = None,
        *,
        stable: bool = True,
    ) -> RepoMap:
        """The ranked map within ``budget_tokens`` (counted with ``count_tokens``, default
        ~4 characters per token). ``focus_files``: open, pinned and recently edited files;
        ``focus_idents``: identifiers from the user's question. ``stable`` (default) applies
        hysteresis: the previous map for this budget is kept unless a change clearly matters.
        ``stable=False`` ranks afresh and ignores history (pure function of the index)."""
        with self._lock:
            focus = sorted({p for f in focus_files if (p := self._ws.normalize(f)) is not None})
            idents = sorted(set(focus_idents))
            ranked = self._ranked(focus, idents, stable)
            candidates = self._candidates(ranked, idents)
            incumbents = self._selection.get(budget_tokens, []) if stable else []
            result, selected = render(candidates, budget_tokens, count_tokens, incumbents)
            if stable and self._selection.get(budget_tokens) != selected:
                self._selection[budget_tokens] = selected
                self._dirty = True
            return result

    def warm_map(self) -> None:
        """Build what every map needs whatever its focus — the symbol graph (every file's
        symbols decoded) and PageRank's graph without focus — so that the first map costs its
        ranking and candidates only (about 60% of a first map's time at 8,000 files goes to
        these two). A host calls it after ``build`` while it still treats the index as
        building."""
        with self._lock:
            self._prepared(self._ensure_graph())

    def _candidates(self, ranked: _Ranked, idents: list[str]) -> Candidates:
        """``ranked``'s candidates, brought up to the current outlines: the files changed
        since are swapped in one by one (a signature edit costs one file, not the
        workspace); after a build, or when too much changed, they are scored afresh."""
        candidates = ranked.candidates
        if candidates is not None and ranked.outline_version != self._outline_version:
            changed = self._outline_changes_since(ranked.outline_version)
            if (changed is None or len(changed) > _PATCH_MAX_FILES
                    or 4 * len(changed) > len(self._records)):
                candidates = None
            else:
                for path in sorted(changed):
                    r = self._records.get(path)
                    view = FileView(r.path, r.display, r.symbols) if r is not None else None
                    candidates.replace(path, view)
        if candidates is None:
            # Only the ranking in use keeps its candidates (an item per definition: ~170 MiB
            # at 20,000 files); another focus's are scored again when it comes back.
            for other in self._rankings.values():
                if other is not ranked:
                    other.candidates = None
            views = [FileView(r.path, r.display, r.symbols) for r in self._records.values()]
            candidates = Candidates(views, ranked.ranking, idents)
            self.stats.candidate_builds += 1
        ranked.candidates = candidates
        ranked.outline_version = self._outline_version
        return candidates

    def _ensure_graph(self) -> SymbolGraph:
        if self._graph is None:
            graph = SymbolGraph()
            for path in sorted(self._records):
                graph.set_file(path, self._records[path].symbols)
            self._graph = graph
        return self._graph

    def _ranked(self, focus: list[str], idents: list[str], stable: bool) -> _Ranked:
        graph = self._ensure_graph()
        key = (tuple(focus), tuple(idents))
        ranked = self._rankings.get(key)
        if ranked is not None:
            fresh = ranked.graph_version == graph.version
            if stable and not fresh:
                # Reference drift from ordinary edits does not warrant a re-rank.
                limit = max(_CHURN_MIN, int(_CHURN_SHARE * graph.size()))
                fresh = (
                    ranked.file_set_version == graph.file_set_version
                    and graph.churn - ranked.churn <= limit
                )
            if fresh:
                self._rankings.move_to_end(key)
                return ranked
        # A stable map seeds PageRank with the previous ranking: a few iterations then suffice
        # (the low-order bits depend on history, which stability does anyway).
        start = ranked.ranking if stable and ranked is not None else None
        ranking = rank(graph, graph.paths(), set(focus), set(idents), start,
                       self._prepared(graph))
        self.stats.rankings += 1
        ranked = _Ranked(ranking, graph.version, graph.file_set_version, graph.churn)
        if stable or key not in self._rankings:
            self._rankings[key] = ranked
            self._rankings.move_to_end(key)
            while len(self._rankings) > _RANKINGS_KEPT:
                self._rankings.popitem(last=False)
        return ranked

    def _prepared(self, graph: SymbolGraph) -> RankGraph:
        """``rank``'s graph for the current symbol graph, kept until it changes: a map for
        another focus file reuses it."""
        kept = self._rank_graph
        if kept is not None and kept[0] is graph and kept[1] == graph.version:
            return kept[2]
        self._rank_graph = None  # the old one goes before the new one is built
        prepared = prepare(graph, graph.paths())
        self.stats.rank_graphs += 1
        self._rank_graph = (graph, graph.version, prepared)
        return prepared

    # ----------------------------------------------------------------- queries

    def definitions(self, name: str) -> list[Symbol]:
        """Every definition called ``name`` (nested ones too), sorted by path and line."""
        with self._lock:
            graph = self._ensure_graph()
            out: list[Symbol] = []
            for path in graph.definers(name):
                out += [s for s in self._records[path].public_symbols() if s.name == name]
            return out

    def references(self, name: str) -> list[Location]:
        """Every tagged use of ``name`` (calls, type uses, imports, ...), sorted."""
        with self._lock:
            graph = self._ensure_graph()
            out: list[Location] = []
            for path in sorted(graph.used.get(name, {})):
                symbols = self._records[path].symbols
                if symbols is None:
                    continue
                pos = symbols.ref_pos
                for i, ref in enumerate(symbols.ref_names):
                    if ref == name:
                        out.append(Location(path, pos[3 * i + 1], pos[3 * i + 2]))
            return out

    def file_symbols(self, path: PathLike) -> list[Symbol]:
        """The definitions of one file in source order (empty if not indexed)."""
        with self._lock:
            norm = self._ws.normalize(path)
            record = self._records.get(norm) if norm is not None else None
            return record.public_symbols() if record is not None else []

    def versions(self) -> dict[str, str]:
        """Content digest of every parsed file (absolute path → digest): what a derived index
        (``repo_index.lexical``) compares to find the files it must redo."""
        with self._lock:
            return {p: r.digest for p, r in self._records.items() if r.lang is not None}

    def buffer_paths(self) -> set[str]:
        """The files whose symbols come from an editor buffer (``update`` with a text), not
        from the disk."""
        with self._lock:
            return {p for p, r in self._records.items() if r.from_buffer}

    def version(self, path: PathLike) -> str | None:
        """Content digest of one parsed file (None if not indexed or no grammar)."""
        with self._lock:
            norm = self._ws.normalize(path)
            record = self._records.get(norm) if norm is not None else None
            return record.digest if record is not None and record.lang is not None else None

    def display_path(self, path: PathLike) -> str | None:
        """How the map names ``path`` (workspace-relative POSIX); None if not indexed."""
        with self._lock:
            norm = self._ws.normalize(path)
            record = self._records.get(norm) if norm is not None else None
            return record.display if record is not None else None

    def raw_definitions(self, path: PathLike) -> tuple[Definition, ...]:
        """The definitions of one file with their extents (empty if not indexed or no
        grammar): what ``repo_index.chunks`` cuts a file into."""
        with self._lock:
            norm = self._ws.normalize(path)
            record = self._records.get(norm) if norm is not None else None
            symbols = record.symbols if record is not None else None
            return symbols.defs if symbols is not None else ()

    def references_in(self, path: PathLike, first_line: int, last_line: int) -> list[str]:
        """Names referenced on 0-based lines ``first_line..last_line`` of ``path``, in source
        order with repeats (calls, attribute calls, types, decorators, imports)."""
        with self._lock:
            norm = self._ws.normalize(path)
            record = self._records.get(norm) if norm is not None else None
            symbols = record.symbols if record is not None else None
            if symbols is None:
                return []
            pos = symbols.ref_pos
            return [
                name
                for i, name in enumerate(symbols.ref_names)
                if first_line <= pos[3 * i + 1] <= last_line
            ]

    def files(self) -> list[str]:
        """Indexed files (absolute paths, sorted), with or without a grammar."""
        with self._lock:
            return sorted(self._records)

    def is_indexed(self, path: PathLike) -> bool:
        with self._lock:
            norm = self._ws.normalize(path)
            return norm is not None and norm in self._records

    @property
    def skipped(self) -> tuple[Skipped, ...]:
        """What the last build left out and why (``Skipped.reason``: ignored, too-large,
        binary, symlink-escape, symlink-loop, symlink-internal, broken-symlink, ...)."""
        with self._lock:
            return tuple(self._skipped)

    # ----------------------------------------------------------------- persistence

    def save(self) -> bool:
        """Write the persistent cache now (build() does so itself; call this on shutdown or
        idle so that edits and the map's hysteresis state survive a restart)."""
        with self._lock:
            self._dirty = True
            return self._save_if_dirty()

    def _save_if_dirty(self) -> bool:
        if self._cache is None or not self._dirty:
            return False
        for path, record in self._records.items():
            if not record.digest and path in self._docs:
                record.digest = pool.content_digest(self._docs[path].source)
        # One entry at a time: the whole cache's plain form is never held at once.
        files = itertools.chain(
            ((p, r.cache_entry()) for p, r in self._records.items()),
            ((p, records.binary_entry(*v)) for p, v in self._binaries.items()))
        state = {"selection": {str(b): tuple(keys) for b, keys in self._selection.items()}}
        ok = self._cache.save(files, state)
        if ok:
            self._dirty = False
            self.stats.cache_saves += 1
        return ok

    def _restore_state(self, state: dict[str, Any]) -> None:
        selection = state.get("selection")
        if not isinstance(selection, dict):
            return
        try:
            self._selection = {
                int(b): [tuple(str(x) for x in key) for key in keys]
                for b, keys in selection.items()
            }
        except (TypeError, ValueError) as exc:
            log.debug("ignoring malformed map state in cache: %s", exc)

    def _report(self, done: int, total: int, message: str) -> None:
        if self.on_progress is None:
            return
        try:
            self.on_progress(done, total, message)
        except Exception:  # the host's callback must not break indexing
            log.exception("progress callback failed")


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _default_cache_dir() -> str:
    return platformdirs.user_cache_dir("contenox-lsp")
