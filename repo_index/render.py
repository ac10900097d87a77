"""Select and render the repo map: file headers with the signature lines of the top-ranked
definitions, fitted to a token budget.

Stability is the point (the map is a cached prompt prefix; any change re-prefills it):

* only signatures are shown, never bodies or line numbers, so body edits cannot show up;
* scores are quantized (``QUANTUM`` steps per doubling), so rank noise inside a step is
  invisible and ties break by path and position;
* hysteresis: what the previous map (same budget) showed keeps a ``MARGIN``-step head start,
  so a newcomer must clearly beat an incumbent to displace it;
* output order is by path, then by position in the file, never by score.

The digest is SHA-256 over exactly the rendered text.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass

from repo_index.rank import Ranking
from repo_index.symbols import FileSymbols

QUANTUM = 8  # score buckets per doubling (~9% apart)
MARGIN = 3  # incumbent head start, in buckets (~30%)
DEF_BASE_SHARE = 0.1  # unreferenced definitions inherit a little of their file's rank
FILE_SHARE = 0.01  # a bare file name ranks well below its definitions
PRIVATE_FACTOR = 0.1
FOCUS_IDENT_FACTOR = 100.0  # a definition named in the user's question
MAX_MISSES = 200  # stop looking for something that still fits after this many misses
# Replaced files are folded into the sorted base past these (a sort of every item: rare).
COMPACT_FILES = 256
COMPACT_ITEMS = 16_384
_NEVER = -(10**9)

ItemKey = tuple[str, ...]


def estimate_tokens(text: str) -> int:
    """Cheap default token count: about four characters per token."""
    return (len(text) + 3) // 4


@dataclass(frozen=True)
class RepoMap:
    text: str
    digest: str  # sha256 hex of ``text``
    files: tuple[str, ...]  # absolute paths of the files shown, in map order
    tokens: int  # count_tokens(text)
    budget: int


@dataclass(frozen=True)
class FileView:
    """What the renderer needs of one file."""

    path: str
    display: str
    symbols: FileSymbols | None


# (-bucket, display, def index or -1 (the file's bare name), path): best first, ties by
# display, then position in the file (a file's definitions are sorted by position). Kept to
# shared objects only: a large workspace has an item per definition (400,000 at 20,000
# files); an item's key (``item_keys``) is derived when a map needs it.
_Candidate = tuple[int, str, int, str]


def _bucket(score: float) -> int:
    return math.floor(math.log2(score) * QUANTUM) if score > 0.0 else _NEVER


class Candidates:
    """Every showable item with its quantized score, best first (built once per ranking).

    A file whose outline changed is swapped in with ``replace`` instead of a rebuild: its
    items are scored against the same ranking, so the stream equals a fresh build's (items
    are unique, ordered by a total key), at a cost of one file rather than the workspace's."""

    def __init__(
        self, files: Iterable[FileView], ranking: Ranking, focus_idents: Collection[str] = ()
    ) -> None:
        self.ranking = ranking
        self.focus_idents = focus_idents
        self.views: dict[str, FileView] = {}
        self._of: dict[str, list[_Candidate]] = {}  # path -> its items
        # path -> item_keys(its view), for the files maps have shown (a map's handful)
        self._keys: dict[str, dict[int, ItemKey]] = {}
        base: list[_Candidate] = []
        for view in files:
            base += self._add(view)
        base.sort()
        self._base = base
        # Files replaced since the base was sorted: their base items are skipped, their
        # current ones wait in ``_fresh`` (sorted) and are merged in while streaming.
        self._stale: set[str] = set()
        self._fresh: list[_Candidate] = []

    def _add(self, view: FileView) -> list[_Candidate]:
        own = _file_items(view, self.ranking, self.focus_idents)
        self.views[view.path] = view
        self._of[view.path] = own
        return own

    def item(self, key: ItemKey) -> _Candidate | None:
        """The item with ``key`` (its first part is its file's path), if it is still there."""
        return self.items_with([key]).get(key)

    def items_with(self, keys: Iterable[ItemKey]) -> dict[ItemKey, _Candidate]:
        """The items that still have these keys. Looked up in their files' items rather than
        in a map of every item: a map's handful of incumbents do not warrant a dictionary
        entry per definition of the workspace."""
        wanted: dict[str, set[ItemKey]] = {}
        for key in keys:
            wanted.setdefault(key[0], set()).add(key)
        out: dict[ItemKey, _Candidate] = {}
        for path, want in wanted.items():
            view = self.views.get(path)
            if view is None:
                continue
            by_index = {i: key for i, key in self._keys_of_file(path).items() if key in want}
            for item in self._of[path]:
                found = by_index.get(item[2])
                if found is not None:
                    out[found] = item
        return out

    def keys_of(self, items: Iterable[_Candidate]) -> list[ItemKey]:
        """The keys of ``items`` (current items), in order."""
        return [self._keys_of_file(item[3])[item[2]] for item in items]

    def _keys_of_file(self, path: str) -> dict[int, ItemKey]:
        keys = self._keys.get(path)
        if keys is None:
            keys = self._keys[path] = item_keys(self.views[path])
        return keys

    def replace(self, path: str, view: FileView | None) -> None:
        """``path`` now looks like ``view`` (None: it is gone)."""
        self._of.pop(path, None)
        self.views.pop(path, None)
        self._keys.pop(path, None)
        self._stale.add(path)
        fresh = [item for item in self._fresh if item[3] != path]
        if view is not None:
            fresh += self._add(view)
        fresh.sort()  # two sorted runs: linear
        self._fresh = fresh
        if len(self._stale) > COMPACT_FILES or len(fresh) > COMPACT_ITEMS:
            self._compact()

    def _compact(self) -> None:
        """Fold the replaced files into the base (rare: bounded by the thresholds)."""
        stale = self._stale
        merged = [item for item in self._base if item[3] not in stale]
        merged += self._fresh
        merged.sort()
        self._base, self._stale, self._fresh = merged, set(), []

    def ordered(self) -> Iterator[_Candidate]:
        """Every item, best first."""
        if not self._stale:
            return iter(self._base)
        stale = self._stale
        return heapq.merge((item for item in self._base if item[3] not in stale), self._fresh)

    @property
    def items(self) -> list[_Candidate]:
        return list(self.ordered())


