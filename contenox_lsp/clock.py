"""The server's sense of time, in one place: a restartable timer on the event loop (debounce,
delayed starts, holds) and a mark of when something last happened (sticky windows, quiet
periods). Monotonic clocks only: a wall-clock jump must not fire or stall anything.

Used by the idle pre-prefill (edit debounce, the typing hold), inline completion (the sticky
repository context, "the user is typing"), its speculation (the delayed start) and the context
thread (folding a burst of buffer changes until it goes quiet).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


class LoopTimer:
    """A one-shot timer on the running event loop; starting it again replaces the pending
    one (a debounce). Loop thread only."""

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None
        self.due: float | None = None  # loop time it fires at, while pending

    def start(self, delay_s: float, callback: Callable[..., None], *args: Any) -> None:
        loop = asyncio.get_running_loop()
        self._start_at(loop, loop.time() + max(0.0, delay_s), callback, args)

    def extend_to(self, delay_s: float, callback: Callable[..., None]) -> None:
        """Fire ``callback`` no earlier than ``delay_s`` from now nor than the pending due
        time (a hold that a second hold can only lengthen)."""
        loop = asyncio.get_running_loop()
        self._start_at(loop, max(loop.time() + delay_s, self.due or 0.0), callback, ())

    def _start_at(self, loop: asyncio.AbstractEventLoop, due: float,
                  callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.cancel()
        self.due = due
        self._handle = loop.call_at(due, self._fire, callback, args)

    def _fire(self, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._handle = None
        self.due = None
        callback(*args)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self.due = None

    @property
    def pending(self) -> bool:
        return self._handle is not None


class Mark:
    """When something last happened (``time.monotonic``); None: never. Any thread may set
    it and read it (a float assignment)."""

    def __init__(self, at: float | None = None) -> None:
        self.at = at

    def set(self, now: float | None = None) -> None:
        self.at = time.monotonic() if now is None else now

    def within(self, window_s: float, now: float | None = None) -> bool:
        """It happened, no more than ``window_s`` ago."""
        if self.at is None:
            return False
        return (time.monotonic() if now is None else now) - self.at <= window_s


def settle_wait(first: float, last: float, quiet_s: float, max_wait_s: float,
                now: float | None = None) -> float:
    """Seconds to wait before acting on a burst that began at ``first`` and last moved at
    ``last``: until it has been quiet for ``quiet_s``, but never past ``max_wait_s`` after its
    start. 0: act now."""
    now = time.monotonic() if now is None else now
    if now - first >= max_wait_s:
        return 0.0
    return max(0.0, min(quiet_s - (now - last), max_wait_s - (now - first)))


__all__ = ["LoopTimer", "Mark", "settle_wait"]
