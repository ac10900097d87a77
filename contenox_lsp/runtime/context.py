"""The server's view of the context: the repo index and prompt assembly, on one thread.

All repo-index access and all assembly run on a single dedicated thread, in submission order:
edits are applied to the index in the order they arrived, and the index is never read while
it is being updated. Editor state (open buffers, pins) is captured on the event loop first
(``turn.WorkspaceState``) because pygls's workspace is not thread-safe.

While the index is being built (a cold build of a large repository takes a minute), the
thread is busy with it: assemblies and token counts then run on a second thread against a view
without the index (``ContextView``: no repo map, no code), so an ask is answered at once from
what the editor holds — and ``contenox/explainContext`` says the index is building. Edits still
queue behind the build, in order.

The code-search index (segment J, the completion's similar code) is filled after the build
in slices of ``SYNC_SLICE_FILES`` files, each one a task of the thread: at 20,000 files the
first fill takes most of a minute, and the map is ready long before. Asks and edits that
arrive meanwhile run between two slices; a search then finds what is indexed so far
(``contenox/explainContext`` ``index.codeSearch.pending`` says how much is not) and first
brings up to ``SEARCH_SYNC_FILES`` edited or new files up to date itself.

Edits coalesce: while a buffer change waits for the thread, later changes of the same file
fold into it (the newest text, the incremental edits appended), so a backlog of keystrokes
costs one re-index of the latest text instead of one per keystroke, and holds one copy of
the text instead of thousands.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from contenox_lsp.clock import settle_wait
from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.turn import read_disk_text
from engine.model_files import cache_dir
from repo_index import RepoIndex
from repo_index.code_search import CodeFinder

logger = logging.getLogger(__name__)


ProgressFn = Callable[[int, int, str], None]
T = TypeVar("T")

#: Past this many folded incremental edits, the re-index parses the text afresh instead.
MAX_FOLDED_EDITS = 256
#: A buffer change is re-indexed once its file has been quiet this long (later keystrokes
#: fold into it meanwhile) or once it has waited ``FOLD_MAX_WAIT_S``. Far below the idle
#: debounce, so no assembly waits for it in practice; the waiting thread sleeps, which
#: leaves the event loop (and the GIL) to the incoming edits during a storm.
FOLD_QUIET_S = 0.03
FOLD_MAX_WAIT_S = 0.25
#: Files per slice of the code-search fill (about half a second on 2 busy cores): what a
#: request arriving during the fill waits for at most.
SYNC_SLICE_FILES = 200
#: Files a search brings up to date itself before searching (edited ones first).
SEARCH_SYNC_FILES = 32


@dataclass
class _BufferChange:
    """A buffer change waiting for the context thread; later ones fold into it."""

    text: str
    edits: list[dict[str, Any]] | None
    encoding: str
    since: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)

    def fold(self, text: str, edits: list[dict[str, Any]] | None) -> None:
        self.last = time.monotonic()
        self.text = text
        if self.edits is None or edits is None or len(self.edits) + len(edits) > MAX_FOLDED_EDITS:
            self.edits = None  # a full parse of the newest text
        else:
            self.edits = self.edits + edits


class ContextView(Protocol):
    """What an assembly on the context thread reads: the index and its code finder (None
    while the index is building) and the one budget."""

    @property
    def index(self) -> RepoIndex | None: ...

    @property
    def finder(self) -> CodeFinder | None: ...

    @property
    def budget(self) -> ContextBudget: ...


@dataclass(frozen=True)
class WithoutIndex:
    """The context as it is while the index builds: no repo map, no code."""

    budget: ContextBudget
    index: RepoIndex | None = None
    finder: CodeFinder | None = None


class ContextService:
    def __init__(self, roots: list[Path], budget: ContextBudget | None = None) -> None:
        self.roots = list(roots)
        self.budget = budget if budget is not None else ContextBudget()
        self.finder: CodeFinder | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "contenox-context")
        # Assemblies while the context thread builds the index (see the module's docstring).
        self._early = concurrent.futures.ThreadPoolExecutor(1, "contenox-context-early")
        self._builds = 0  # builds queued or running (counted on the event loop)
        self.index: RepoIndex | None = None
        self.index_state = "idle"  # idle | building | ready | error
        self.index_error: str | None = None
        self.index_files = 0
        self.folded_changes = 0
        """Buffer changes folded into a waiting one since start (status/diagnostics)."""
        self._waiting: dict[Path, _BufferChange] = {}
        self._waiting_lock = threading.Lock()
        self._code_sync_queued = False  # a slice of the code-search fill waits for the thread
        self._closed = False

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _post(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        fut = self._executor.submit(fn, *args)
        fut.add_done_callback(_log_failure)
        return fut

    # -- index ----------------------------------------------------------------------------------

    async def build_index(self, progress: ProgressFn | None = None) -> None:
        self._builds += 1
        try:
            await self._run(self._build, progress)
        finally:
            self._builds -= 1

    @property
    def building(self) -> bool:
        """A build is queued or running: assemblies go without the index meanwhile."""
        return self._builds > 0

    def _build(self, progress: ProgressFn | None) -> None:
        self.index_state = "building"
        try:
            # Beside the CLI's (same key per folder), under $CONTENOX_CACHE_DIR when set.
            index = RepoIndex(self.roots, cache_dir=cache_dir() / "repo-index",
                              on_progress=progress)
            index.build()
            # Still "building" (asks meanwhile go without the index): what the first map
            # would otherwise make the first ask wait for.
            index.warm_map()
            finder = CodeFinder(index, read_disk_text, search_sync_files=SEARCH_SYNC_FILES)
        except Exception as exc:
            self.index_state = "error"
            self.index_error = str(exc)
            logger.exception("repo index build failed")
            return
        self.index = index
        self.finder = finder
        self.index_state = "ready"
        self.index_files = len(index.files())
        # Queued before anything that arrives after the build: a small workspace's whole
        # code search is in place before the first request after it.
        finder.pending = len(index.files())
        self._arm_code_sync()

    def _arm_code_sync(self) -> None:
        """Queue the next slice of the code-search fill if files wait for it (context
        thread)."""
        finder = self.finder
        if finder is not None and finder.pending and not self._code_sync_queued \
                and not self._closed:
            self._code_sync_queued = True
            self._post(self._code_sync_slice, finder)

    def _code_sync_slice(self, finder: CodeFinder) -> None:
        self._code_sync_queued = False
        if self.finder is not finder:  # a rebuild replaced it
            return
        # The disk's texts, and only files the index has from the disk: the thread does not
        # know the editor's buffers (a search, which does, takes the files it has from them).
        finder.read_text = read_disk_text
        finder.sync(SYNC_SLICE_FILES, disk_only=True)
        self._arm_code_sync()

    def code_search_view(self) -> dict[str, int] | None:
        """Files in the code-search index and files waiting for it (as of its last sync);
        None before the index is built."""
        finder = self.finder
        if finder is None:
            return None
        return {"files": finder.indexed_files, "pending": finder.pending}

    def update(self, path: Path, text: str, edits: list[dict[str, Any]] | None,
               encoding: str = "utf-16") -> None:
        with self._waiting_lock:
            waiting = self._waiting.get(path)
            if waiting is not None and waiting.encoding == encoding:
                waiting.fold(text, edits)
                self.folded_changes += 1
                return
            change = self._waiting[path] = _BufferChange(text, edits, encoding)
        self._post(self._apply_change, path, change)

    def _apply_change(self, path: Path, change: _BufferChange) -> None:
        while (wait := settle_wait(change.since, change.last, FOLD_QUIET_S,
                                   FOLD_MAX_WAIT_S)) > 0:
            time.sleep(wait)
        with self._waiting_lock:
            # From here on, a new change of this file waits for the next turn of the thread.
            if self._waiting.get(path) is change:
                del self._waiting[path]
            text, edits, encoding = change.text, change.edits, change.encoding
        if self.index is None:
            return
        self.index.update(str(path), text, edits=edits, position_encoding=encoding)
        self._after_change()

    def _close_waiting(self, path: Path) -> None:
        """An operation other than a buffer change is queued for ``path``: a later buffer
        change must run after it, so it may not fold into one queued before."""
        with self._waiting_lock:
            self._waiting.pop(path, None)

    def update_from_disk(self, path: Path) -> concurrent.futures.Future[Any]:
        self._close_waiting(path)
        return self._post(self._update_from_disk, path)

    def _update_from_disk(self, path: Path) -> None:
        if self.index is None:
            return
        if not path.exists():
            self.index.remove(str(path))
        else:
            self.index.update(str(path), None)  # None: the index reads the file itself
        self._after_change()

    def remove(self, path: Path) -> concurrent.futures.Future[Any]:
        self._close_waiting(path)
        return self._post(self._remove, path)

    def _remove(self, path: Path) -> None:
        if self.index is not None:
            self.index.remove(str(path))
            self._after_change()

    def _after_change(self) -> None:
        index = self.index
        if index is None:
            return
        # An ignore file (.gitignore, ...) changed: which files are indexed may differ.
        if index.rescan_needed:
            index.build()
        self.index_files = len(index.files())
        self._arm_code_sync()

    async def set_roots(self, roots: list[Path], progress: ProgressFn | None = None) -> None:
        self.roots = list(roots)
        await self.build_index(progress)

    async def call(self, fn: Callable[[ContextView], T]) -> T:
        """Run ``fn(self)`` on the context thread (assembly, token counts); while the index is
        building, ``fn(WithoutIndex)`` on the early thread instead, so it does not wait."""
        if self.building:
            loop = asyncio.get_running_loop()
            early: T = await loop.run_in_executor(self._early, fn, WithoutIndex(self.budget))
            return early
        result: T = await self._run(self._then_arm, fn)
        return result

    def _then_arm(self, fn: Callable[[ContextView], T]) -> T:
        try:
            return fn(self)
        finally:  # a search may have left files for the fill (a checkout changed many)
            self._arm_code_sync()

    def close(self, wait: bool = False) -> None:
        self._closed = True
        self._early.shutdown(wait=wait, cancel_futures=True)
        self._executor.shutdown(wait=wait, cancel_futures=True)
        if wait and self.index is not None:
            # Edits since the last build and the map's hysteresis state survive a restart.
            try:
                self.index.save()
            except Exception:
                logger.warning("could not save the repo index cache", exc_info=True)


def _log_failure(fut: concurrent.futures.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.warning("context task failed: %r", fut.exception())