def _file_items(
    view: FileView, ranking: Ranking, focus_idents: Collection[str]
) -> list[_Candidate]:
    """The items of one file: its bare name and each outline definition, scored."""
    file_rank = ranking.files.get(view.path, 0.0)
    items: list[_Candidate] = [(-_bucket(FILE_SHARE * file_rank), view.display, -1, view.path)]
    symbols = view.symbols
    if symbols is None or not symbols.defs:
        return items
    visible = symbols.visible()
    shown = sum(visible)
    if not shown:
        return items
    base = DEF_BASE_SHARE * file_rank / shown
    for i, d in enumerate(symbols.defs):
        if not visible[i]:
            continue
        score = ranking.names.get(d.name, 0.0) + base
        if d.name.startswith("_"):
            score *= PRIVATE_FACTOR
        if d.name in focus_idents:
            score *= FOCUS_IDENT_FACTOR
        items.append((-_bucket(score), view.display, i, view.path))
    return items


def item_keys(view: FileView) -> dict[int, ItemKey]:
    """Each item of one file by its def index (-1: the bare name): its key, which names it
    across edits that move code (path, parent's name, name, kind, ordinal among namesakes)."""
    keys: dict[int, ItemKey] = {-1: (view.path,)}
    symbols = view.symbols
    if symbols is None:
        return keys
    visible = symbols.visible()
    parents = symbols.parents()
    seen: dict[tuple[str, str, str], int] = {}
    for i, d in enumerate(symbols.defs):
        if not visible[i]:
            continue
        parent = symbols.defs[parents[i]].name if parents[i] >= 0 else ""
        ident = (parent, d.name, d.kind)
        ordinal = seen.get(ident, 0)
        seen[ident] = ordinal + 1
        keys[i] = (view.path, parent, d.name, d.kind, str(ordinal))
    return keys


