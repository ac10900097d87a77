"""Work-done progress (``$/progress``) reporting, safe to call from any thread.

Client-initiated tokens (a request's ``workDoneToken``) are used as given; server-initiated
ones are created with ``window/workDoneProgress/create`` only when the client declared
``window.workDoneProgress``. Reports from worker threads are marshalled onto the event loop,
and are rate-limited to whole-percent changes so a long prefill does not flood the client.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from lsprotocol import types
from pygls.capabilities import get_capability

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

logger = logging.getLogger(__name__)


class Reporter(Protocol):
    """One progress sequence: begin → report* → end (a no-op where the client shows none)."""

    def begin(self, title: str, message: str | None = None) -> None: ...
    def report(self, done: int, total: int, message: str) -> None: ...
    def end(self, message: str | None = None) -> None: ...


class Notifier(Protocol):
    """How the runtime side talks to the developer, without holding the server."""

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None: ...
    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None: ...
    async def start_progress(self) -> Reporter:
        """A fresh server-initiated progress sequence."""
        ...


class WorkDone:
    """One work-done progress sequence (begin → report* → end)."""

    def __init__(self, ls: LanguageServer, token: types.ProgressToken | None) -> None:
        self._ls = ls
        self.token = token
        self._loop = asyncio.get_running_loop()
        self._last_pct = -1
        self._ended = False

    @classmethod
    async def server_initiated(cls, ls: LanguageServer) -> WorkDone:
        """A fresh server-created token, or a no-op reporter if the client can't show it."""
        if not get_capability(ls.client_capabilities, "window.work_done_progress", False):
            return cls(ls, None)
        token = f"contenox-{uuid.uuid4().hex[:12]}"
        try:
            await ls.work_done_progress.create_async(token)
        except Exception as exc:  # a client may refuse; progress is optional
            logger.debug("work done progress create failed: %s", exc)
            return cls(ls, None)
        return cls(ls, token)

    def begin(self, title: str, message: str | None = None) -> None:
        self._post(lambda t: self._ls.work_done_progress.begin(
            t, types.WorkDoneProgressBegin(title=title, message=message, percentage=0)))

    def report(self, done: int, total: int, message: str) -> None:
        pct = 100 if total <= 0 else max(0, min(100, done * 100 // total))
        if pct == self._last_pct:
            return
        self._last_pct = pct
        self._post(lambda t: self._ls.work_done_progress.report(
            t, types.WorkDoneProgressReport(message=message, percentage=pct)))

    def end(self, message: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._post(lambda t: self._ls.work_done_progress.end(
            t, types.WorkDoneProgressEnd(message=message)))

    def _post(self, fn: Any) -> None:
        if self.token is None:
            return
        token = self.token

        def run() -> None:
            try:
                fn(token)
            except Exception:
                logger.debug("progress notification failed", exc_info=True)

        try:
            if _on_loop(self._loop):
                run()
            else:
                self._loop.call_soon_threadsafe(run)
        except RuntimeError:  # loop closed during shutdown
            pass


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def send_partial_result(ls: LanguageServer, loop: asyncio.AbstractEventLoop,
                        token: types.ProgressToken, value: Any) -> None:
    """``$/progress`` with a partial result (thread-safe, order-preserving)."""

    def run() -> None:
        ls.protocol.notify(types.PROGRESS, types.ProgressParams(token=token, value=value))

    if _on_loop(loop):
        run()
    else:
        loop.call_soon_threadsafe(run)
