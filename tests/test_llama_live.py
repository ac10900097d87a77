"""What a llama KV sequence holds (``engine.llama.live.Computed``), alone: the three numbers
the reuse rule reads move together, and a parked copy does not move with the live one."""

from __future__ import annotations

import pytest

from engine.llama.live import Computed


def test_committed_batches_count_as_computed_by_their_kind() -> None:
    live = Computed()
    live.commit([1] * 64, "chunks")
    assert (len(live), live.exact, live.pieces) == (64, 64, 64)
    live.commit([2] * 8, "piece")
    assert (len(live), live.exact, live.pieces) == (72, 64, 72)
    live.commit([3] * 3, "rest")
    assert (len(live), live.exact, live.pieces) == (75, 64, 72)
    live.append(4)  # a generated token is never computed as a prefill would
    assert (len(live), live.exact, live.pieces) == (76, 64, 72)


def test_a_cut_takes_the_computed_marks_back_with_the_tokens() -> None:
    live = Computed(list(range(80)), 64, 72)
    live.cut(70)  # inside the pieces
    assert (live.tokens, live.exact, live.pieces) == (list(range(70)), 64, 70)
    live.cut(40)  # inside the whole chunks
    assert (live.tokens, live.exact, live.pieces) == (list(range(40)), 40, 40)
    live.cut(100)  # past the end: nothing to take back
    assert (len(live), live.exact, live.pieces) == (40, 40, 40)


def test_a_parked_copy_keeps_what_it_held() -> None:
    live = Computed(list(range(10)), 8, 8)
    parked = live.copy()
    live.commit([99], "chunks")
    live.cut(4)
    assert (parked.tokens, parked.exact, parked.pieces) == (list(range(10)), 8, 8)
    live.set(parked)
    parked.append(7)  # restoring copied it: the branch and the live sequence stay apart
    assert (live.tokens, live.exact, live.pieces) == (list(range(10)), 8, 8)
    live.clear()
    assert (live.tokens, live.exact, live.pieces) == ([], 0, 0)


@pytest.mark.parametrize("exact,pieces,n", [(5, 4, 10), (0, 11, 10), (-1, 0, 10)])
def test_marks_that_disagree_are_refused(exact: int, pieces: int, n: int) -> None:
    with pytest.raises(ValueError, match="out of order"):
        Computed(list(range(n)), exact, pieces)