class _Plan:
    """Accepted items and the lines they need, with running token cost."""

    def __init__(self, candidates: Candidates, count: Callable[[str], int]) -> None:
        self.c = candidates
        self.count = count
        self.cost_cache: dict[str, int] = {}
        self.lines: dict[str, set[int]] = {}  # path -> def indices shown
        self.files: dict[str, bool] = {}  # path -> has definition lines
        self.used = 0

    def cost(self, text: str) -> int:
        n = self.cost_cache.get(text)
        if n is None:
            n = self.count(text)
            self.cost_cache[text] = n
        return n

    def def_line(self, path: str, i: int) -> str:
        symbols = self.c.views[path].symbols
        assert symbols is not None
        parents = symbols.parents()
        depth = 0
        p = parents[i]
        while p >= 0:
            depth += 1
            p = parents[p]
        return "  " * (depth + 1) + symbols.defs[i].signature + "\n"

    def needed(self, path: str, i: int) -> list[int]:
        """``i`` plus its enclosing definitions not shown yet (context for the reader)."""
        symbols = self.c.views[path].symbols
        assert symbols is not None
        parents = symbols.parents()
        have = self.lines.get(path, set())
        out = []
        while i >= 0 and i not in have:
            out.append(i)
            i = parents[i]
        return out

    def try_add(self, path: str, i: int, budget: int) -> bool:
        display = self.c.views[path].display
        extra = 0
        if i < 0:
            if path in self.files:
                return True  # already shown
            extra = self.cost(display + "\n")
            if self.used + extra > budget:
                return False
            self.files[path] = False
            self.used += extra
            return True
        need = self.needed(path, i)
        if not need:
            return True
        has_defs = self.files.get(path)
        if has_defs is None:
            extra += self.cost(display + ":\n")
        elif has_defs is False:
            extra += self.cost(display + ":\n") - self.cost(display + "\n")
        extra += sum(self.cost(self.def_line(path, j)) for j in need)
        if self.used + extra > budget:
            return False
        self.files[path] = True
        self.lines.setdefault(path, set()).update(need)
        self.used += extra
        return True

    def render(self) -> tuple[str, tuple[str, ...]]:
        order = sorted(self.files, key=lambda p: (self.c.views[p].display, p))
        out: list[str] = []
        for path in order:
            view = self.c.views[path]
            if not self.files[path]:
                out.append(view.display + "\n")
                continue
            out.append(view.display + ":\n")
            symbols = view.symbols
            assert symbols is not None
            for i in sorted(self.lines[path], key=lambda j: symbols.defs[j].name_byte):
                out.append(self.def_line(path, i))
        return "".join(out), tuple(order)


def _stream(candidates: Candidates, incumbents: Iterable[ItemKey]) -> Iterable[_Candidate]:
    """Candidates best first, incumbents lifted by ``MARGIN`` buckets; each key once."""
    lifted = sorted(
        (item[0] - MARGIN, *item[1:]) for item in candidates.items_with(incumbents).values()
    )
    seen: set[tuple[str, int]] = set()
    for item in heapq.merge(lifted, candidates.ordered()):
        ident = (item[3], item[2])  # (path, def index): one item
        if ident in seen:
            continue
        seen.add(ident)
        yield item


def render(
    candidates: Candidates,
    budget: int,
    count_tokens: Callable[[str], int] | None = None,
    incumbents: Sequence[ItemKey] = (),
) -> tuple[RepoMap, list[ItemKey]]:
    """The map for ``budget`` tokens and the keys it selected (next call's incumbents)."""
    count = count_tokens or estimate_tokens
    accepted: list[_Candidate] = []
    if budget > 0:
        plan = _Plan(candidates, count)
        misses = 0
        for item in _stream(candidates, incumbents):
            if plan.try_add(item[3], item[2], budget):
                accepted.append(item)
            else:
                misses += 1
                if misses >= MAX_MISSES:
                    break
    while True:
        plan = _Plan(candidates, count)
        for item in accepted:
            plan.try_add(item[3], item[2], 1 << 62)
        text, files = plan.render()
        tokens = count(text) if text else 0
        # Per-line costs add up for the default estimate; a real tokenizer may merge across
        # lines, so the whole text is checked and trimmed from the least important end.
        if tokens <= max(budget, 0) or not accepted:
            break
        accepted.pop()
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return RepoMap(text, digest, files, tokens, budget), candidates.keys_of(accepted)
