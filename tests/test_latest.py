"""Cancel-previous (``contenox_lsp.runtime.latest.LatestOnly``) alone: a newer request cancels
the one in flight, which can tell that from a client's cancel."""

from __future__ import annotations

import asyncio

from contenox_lsp.runtime.latest import LatestOnly


async def test_a_newer_request_cancels_the_one_in_flight_and_says_so() -> None:
    latest = LatestOnly()
    outcome: list[str] = []
    started = asyncio.Event()

    async def request() -> None:
        with latest.current() as task:
            try:
                started.set()
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                outcome.append("superseded" if latest.superseded(task) else "cancelled")
                raise

    first = asyncio.ensure_future(request())
    await started.wait()
    latest.cancel_previous()  # the newer request arrives
    await asyncio.gather(first, return_exceptions=True)
    assert outcome == ["superseded"]

    started.clear()
    second = asyncio.ensure_future(request())
    await started.wait()
    second.cancel()  # the client cancelled it: not superseded
    await asyncio.gather(second, return_exceptions=True)
    assert outcome == ["superseded", "cancelled"]
    latest.cancel_previous()  # nothing in flight: nothing happens
