"""The server's view of the context: the repo index and prompt assembly, on one thread.

All repo-index access and all assembly run on a single dedicated thread, in submission order:
edits are applied to the index in the order they arrived, and the index is never read while
it is being updated. Editor state (open buffers, pins) is captured on the event loop first
(``BufferState``) because pygls's workspace is not thread-safe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TurnSpec:
    """The user turn (segment I) and request-specific output (segment H)."""

    question: str = ""
    path: Path | None = None
    selection: str | None = None
    cursor_context: str | None = None
    line: int | None = None  # 1-based
    outputs: tuple[tuple[str, str, str], ...] = ()  # (kind, source, text)


@dataclass(frozen=True)
class PinState:
    path: Path
    start_line: int | None  # 0-based inclusive, None = whole file
    end_line: int | None
    text: str | None  # buffer text when the file is open; None → read from disk


@dataclass(frozen=True)
class BufferState:
    """Editor state captured on the event loop, handed to the context thread."""

    open_buffers: dict[Path, str] = field(default_factory=dict)
    pins: tuple[PinState, ...] = ()
    focus_files: tuple[Path, ...] = ()


ProgressFn = Callable[[int, int, str], None]


class ContextService:
    def __init__(self, roots: list[Path], repo_map_tokens: int) -> None:
        self.roots = list(roots)
        self.repo_map_tokens = repo_map_tokens
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "contenox-context")
        self.index: Any = None
        self.index_state = "idle"  # idle | building | ready | error
        self.index_error: str | None = None
        self.index_files = 0

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    def _post(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        fut = self._executor.submit(fn, *args)
        fut.add_done_callback(_log_failure)
        return fut

    # -- index ----------------------------------------------------------------------------------

    async def build_index(self, progress: ProgressFn | None = None) -> None:
        await self._run(self._build, progress)

    def _build(self, progress: ProgressFn | None) -> None:
        self.index_state = "building"
        try:
            from repo_index import RepoIndex

            cb = None
            if progress is not None:
                def cb(*args: Any) -> None:
                    _forward_progress(progress, args)
            from engine.model_files import cache_dir

            # Beside the CLI's (same key per folder), under $CONTENOX_CACHE_DIR when set.
            index = RepoIndex(self.roots, cache_dir=cache_dir() / "repo-index", on_progress=cb)
            index.build()
        except Exception as exc:
            self.index_state = "error"
            self.index_error = str(exc)
            logger.exception("repo index build failed")
            return
        self.index = index
        self.index_state = "ready"
        self.index_files = _count_files(index)

    def update(self, path: Path, text: str, edits: list[dict[str, Any]] | None,
               encoding: str) -> concurrent.futures.Future[Any]:
        return self._post(self._update, path, text, edits, encoding)

    def _update(self, path: Path, text: str, edits: list[dict[str, Any]] | None,
                encoding: str) -> None:
        if self.index is None:
            return
        self.index.update(str(path), text, edits=edits, position_encoding=encoding)
        self._after_change()

    def update_from_disk(self, path: Path) -> concurrent.futures.Future[Any]:
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
        if getattr(index, "rescan_needed", False):
            index.build()
        self.index_files = _count_files(index)

    async def set_roots(self, roots: list[Path], progress: ProgressFn | None = None) -> None:
        self.roots = list(roots)
        await self.build_index(progress)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(self, *args)`` on the context thread (assembly, repo-map queries)."""
        return await self._run(fn, self, *args)

    def close(self, wait: bool = False) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=True)
        if wait and self.index is not None:
            # Edits since the last build and the map's hysteresis state survive a restart.
            try:
                self.index.save()
            except Exception:
                logger.warning("could not save the repo index cache", exc_info=True)


def _forward_progress(progress: ProgressFn, args: tuple[Any, ...]) -> None:
    """Adapt repo_index's on_progress payload (done, total[, message]) or an event object."""
    try:
        if len(args) >= 2 and isinstance(args[0], int) and isinstance(args[1], int):
            msg = str(args[2]) if len(args) > 2 else ""
            progress(args[0], args[1], msg)
            return
        if len(args) == 1:
            ev = args[0]
            done = int(getattr(ev, "done", 0) or 0)
            total = int(getattr(ev, "total", 0) or 0)
            progress(done, total, str(getattr(ev, "message", "") or ""))
    except Exception:
        logger.debug("index progress forwarding failed", exc_info=True)


def _count_files(index: Any) -> int:
    for attr in ("file_count", "n_files"):
        v = getattr(index, attr, None)
        if isinstance(v, int):
            return v
    files = getattr(index, "files", None)
    try:
        return len(files() if callable(files) else files)  # type: ignore[arg-type]
    except TypeError:
        return 0


def _log_failure(fut: concurrent.futures.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.warning("context task failed: %r", fut.exception())
