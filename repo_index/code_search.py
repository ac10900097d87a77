"""Which definitions a turn most likely needs: the symbol graph around the cursor, and lexical
search with the question.

``around_cursor`` depends only on the workspace and the cursor (it is known before the
question, so the idle prefill can warm it); ``search`` depends on the question. Both return
``Snippet``s: a chunk (``repo_index.chunks``) with its text, best first, deterministic.

The graph walk: the names referenced in the function around the cursor → their definitions
(hop 1) → the names those reference → their definitions (hop 2). Names are matched by name,
which is what tree-sitter tags give; a name with many definitions (``get``, ``__init__``) says
little and is skipped. Reaching a class also reaches its dunder methods, which callers never
name (``Foo(...)`` runs ``Foo.__init__``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from repo_index.chunks import Chunk, chunks_of, enclosing
from repo_index.imports import ImportScope, ModuleFiles, python_imports, scope_of
from repo_index.index import RepoIndex
from repo_index.lexical import LexicalIndex, terms
from repo_index.question_rank import DEFAULT_RANKER, Candidate, QuestionRanker, features
from repo_index.results import Symbol

#: A name defined in more places than this is too ambiguous to follow.
MAX_DEFINERS = 6
#: Hop-1 definitions whose own references are followed (hop 2).
HOP2_SOURCES = 12
#: A decorated function starting this few lines below the cursor counts as the cursor's.
NEXT_DEF_LINES = 15
#: Lines around the cursor used when it is not inside any function.
MODULE_WINDOW = 12
#: Weight of the identifiers near the cursor in the search query, relative to the question's.
CURSOR_TERM_WEIGHT = 0.3
#: Files whose chunks and lines are kept (a search's hits and the cursor's neighbours).
FILES_CACHED = 512
#: Why the question's search chose a definition (the question part's heading says it too).
QUESTION_REASON = "matches the question"
#: The question's search ranks this many BM25 hits (``question_rank``) ...
RERANK_POOL = 100
#: ... and the cursor's strongest graph definitions that BM25 did not find.
GRAPH_CANDIDATES = 10
#: The constructor of the class of each of the question's best this many methods is a
#: candidate too, ...
CONSTRUCTOR_FROM = 5
#: ... scored this share of its method's score.
CONSTRUCTOR_SHARE = 0.5
#: Definitions in test code count this much in the symbol graph.
TEST_CODE_WEIGHT = 0.5

ReadText = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Snippet:
    """A chunk chosen for the prompt: where it is, what it shows and why it was chosen."""

    path: str  # absolute
    display: str  # workspace-relative, as the repo map names it
    chunk: Chunk
    lines: tuple[tuple[int, str], ...]  # (0-based line, text) shown
    score: float
    reason: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.path, self.chunk.def_line)


@dataclass(frozen=True)
class FileHit:
    """A file the question's search ranked a candidate in, by its best one (or one a
    definition's code imports a name from: ``CodeFinder.imported_files``)."""

    path: str  # absolute
    display: str  # workspace-relative
    def_line: int  # 0-based, of its best candidate (of the name imported; 0: not found)
    score: float  # its best candidate's (the importing definition's)


@dataclass(frozen=True)
class QuestionHits:
    """What the question's search found: the snippets, best first, and the file of every
    candidate it ranked, best first, each once."""

    snippets: list[Snippet]
    files: tuple[FileHit, ...]


def is_test_path(path: str) -> bool:
    parts = path.replace(os.sep, "/").split("/")
    name = parts[-1]
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
        or any(p in ("tests", "test", "testing") for p in parts[:-1])
    )


def _module_named(path: str, name: str) -> bool:
    """Whether ``path`` is module ``name``'s file (``name.py``, ``name/__init__.py``)."""
    folder, file = os.path.split(path)
    stem = os.path.splitext(file)[0]
    return stem == name or (stem == "__init__" and os.path.basename(folder) == name)


