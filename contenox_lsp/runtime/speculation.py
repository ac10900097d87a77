"""Speculative inline completion: the completion at the cursor, started on the keystroke.

Editors debounce inline completion (Neovim's plugin waits 200 ms after the last keystroke, VS
Code asks as the user pauses). While the user types with completions on (one was asked in the
last few seconds), a keystroke that leaves a plain cursor (one insertion) schedules the model
completion at that cursor as background work, ``SPECULATE_AFTER_S`` after the keystroke; the
next keystroke drops it. A request for the same document version and cursor takes it over
(waits for it if it is still running) instead of starting again, so the debounce the editor
waits anyway is spent on the model. Any other request or edit cancels it, and as background
work any request (an ask, another completion) preempts it at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from contenox_lsp.clock import LoopTimer
from contenox_lsp.completion.window import At

T = TypeVar("T")

#: Quiet time after a keystroke before the speculative completion starts: keystrokes typed
#: faster than this (within a word) start nothing.
SPECULATE_AFTER_S = 0.05


class Speculation(Generic[T]):
    """At most one speculative run: scheduled, running or finished, for one ``At``."""

    def __init__(self) -> None:
        self._at: At | None = None
        self._task: asyncio.Task[T] | None = None
        self._timer = LoopTimer()

    def schedule(self, at: At, run: Callable[[], Awaitable[T]],
                 delay_s: float = SPECULATE_AFTER_S) -> None:
        """Drop what was speculated and start ``run()`` for ``at`` after ``delay_s``."""
        self.drop()
        self._at = at
        self._timer.start(delay_s, self._start, run)

    def _start(self, run: Callable[[], Awaitable[T]]) -> None:
        task = asyncio.ensure_future(run())
        # Nobody may ever await it: take its exception so asyncio does not log it.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._task = task

    def take(self, at: At) -> asyncio.Task[T] | None:
        """The run for ``at`` (running or done), handed over to the caller; None when none
        was started for it. Whatever was speculated for another place is dropped."""
        if self._at == at and self._task is not None:
            task, self._task, self._at = self._task, None, None
            return task
        self.drop()
        return None

    def drop(self) -> None:
        self._timer.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None
        self._at = None
