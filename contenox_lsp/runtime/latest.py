"""Cancel-previous for one kind of request (inline completion, next edit): a newer request
cancels the one in flight, which then answers its empty result instead of RequestCancelled
(the client asked again; nothing failed). Kept by the feature's service in the runtime, not on
the server object. Loop thread only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class LatestOnly:
    def __init__(self) -> None:
        self._task: asyncio.Task[Any] | None = None
        self._superseded: asyncio.Task[Any] | None = None

    def cancel_previous(self) -> None:
        """A newer request arrived: the one in flight (if any) is cancelled."""
        previous = self._task
        if previous is not None and not previous.done():
            self._superseded = previous
            previous.cancel()

    @contextmanager
    def current(self) -> Iterator[asyncio.Task[Any] | None]:
        """The calling task is the request in flight until the block ends."""
        task = asyncio.current_task()
        self._task = task
        try:
            yield task
        finally:
            if self._task is task:
                self._task = None

    def superseded(self, task: asyncio.Task[Any] | None) -> bool:
        """Whether ``task`` was cancelled by a newer request (not by the client)."""
        return task is not None and self._superseded is task
