"""The server's one clock helper (``contenox_lsp.clock``), alone: the debounce timer, the hold
that only lengthens, the recency mark and the settle wait of a burst."""

from __future__ import annotations

import asyncio

import pytest

from contenox_lsp.clock import LoopTimer, Mark, settle_wait


async def test_a_restarted_timer_fires_once_with_the_last_start() -> None:
    fired: list[str] = []
    timer = LoopTimer()
    for name in ("first", "second", "third"):
        timer.start(0.05, fired.append, name)
        await asyncio.sleep(0.01)
    assert timer.pending and fired == []
    await asyncio.sleep(0.15)
    assert fired == ["third"] and not timer.pending and timer.due is None


async def test_a_cancelled_timer_never_fires() -> None:
    fired: list[int] = []
    timer = LoopTimer()
    timer.start(0.02, fired.append, 1)
    timer.cancel()
    await asyncio.sleep(0.06)
    assert fired == [] and not timer.pending


async def test_a_hold_only_lengthens() -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    timer = LoopTimer()
    timer.extend_to(0.2, lambda: fired.append(loop.time()))
    long_due = timer.due
    timer.extend_to(0.01, lambda: fired.append(loop.time()))  # shorter: keeps the longer
    assert timer.due == long_due
    await asyncio.sleep(0.05)
    assert fired == []
    timer.extend_to(0.3, lambda: fired.append(loop.time()))  # longer: moves it
    assert timer.due is not None and long_due is not None and timer.due > long_due
    timer.cancel()


def test_a_mark_says_whether_it_happened_within_a_window() -> None:
    mark = Mark()
    assert not mark.within(10.0, now=100.0)  # never happened
    mark.set(now=100.0)
    assert mark.within(3.0, now=103.0) and not mark.within(3.0, now=103.5)
    mark.set()
    assert mark.within(60.0)


@pytest.mark.parametrize(("first", "last", "now", "wait"), [
    (0.0, 0.0, 0.0, 0.05),    # just began: wait for quiet
    (0.0, 0.04, 0.05, 0.04),  # moved 10 ms ago: 40 ms more of quiet
    (0.0, 0.0, 0.06, 0.0),    # quiet long enough
    (0.0, 0.24, 0.245, 0.005),  # still moving, but the burst's time is nearly up
    (0.0, 0.3, 0.3, 0.0),     # past the longest wait: act whatever happens
])
def test_a_burst_settles_when_quiet_or_when_it_has_waited_long_enough(
        first: float, last: float, now: float, wait: float) -> None:
    assert settle_wait(first, last, quiet_s=0.05, max_wait_s=0.25, now=now) == \
        pytest.approx(wait)