def mirrored_name(path: str) -> str | None:
    """The source file name a test module is named after (``test_x.py``, ``x_test.py`` ->
    ``x.py``); None for anything else."""
    name = path.replace(os.sep, "/").rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    if not dot:
        return None
    if stem.startswith("test_") and len(stem) > 5:
        return f"{stem[5:]}.{ext}"
    if stem.endswith("_test") and len(stem) > 5:
        return f"{stem[:-5]}.{ext}"
    return None


class CodeFinder:
    """Definitions for the code segment, from one ``RepoIndex``.

    ``read_text(path)`` gives a file's current text (the editor buffer when open): it must be
    the text the index parsed, so lines match. Keeps a lexical index in step with the repo
    index (``sync``), one file at a time.
    """

    def __init__(self, index: RepoIndex, read_text: ReadText,
                 search_sync_files: int | None = None,
                 ranker: QuestionRanker = DEFAULT_RANKER) -> None:
        self.index = index
        self.read_text = read_text
        self.ranker = ranker  # orders the question's search (question_rank)
        # How many files a search brings up to date first (None: all). A host that syncs a
        # large workspace in slices of its own sets it, so a search during the first sync
        # does not do the whole backlog: edited files come first, and the rest wait.
        self.search_sync_files = search_sync_files
        self.pending = 0  # files the last sync left for later
        self.lexical = LexicalIndex()
        # path -> (digest, chunks, lines), the most recently used last: a bounded cache (the
        # whole workspace's lines would be hundreds of MiB on a large one).
        self._chunks: OrderedDict[str, tuple[str, list[Chunk], list[str]]] = OrderedDict()
        # path -> (digest, its imports resolved), for the files the graph walk starts from
        self._scopes: dict[str, tuple[str, ImportScope]] = {}
        self._modules: ModuleFiles | None = None

    # -- files -----------------------------------------------------------------------------

    def _file(self, path: str, digest: str | None = None) -> tuple[list[Chunk], list[str]]:
        """Chunks and lines of ``path`` at the index's version (cached by digest)."""
        if digest is None:
            digest = self.index.version(path)
        if digest is None:
            return [], []
        cached = self._chunks.get(path)
        if cached is not None and cached[0] == digest:
            self._chunks.move_to_end(path)
            return cached[1], cached[2]
        text = self.read_text(path)
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if text else []
        chunks = chunks_of(self.index.raw_definitions(path)) if lines else []
        self._chunks[path] = (digest, chunks, lines)
        self._chunks.move_to_end(path)
        while len(self._chunks) > FILES_CACHED:
            self._chunks.popitem(last=False)
        return chunks, lines

    @property
    def indexed_files(self) -> int:
        return self.lexical.file_count()

    def sync(self, limit: int | None = None, *, disk_only: bool = False) -> int:
        """Bring the lexical index up to the repo index — at most ``limit`` files (None: all):
        the developer's working set first (files edited since they were indexed, files the
        index has from an editor buffer), then the rest, each in path order; ``pending`` says
        how many are left. ``disk_only``: leave out the files the index has from a buffer
        (``read_text`` is then the disk's: a host's background fill, which does not know the
        buffers; a search, whose ``read_text`` does, takes them). Returns the files redone."""
        versions = self.index.versions()
        for path in [p for p in self.lexical.paths() if p not in versions]:
            self.lexical.remove_file(path)
            self._chunks.pop(path, None)
        buffers = self.index.buffer_paths()
        first: list[str] = []
        rest: list[str] = []
        for path in sorted(versions):
            indexed = self.lexical.version(path)
            if indexed == versions[path] or (disk_only and path in buffers):
                continue
            (first if indexed is not None or path in buffers else rest).append(path)
        todo = first + rest
        if limit is not None:
            todo = todo[: max(limit, 0)]
        self.pending = len(first) + len(rest) - len(todo)
        redone = 0
        for path in todo:
            digest = versions[path]
            chunks, lines = self._file(path, digest)
            self.lexical.set_file(
                path,
                digest,
                (
                    (c.def_line, c.qualname, "\n".join(t for _, t in c.lines(lines)))
                    for c in chunks
                ),
            )
            redone += 1
        return redone

    def _snippet(self, path: str, chunk: Chunk, lines: list[str], score: float,
                 reason: str) -> Snippet:
        display = self.index.display_path(path) or path
        return Snippet(path, display, chunk, tuple(chunk.lines(lines)), score, reason)

    def _chunk_at(self, path: str, line: int) -> tuple[Chunk | None, list[str]]:
        chunks, lines = self._file(path)
        exact = next((c for c in chunks if c.def_line == line), None)
        return (exact or enclosing(chunks, line)), lines

    # -- the symbol graph ------------------------------------------------------------------

    def cursor_names(self, path: str, line: int) -> tuple[Chunk | None, list[str]]:
        """The chunk around 0-based ``line`` of ``path`` and the names referenced in it."""
        chunks, lines = self._file(path)
        here = enclosing(chunks, line)
        if here is None or here.kind != "function":
            # In a decorator (a parametrize list): the function it decorates, i.e. the next
            # one with no blank line in between. A blank line is where new code goes.
            below = next((c for c in chunks if c.kind == "function"
                          and line < c.start_line <= line + NEXT_DEF_LINES), None)
            if below is not None and all(t.strip() for t in lines[line:below.start_line]):
                here = below
        if here is not None and here.kind == "function":
            return here, self.index.references_in(path, here.start_line, here.end_line)
        return here, self.index.references_in(path, line - MODULE_WINDOW, line + MODULE_WINDOW)

    def chunk_references(self, path: str, chunk: Chunk) -> list[str]:
        """Names referenced in the lines ``chunk`` shows (a class outline: not its methods)."""
        out: list[str] = []
        start = chunk.start_line
        for skip_start, skip_end in chunk.skip:
            out += self.index.references_in(path, start, skip_start - 1)
            start = skip_end + 1
        return out + self.index.references_in(path, start, chunk.end_line)

    def around_cursor(
        self, path: str, line: int, limit: int = 40,
        at: tuple[Chunk | None, list[str]] | None = None,
    ) -> list[Snippet]:
        """Definitions the code at the cursor uses, one or two hops away, best first.
        ``at``: ``cursor_names(path, line)`` when the caller has it already."""
        here, names = at if at is not None else self.cursor_names(path, line)
        found: dict[tuple[str, int], tuple[float, Chunk, str]] = {}
        skip = {(path, here.def_line)} if here is not None else set()
        where = here.qualname if here is not None else f"line {line + 1}"

        def add(p: str, chunk: Chunk, weight: float, reason: str) -> None:
            key = (p, chunk.def_line)
            if key in skip:
                return
            old = found.get(key)
            found[key] = (weight + (old[0] if old else 0.0), chunk, old[2] if old else reason)

        # The workspace's modules, brought up to date once per walk, at the first file whose
        # imports are not cached (checking costs a pass over every indexed path).
        modules = functools.cache(self._module_files)

        def follow(source: str, counts: Counter[str], scale: float, reason: str) -> None:
            scope = self._import_scope(source, modules)
            for name, count in counts.items():
                defs = self.index.definitions(name)
                if len(defs) > 1 and scope is not None:
                    defs = self._imported_definitions(name, defs, scope, modules)
                if not defs or len(defs) > MAX_DEFINERS:
                    continue
                for sym in defs:
                    chunk, _ = self._chunk_at(sym.path, sym.line)
                    if chunk is None:
                        continue
                    w = scale * (1 + math.log(count)) / len(defs)
                    if is_test_path(sym.path):
                        w *= TEST_CODE_WEIGHT  # fixtures and helpers are rarely the point
                    elif sym.path == source:
                        w *= 1.5  # self.helper(): the same file is the likelier definer
                    add(sym.path, chunk, w, reason)
                    if chunk.kind == "class":
                        for c in self._file(sym.path)[0]:
                            if (c.qualname.startswith(chunk.name + ".")
                                    and c.name.startswith("__") and c.name.endswith("__")):
                                add(sym.path, c, w * 0.6, f"{reason} ({chunk.name}())")

        follow(path, Counter(names), 1.0, f"used by {where}")
        hop1 = sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0]))[:HOP2_SOURCES]
        for (p, _), (w, chunk, _) in hop1:
            inner = self.chunk_references(p, chunk)
            follow(p, Counter(n for n in inner if n != chunk.name), 0.5 * w,
                   f"used by {chunk.qualname}")
        ranked = sorted(found.items(), key=lambda kv: (-kv[1][0], kv[0]))[:limit]
        return [self._snippet(p, c, self._file(p)[1], w, r) for (p, _), (w, c, r) in ranked]

    def ranked_for_ask(self, snippets: Sequence[Snippet], *,
                       near_files: Collection[str] = (),
                       mirror_files: Collection[str] = ()) -> list[Snippet]:
        """The cursor's definitions (``around_cursor``) in the order an ask wants them:
        ``self.ranker`` with no question (BM25 and the question's words count nothing), so the
        idle prefill, which has no question, builds the same order. The graph's weight stays a
        feature; the source the open test module is named after, functions over class
        outlines and source over test code move up. Measured on the ctxeval tasks where the
        graph reaches a changed definition (61 of 153): it came first on 32 (graph order: 22),
        in the top 3 on 51 (31)."""
        near, mirrors = set(near_files), set(mirror_files)
        out = []
        for s in snippets:
            c = Candidate(path=s.path, display=s.display, chunk=s.chunk, bm25=0.0,
                          graph=s.score, mirror=s.path in mirrors, near=s.path in near,
                          test=is_test_path(s.path))
            out.append(dataclasses.replace(s, score=self.ranker.score(features(c, ()))))
        return sorted(out, key=lambda s: (-s.score, s.path, s.chunk.def_line))

    # -- imports ---------------------------------------------------------------------------

    def _module_files(self) -> ModuleFiles:
        """The indexed files as modules, rebuilt when the set of files changed."""
        paths = self.index.versions().keys()
        if self._modules is None or self._modules.paths != paths:
            self._modules = ModuleFiles(frozenset(paths))
        return self._modules

    def _import_scope(self, path: str,
                      modules: Callable[[], ModuleFiles]) -> ImportScope | None:
        """What ``path``'s imports say (None: not Python, or not indexed)."""
        if not path.endswith((".py", ".pyi")):
            return None
        digest = self.index.version(path)
        if digest is None:
            return None
        cached = self._scopes.get(path)
        if cached is not None and cached[0] == digest:
            return cached[1]
        _, lines = self._file(path, digest)
        scope = scope_of(python_imports("\n".join(lines)), path, modules())
        self._scopes[path] = (digest, scope)
        while len(self._scopes) > FILES_CACHED:
            self._scopes.pop(next(iter(self._scopes)))
        return scope

    def _imported_definitions(self, name: str, defs: list[Symbol], scope: ImportScope,
                              modules: Callable[[], ModuleFiles]) -> list[Symbol]:
        """Of a name's several definitions, those its user's imports point at: the module it
        was imported from (or, one level on, where that module imported it from: a package's
        ``__init__`` re-exporting it); all of them when the imports say nothing."""
        homes = self._import_homes(name, scope, modules)
        chosen = [d for d in defs if d.path in homes]
        return chosen or defs

    def _import_homes(self, name: str, scope: ImportScope,
                      modules: Callable[[], ModuleFiles]) -> set[str]:
        """The files ``scope``'s imports of ``name`` point at, and one level on, where those
        modules imported it from (a package's ``__init__`` re-exporting it)."""
        homes = set(scope.names.get(name, ()))
        for module in list(homes):
            inner = self._import_scope(module, modules)
            if inner is not None:
                homes.update(inner.names.get(name, ()))
        return homes

    def mirrored_sources(self, path: str) -> list[str]:
        """The source files the test module ``path`` is named after (``tests/test_x.py`` ->
        ``x.py`` or ``x/__init__.py``): of several, those whose folders share the most names
        with the test's (``tests/http/test_client.py`` -> ``pkg/http/client.py``)."""
        name = mirrored_name(path)
        if name is None:
            return []
        package = name.rpartition(".")[0] + "/__init__." + name.rpartition(".")[2]
        test_dirs = set(path.replace(os.sep, "/").split("/")[:-1])
        best: list[str] = []
        best_shared = -1
        for p in self.index.versions():
            norm = p.replace(os.sep, "/")
            if not (norm.endswith("/" + name) or norm.endswith("/" + package)) or is_test_path(p):
                continue
            shared = len(test_dirs & set(norm.split("/")[:-1]))
            if shared > best_shared:
                best, best_shared = [p], shared
            elif shared == best_shared:
                best.append(p)
        return sorted(best)

    # -- lexical search --------------------------------------------------------------------

    def question_candidates(
        self,
        question: str,
        cursor_names: Collection[str] = (),
        *,
        graph: Mapping[tuple[str, int], float] | None = None,
        near_files: Collection[str] = (),
        mirror_files: Collection[str] = (),
        exclude: Collection[tuple[str, int]] = (),
    ) -> list[tuple[Candidate, tuple[float, ...]]]:
        """What the question's search ranks, with each one's features (``question_rank``):
        the ``RERANK_POOL`` chunks BM25 finds for the question and, weaker, the identifiers
        near the cursor, then those of the ``RERANK_POOL`` it finds for the question alone,
        then the ``GRAPH_CANDIDATES`` strongest of ``graph`` (the cursor's symbol-graph
        weights by chunk key), each not found already; none of ``exclude``.
        ``near_files``: the files the cursor's code reaches; ``mirror_files``: the source the
        open test module is named after."""
        graph = graph or {}
        asked: dict[str, float] = {}
        _add_terms(asked, question, 1.0)
        near_cursor: dict[str, float] = {}
        _add_terms(near_cursor, " ".join(cursor_names), 1.0)
        if not asked and not near_cursor:
            return []
        self.sync(self.search_sync_files)
        by_question = self.lexical.scores(asked)
        both = by_question.plus(self.lexical.scores(near_cursor), CURSOR_TERM_WEIGHT)
        excluded = set(exclude)
        keys = [k for _, k in both.top(RERANK_POOL + len(excluded))
                if k not in excluded][:RERANK_POOL]
        found = set(keys)
        # The question's own best hits too: names repeated near the cursor can outweigh a
        # rare word of the question (``norwegian``) and push its one match out of the pool.
        for _, k in by_question.top(RERANK_POOL + len(excluded)):
            if k not in found and k not in excluded:
                keys.append(k)
                found.add(k)
        strongest = sorted(graph.items(), key=lambda kv: (-kv[1], kv[0]))
        keys += [k for k, _ in strongest if k not in found and k not in excluded
                 ][:GRAPH_CANDIDATES]
        near, mirrors = set(near_files), set(mirror_files)
        question_terms = frozenset(asked)
        out: list[tuple[Candidate, tuple[float, ...]]] = []
        for key in keys:
            p, def_line = key
            chunk, _ = self._chunk_at(p, def_line)
            if chunk is None or chunk.def_line != def_line:
                continue  # the lexical index lags an edit
            c = Candidate(path=p, display=self.index.display_path(p) or p, chunk=chunk,
                          bm25=by_question.of(key), graph=graph.get(key, 0.0),
                          mirror=p in mirrors, near=p in near, test=is_test_path(p))
            out.append((c, features(c, question_terms)))
        return out

    def search(
        self,
        question: str,
        cursor_names: Collection[str] = (),
        *,
        graph: Mapping[tuple[str, int], float] | None = None,
        near_files: Collection[str] = (),
        mirror_files: Collection[str] = (),
        exclude: Collection[tuple[str, int]] = (),
        limit: int = 20,
    ) -> list[Snippet]:
        """Chunks for the question, best first: ``question_candidates`` ordered by
        ``self.ranker`` (``question_rank``: BM25 with the question, the cursor's graph, the
        mirrored source and the files the cursor reaches up; test code and stubs down)."""
        return self.search_with_files(question, cursor_names, graph=graph,
                                      near_files=near_files, mirror_files=mirror_files,
                                      exclude=exclude, limit=limit).snippets

    def search_with_files(
        self,
        question: str,
        cursor_names: Collection[str] = (),
        *,
        graph: Mapping[tuple[str, int], float] | None = None,
        near_files: Collection[str] = (),
        mirror_files: Collection[str] = (),
        exclude: Collection[tuple[str, int]] = (),
        limit: int = 20,
    ) -> QuestionHits:
        """``search``'s snippets and the files of every candidate it ranked (past ``limit``
        too), in the same order: where else the question's words are, at no extra cost."""
        found = self.question_candidates(question, cursor_names, graph=graph,
                                         near_files=near_files, mirror_files=mirror_files,
                                         exclude=exclude)
        displays = {c.path: c.display for c, _ in found}
        scored = sorted(((self.ranker.score(feats), c.path, c.chunk.def_line)
                         for c, feats in found), key=lambda x: (-x[0], x[1], x[2]))
        scored, constructors = self._with_constructors(scored, set(exclude))
        # A graph definition with no word of the question, and a constructor brought by its
        # method, say why they are there.
        why = {(c.path, c.chunk.def_line): "used by the code at the cursor"
               for c, _ in found if c.bm25 == 0.0}
        why.update(constructors)
        snippets = [dataclasses.replace(s, reason=why[s.key]) if s.key in why else s
                    for s in self._snippets(scored, QUESTION_REASON, limit)]
        best: dict[str, FileHit] = {}
        for score, p, def_line in scored:
            if p not in best:
                best[p] = FileHit(p, displays[p], def_line, score)
        return QuestionHits(snippets, tuple(best.values()))

    def imported_files(self, snippets: Sequence[Snippet]) -> list[FileHit]:
        """The workspace files ``snippets``' code imports the names it uses from, in the
        snippets' order, each once, none of theirs: for ``from m import name`` the file that
        defines ``name`` (``m``, or where ``m``'s ``__init__`` imported it from), else ``m``'s
        own file. A fix in a definition often reaches into the helpers it imports."""
        modules = functools.cache(self._module_files)
        own = {s.path for s in snippets}
        out: dict[str, FileHit] = {}
        for s in snippets:
            scope = self._import_scope(s.path, modules)
            if scope is None:
                continue
            for name in dict.fromkeys(self.chunk_references(s.path, s.chunk)):
                homes = self._import_homes(name, scope, modules)
                if not homes:
                    continue  # not imported: the file's own, or a builtin
                # Where it is defined; an imported module is its own file, not its package's.
                places = sorted((d.path, d.line) for d in self.index.definitions(name)
                                if d.path in homes)
                if not places:
                    places = ([(p, 0) for p in sorted(homes) if _module_named(p, name)]
                              or [(p, 0) for p in sorted(homes)])
                for p, line in places:
                    if p not in own and p not in out:
                        out[p] = FileHit(p, self.index.display_path(p) or p, line, s.score)
        return list(out.values())

    def _with_constructors(
        self, scored: list[tuple[float, str, int]], exclude: Collection[tuple[str, int]],
    ) -> tuple[list[tuple[float, str, int]], dict[tuple[str, int], str]]:
        """``scored`` (score, path, def line; best first) with the ``__init__`` of the class
        of each of its first ``CONSTRUCTOR_FROM`` that is a method, scored
        ``CONSTRUCTOR_SHARE`` of that method's score (a constructor ranked higher keeps its
        own), none of ``exclude``; and why each one not ranked already is there. A fix to a
        method often changes what the constructor sets up, and a constructor seldom shares a
        word with the question: of the 35 changed definitions the search did not rank at all
        on the ctxeval tasks, 4 were the constructor of the class of one of its 5 best."""
        lifted: dict[tuple[str, int], float] = {}
        methods: dict[tuple[str, int], str] = {}
        for score, p, def_line in scored[:CONSTRUCTOR_FROM]:
            method, _ = self._chunk_at(p, def_line)
            if (method is None or method.def_line != def_line or method.kind != "function"
                    or "." not in method.qualname):
                continue  # not a method (a function, a class nested in a class)
            owner = method.qualname.split(".", 1)[0]
            init = next((c for c in self._file(p)[0] if c.qualname == f"{owner}.__init__"),
                        None)
            if init is None or init.def_line == def_line or (p, init.def_line) in exclude:
                continue
            key = (p, init.def_line)
            if key not in lifted:
                methods[key] = method.qualname  # the best method it is there for
            lifted[key] = max(lifted.get(key, 0.0), score * CONSTRUCTOR_SHARE)
        if not lifted:
            return scored, {}
        ranked = {(p, d) for _, p, d in scored}
        out = [(max(s, lifted.get((p, d), 0.0)), p, d) for s, p, d in scored]
        out += [(s, p, d) for (p, d), s in lifted.items() if (p, d) not in ranked]
        out.sort(key=lambda x: (-x[0], x[1], x[2]))
        return out, {k: f"constructor for {methods[k]}" for k in lifted if k not in ranked}

    def similar(self, code: str, *, skip_path: str | None = None,
                limit: int = 4) -> list[Snippet]:
        """Chunks whose words most resemble ``code`` (plain BM25, no priors: how the rest of
        the repository writes the same thing), none from ``skip_path``; best first."""
        query: dict[str, float] = {}
        _add_terms(query, code, 1.0)
        if not query:
            return []
        self.sync(self.search_sync_files)
        hits = [(score, p, def_line)
                for score, (p, def_line) in self.lexical.search(query, RERANK_POOL)
                if p != skip_path]
        return self._snippets(hits, "similar code", limit)

    def definitions_at(self, places: Iterable[tuple[str, int]], reason: str,
                       limit: int) -> list[Snippet]:
        """The definitions around ``places`` (absolute path, 0-based line), each once, the
        first ``limit`` in the order given; a place in a file the index does not have, or
        outside every definition, gives none. Scores fall with the order (1, 1/2, ...)."""
        out: list[Snippet] = []
        seen: set[tuple[str, int]] = set()
        for p, line in places:
            if self.index.version(p) is None:
                continue
            chunk, lines = self._chunk_at(p, line)
            if chunk is None or (p, chunk.def_line) in seen:
                continue
            seen.add((p, chunk.def_line))
            out.append(self._snippet(p, chunk, lines, 1.0 / len(seen), reason))
            if len(out) >= limit:
                break
        return out

    def _snippets(self, ranked: Iterable[tuple[float, str, int]], reason: str,
                  limit: int) -> list[Snippet]:
        """The first ``limit`` of ``ranked`` (score, path, def line) whose chunk the file
        still has at that line (the lexical index may lag an edit)."""
        out: list[Snippet] = []
        for score, p, def_line in ranked:
            chunk, lines = self._chunk_at(p, def_line)
            if chunk is None or chunk.def_line != def_line:
                continue
            out.append(self._snippet(p, chunk, lines, score, reason))
            if len(out) >= limit:
                break
        return out


def _add_terms(query: dict[str, float], text: str, weight: float) -> None:
    """Add ``text``'s search terms to ``query``, each occurrence counting ``weight``."""
    for t in terms(text):
        query[t] = query.get(t, 0.0) + weight


def texts_reader(buffers: Mapping[str, str], read_disk: ReadText) -> ReadText:
    """``read_text`` for ``CodeFinder``: the open buffer when there is one, else the disk."""

    def read(path: str) -> str | None:
        text = buffers.get(path)
        return text if text is not None else read_disk(path)

    return read
