"""Exact reuse: on every reuse path the warm next-token logits are bitwise the cold ones.

llama.cpp's CPU kernels are not batch-invariant (the kernel that computes a token, and so its
rounding, depends on the micro-batch it is in and on the KV cell layout), and which kernels a
machine has depends on its CPU and build. Exact reuse makes every warm computation the cold one
(engine/README.md), so the gate here is bitwise equality of the logits, not only equal greedy
tokens, and it runs under several kernel-selecting settings: thread counts, flash attention on
and off, three micro-batch sizes. The same file also passes on a llama-cpp-python built without
AVX-512 (AVX2 kernels; see engine/README.md for the command).
"""

from __future__ import annotations

import itertools
import json
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextasm.manifest import common_prefix_length
from engine import CancelledError, load_profile, open_session
from engine.errors import UnsupportedCapabilityError
from engine.llama import invariance
from engine.llama.session import (
    TAIL_PIECE,
    invariant_batches,
    reusable_tokens,
    tile_boundary,
    tiled_batches,
    tiled_reusable,
)

N_GEN = 16

# (name, overrides): each changes which kernels a prefill goes through, and the schedule that
# keeps warm == cold: the measured invariant one (default) and the chunked one.
SETTINGS = [
    ("t1-fa_off-u512", {"context.n_threads": 1, "context.n_threads_batch": 1,
                        "context.n_ubatch": 512, "context.flash_attn": "off"}),
    ("t2-fa_on-u256", {"context.n_threads": 2, "context.n_threads_batch": 2,
                       "context.flash_attn": "on", "context.n_ubatch": 256}),
    ("t2-fa_off-b96-u64", {"context.n_batch": 96, "context.n_ubatch": 64,
                           "context.flash_attn": "off"}),
    ("t2-chunked32-b96", {"cache.exact_schedule": "chunked", "context.n_batch": 96,
                          "context.n_ubatch": 96}),
    ("t1-chunked128-fa_on", {"context.n_threads": 1, "context.n_threads_batch": 1,
                             "cache.exact_schedule": "chunked", "cache.exact_chunk": 128,
                             "context.n_batch": 128, "context.n_ubatch": 128,
                             "context.flash_attn": "on"}),
]


@pytest.fixture(scope="module")
def text() -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")


@pytest.fixture(scope="module", params=SETTINGS, ids=[name for name, _ in SETTINGS])
def setting(request: pytest.FixtureRequest) -> Iterator[tuple[Any, dict[str, Any]]]:
    overrides = {"context.n_ctx": 2048, **request.param[1]}
    prof = load_profile(None).with_overrides(overrides, source="test")
    with open_session(prof) as session:
        if request.param[1].get("cache.exact_schedule") == "chunked":
            assert session.schedule.kind == "chunked"
        else:  # measured invariant (flash attention: two regimes on the CPUs seen)
            assert session.schedule.kind == "invariant", session.schedule
        yield session, overrides


def _logits_and_tokens(s: Any) -> tuple[bytes, list[int]]:
    logits = s.next_token_logits().tobytes()
    return logits, s.generate(max_tokens=N_GEN).tokens


def _cold(s: Any, toks: list[int]) -> tuple[bytes, list[int]]:
    s.reset()
    assert s.prefill(toks).reused_tokens == 0
    return _logits_and_tokens(s)


def _unit(s: Any) -> int:
    """A length scale for the prompts: the chunk, the tile of a two-regime schedule, or 32
    under token-granular reuse."""
    return max(32, s.reuse_granularity, s.schedule.tile)


def _edge(s: Any, n: int) -> int:
    """Two-regime schedule: a cold prefill of ``n`` tokens computes the tokens before this in
    tile-sized micro-batches, the rest (at least a minimum micro-batch) in small ones."""
    return _edge_of(n, s.schedule.tile, s.schedule.min_batch)


def _edge_of(n: int, tile: int, min_batch: int) -> int:
    return max(0, (n - min_batch) // tile * tile)


def _whole(s: Any, n: int) -> int:
    """Of ``n`` tokens prefilled in one cold prefill, what exact reuse counts as computed the
    way any longer prompt's cold prefill computes them: whole chunks (chunked), everything
    (invariant, when the prompt filled at least one minimum micro-batch), the tile-sized
    batches' part (two-regime)."""
    if s.schedule.kind == "invariant" and s.schedule.tile:
        return _edge(s, n)
    if s.schedule.kind == "invariant":
        return n if n >= s.schedule.min_batch else 0
    return n // s.reuse_granularity * s.reuse_granularity


def _kept_two_regime(t: int, m: int, common: int, prefilled: int, prompt_len: int,
                     old: int | None = None) -> int:
    """The longest prefix a warm prefill may keep of a resident sequence whose first
    ``prefilled`` tokens came from one cold prefill (``old``: where its tile-sized
    micro-batches ended, if not there), found by trying every length: each kept token was
    computed in the regime the prompt's cold prefill computes it in, what is left before the
    prompt's edge fills a tile-sized batch, a minimum micro-batch is left."""
    old = _edge_of(prefilled, t, m) if old is None else old
    new = _edge_of(prompt_len, t, m)
    computed = prefilled if prefilled >= m else 0  # a shorter prompt's batch is not reusable
    for k in range(min(common, computed), -1, -1):
        same_regime = all((p < old) == (p < new) for p in range(k))
        fills = k >= new or new - k >= t
        if same_regime and fills and (prompt_len - k >= m or k == 0):
            return k
    return 0


def _snapshot_whole(s: Any, n: int) -> int:
    """How many of ``n`` tokens of one cold prefill a snapshot holds."""
    if s.schedule.kind == "invariant" and s.schedule.tile and n >= s.schedule.tile:
        return n
    return _whole(s, n)


def _kept_after_snapshot(s: Any, whole: int, prompt_len: int) -> int:
    """What a prompt that extends a restored snapshot of ``whole`` tokens keeps of it."""
    if s.schedule.kind == "invariant" and s.schedule.tile:
        return _kept_two_regime(s.schedule.tile, s.schedule.min_batch, whole, whole,
                                prompt_len, old=whole)
    return whole


def _kept(s: Any, resident: list[int], prefilled: int, prompt: list[int]) -> int:
    """What exact reuse keeps of ``resident`` (its first ``prefilled`` tokens from one cold
    prefill, the rest generated) for ``prompt``. Invariant: the common prefix within the
    prefilled tokens, leaving a minimum micro-batch to compute. Chunked: the whole chunks, and
    the whole tail pieces when ``prompt`` ends inside the same partial chunk."""
    common = common_prefix_length(resident, prompt)
    if s.schedule.kind == "invariant" and s.schedule.tile:
        return _kept_two_regime(s.schedule.tile, s.schedule.min_batch, common, prefilled,
                                len(prompt))
    if s.schedule.kind == "invariant":
        return max(0, min(common, _whole(s, prefilled), len(prompt) - s.schedule.min_batch))
    unit = s.reuse_granularity
    piece = TAIL_PIECE if unit % TAIL_PIECE == 0 else unit
    exact = prefilled // unit * unit
    pieces = exact + (prefilled - exact) // piece * piece
    return reusable_tokens(common, len(prompt), exact, pieces, unit, piece)


def _prompts(s: Any, text: str) -> tuple[list[int], list[int]]:
    """A prefix that ends inside a chunk (the hard case) and the full prompt after it."""
    base = s.tokenize(text, add_bos=True)
    prefix = base[: 3 * _unit(s) + 7]
    return prefix, prefix + s.tokenize("\n# In one sentence, the code above:\n")


def test_live_prefix_reuse_after_another_answer(setting: Any, text: str) -> None:
    s, _ = setting
    prefix, full = _prompts(s, text)
    cold = _cold(s, full)
    s.reset()
    first = prefix + s.tokenize("\n# something else\n")
    s.prefill(first)
    s.generate(max_tokens=8)  # generated tokens are resident too; they are not reused
    resident = s.resident_tokens
    r = s.prefill(full)
    assert r.reused_tokens == _kept(s, resident, len(first), full) >= _whole(s, len(prefix)) > 0
    assert _logits_and_tokens(s) == cold


def test_follow_up_after_the_answer(setting: Any, text: str) -> None:
    s, _ = setting
    prefix, _ = _prompts(s, text)
    s.reset()
    s.prefill(prefix)
    answer = s.generate(max_tokens=12).tokens
    follow = prefix + answer + s.tokenize("\n# and then:\n")
    cold = _cold(s, follow)
    s.reset()
    s.prefill(prefix)
    assert s.generate(max_tokens=12).tokens == answer
    resident = s.resident_tokens
    r = s.prefill(follow)
    assert r.reused_tokens == _kept(s, resident, len(prefix), follow) >= _whole(s, len(prefix))
    assert _logits_and_tokens(s) == cold


def test_a_prompt_growing_a_few_tokens_at_a_time(setting: Any, text: str) -> None:
    """Keystrokes: each prompt is the last one plus a token or two, across a chunk boundary.
    Inside the last chunk the whole tail pieces are reused, past it the chunk is recomputed
    whole; every step gives the cold run's logits and tokens."""
    s, _ = setting
    base = s.tokenize(text, add_bos=True)
    unit = _unit(s)
    start = 3 * unit - 11
    ends = [start, start + 2, start + 3, start + 9, start + 10, start + 12, start + 19]
    assert ends[-1] > 3 * unit  # the last steps cross into the next chunk
    s.reset()
    s.prefill(base[:start])
    reused = []
    for prev, end in itertools.pairwise(ends):
        s.generate(max_tokens=2)  # the completion shown; not reused
        resident = s.resident_tokens
        r = s.prefill(base[:end])
        reused.append(r.reused_tokens)
        assert r.reused_tokens == _kept(s, resident, prev, base[:end])
        warm = _logits_and_tokens(s)
        assert warm == _cold(s, base[:end])
        s.reset()
        s.prefill(base[:end])  # back to where the keystroke left the session
    if s.schedule.tile:  # a minimum micro-batch recomputed, a tile where the edge moved
        assert reused[:-1] == [e - s.schedule.min_batch for e in ends[1:-1]]
        assert _edge(s, ends[-1]) > _edge(s, ends[-2])
        assert ends[-1] - reused[-1] >= s.schedule.tile
    elif s.schedule.kind == "invariant":  # token by token, a minimum micro-batch recomputed
        assert reused == [e - s.schedule.min_batch for e in ends[1:]]
    elif TAIL_PIECE < unit and unit % TAIL_PIECE == 0:
        assert max(reused) > 2 * unit  # pieces of the partial chunk were reused


def test_a_shorter_prompt_after_a_longer_one(setting: Any, text: str) -> None:
    """A deletion: the prompt is a prefix of the resident one, ending a chunk or tile earlier.
    Only what its cold prefill computes the same way is kept."""
    s, _ = setting
    base = s.tokenize(text, add_bos=True)
    unit = _unit(s)
    long, short = base[: 4 * unit + 20], base[: 3 * unit - 5]
    cold = _cold(s, short)
    s.reset()
    s.prefill(long)
    r = s.prefill(short)
    assert r.reused_tokens == _kept(s, long, len(long), short) > 0
    assert _logits_and_tokens(s) == cold


def test_branch_restore(setting: Any, text: str) -> None:
    s, _ = setting
    prefix, full = _prompts(s, text)
    other = s.tokenize(text[2000:], add_bos=True)[: len(prefix) + 40]
    cold = _cold(s, full)
    s.reset()
    s.prefill(prefix)
    s.branch_save("a")
    s.prefill(other)
    r = s.prefill(full)
    assert r.restored_branch == "a"
    assert r.reused_tokens == _kept(s, prefix, len(prefix), full)
    assert _logits_and_tokens(s) == cold
    s.branch_drop("a")


def test_snapshot_restore_into_a_busy_session(setting: Any, text: str) -> None:
    s, _ = setting
    prefix, full = _prompts(s, text)
    cold = _cold(s, full)
    s.reset()
    s.prefill(prefix)
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "p.snap"
        s.save_snapshot(snap)
        # Something else is resident (and parked) when the snapshot comes back.
        s.prefill(s.tokenize(text[4000:], add_bos=True)[:150])
        s.branch_save("other")
        s.prefill(s.tokenize(text[6000:], add_bos=True)[:90])
        s.load_snapshot(snap)
    # A snapshot holds what exact reuse may reuse (chunked: whole chunks only; two regimes:
    # every prefilled token, those of the small micro-batches computed again in a tile).
    whole = _snapshot_whole(s, len(prefix))
    assert s.resident_tokens == prefix[:whole]
    r = s.prefill(full)
    assert r.reused_tokens == _kept_after_snapshot(s, whole, len(full))
    assert _logits_and_tokens(s) == cold
    s.branch_drop("other")


def test_resume_after_cancelled_prefill(setting: Any, text: str) -> None:
    s, _ = setting
    base = s.tokenize(text, add_bos=True)
    toks = base[: s.profile.n_batch + 2 * _unit(s) + 5]
    cold = _cold(s, toks)
    s.reset()
    real = s._decode_fn
    calls = {"n": 0}

    def cancel_in_second_batch(ctx: Any, batch: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            s.cancel()
        return int(real(ctx, batch))

    s._decode_fn = cancel_in_second_batch
    try:
        with pytest.raises(CancelledError):
            s.prefill(toks)
    finally:
        s._decode_fn = real
    assert 0 < s.n_resident < len(toks)
    r = s.prefill(toks)
    assert r.reused_tokens > 0
    assert _logits_and_tokens(s) == cold



@pytest.fixture(scope="module")
def flash_session() -> Iterator[Any]:
    """Flash attention on: the two-regime schedule (on the CPUs seen)."""
    prof = load_profile(None).with_overrides(
        {"context.flash_attn": "on", "context.n_ubatch": 256}, source="test")
    with open_session(prof) as session:
        yield session


@pytest.mark.parametrize("which", ["default", "flash attention"])
def test_prefixes_longer_than_the_sliding_window(
        which: str, llama_session: Any, flash_session: Any, text: str) -> None:
    """Gemma 3's sliding-window layers: a parked branch keeps every cell of its window, so it
    can be rolled back into; a snapshot (llama.cpp saves only the window) is extended as is."""
    s = llama_session if which == "default" else flash_session
    n_swa = s._model.n_swa
    assert n_swa > 0
    unit = _unit(s)
    base = s.tokenize(text, add_bos=True)
    prefix = base[: n_swa + 2 * unit + 7]  # ends inside a chunk: reuse rolls back 7 tokens
    # Long enough that, under two regimes, its cold prefill computes the whole prefix in
    # tile-sized micro-batches (a restored window cannot be rolled back into to make one).
    full = prefix + s.tokenize("\n# In one sentence, the code above:\n" * 16)
    whole = _snapshot_whole(s, len(prefix))
    cold = _cold(s, full)

    s.reset()
    s.prefill(prefix)
    s.branch_save("long")
    s.prefill(base[:1] + base[900 : 900 + 200])
    r = s.prefill(full)
    kept = _kept(s, prefix, len(prefix), full)
    assert (r.restored_branch, r.reused_tokens, r.miss_reason) == ("long", kept, None)
    assert _logits_and_tokens(s) == cold
    s.branch_drop("long")

    s.reset()
    s.prefill(prefix)
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "long.snap"
        try:
            saved = s.save_snapshot(snap)
        except UnsupportedCapabilityError as exc:
            # This CPU rounds differently over a restored window (engine/llama/snapshots.py,
            # measured by the save): refused, reported, and the live sequence untouched.
            assert (exc.data["capability"], exc.data["window"]) == ("snapshots_past_window",
                                                                   n_swa)
            assert s.snapshots_past_window is False
            assert s.exact_reuse["snapshotsPastWindow"].startswith("refused")
            assert not snap.exists()
            r = s.prefill(full)
            assert r.reused_tokens == _kept(s, prefix, len(prefix), full)
            assert _logits_and_tokens(s) == cold
            return
        assert s.snapshots_past_window is not False  # exact at this length at least
        assert saved.tokens == whole
        s.prefill(base[:1] + base[900 : 900 + 200])
        s.load_snapshot(snap)
    r = s.prefill(full)
    assert (r.reused_tokens, r.miss_reason) == (_kept_after_snapshot(s, whole, len(full)), None)
    assert r.reused_tokens == whole
    assert _logits_and_tokens(s) == cold


def test_a_cpu_that_rounds_differently_over_a_restored_window_refuses_such_snapshots(
        llama_session: Any, text: str) -> None:
    """Where the probe found a restored window inexact, a snapshot longer than the window is
    neither saved nor loaded, and the refusal changes nothing. The probe's answer is set here:
    which CPUs round differently is the machine's call."""
    s = llama_session
    n_swa = s._model.n_swa
    base = s.tokenize(text, add_bos=True)
    prefix, short = base[: n_swa + 40], base[: n_swa - 40]
    measured = s._window_exact
    try:
        with tempfile.TemporaryDirectory() as tmp:
            snap = Path(tmp) / "long.snap"
            s._window_exact = True
            s.reset()
            s.prefill(prefix)
            s.save_snapshot(snap)  # as a CPU whose window restores exactly would keep it
            s._window_exact = False
            s.prefill(prefix)
            before = s.resident_tokens
            with pytest.raises(UnsupportedCapabilityError, match="sliding window"):
                s.save_snapshot(Path(tmp) / "other.snap")
            assert s.resident_tokens == before and not (Path(tmp) / "other.snap").exists()
            s.prefill(short)
            with pytest.raises(UnsupportedCapabilityError, match="more than the sliding window"):
                s.load_snapshot(snap)
            assert s.resident_tokens == short
            saved = s.save_snapshot(Path(tmp) / "short.snap")
            assert saved.tokens == _snapshot_whole(s, len(short))
    finally:
        s._window_exact = measured


def test_a_restored_window_is_trusted_only_after_several_lengths_restored_exactly(
        llama_session: Any, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether a restored window is exact depends on its length (on one AMD EPYC 2,000 tokens
    restored exactly, 583, 1,000, 1,500 and 2,500 did not): each new length past the window is
    measured until ``WINDOW_TRUST_LENGTHS`` of them restored exactly, and one that did not
    refuses every length from then on; the cache file keeps both. The probe's answers are set
    here (which lengths restore exactly is the CPU's call); the bookkeeping is the session's."""
    s = llama_session
    n_swa = s._model.n_swa
    base = s.tokenize(text, add_bos=True)
    monkeypatch.setenv("CONTENOX_CACHE_DIR", str(tmp_path))
    probed: list[int] = []
    inexact: set[int] = set()

    def probe() -> bool:
        probed.append(len(s._live))
        return len(s._live) not in inexact

    monkeypatch.setattr(s, "_measure_restored_window", probe)
    kept = tmp_path / "engine" / "restored-window.json"
    measured = s._window_exact
    s._window_exact = None  # read again: from this test's empty cache
    try:
        with tempfile.TemporaryDirectory() as tmp:
            def save(n: int) -> int:
                s.reset()
                s.prefill(base[:n])
                return s.save_snapshot(Path(tmp) / "x.snap").tokens

            first, second = save(n_swa + 40), save(n_swa + 80)
            assert probed == [first, second]
            assert save(n_swa + 40) == first and probed == [first, second]  # known: not again
            assert s.snapshots_past_window is None
            assert s.exact_reuse["snapshotsPastWindow"].startswith("exact so far (2 of the 3")
            assert list(json.loads(kept.read_text()).values()) == [[first, second]]
            third = save(n_swa + 120)
            assert probed == [first, second, third]
            assert s.snapshots_past_window is True  # three lengths: every length trusted
            assert list(json.loads(kept.read_text()).values()) == [True]
            save(n_swa + 160)
            assert len(probed) == 3 and s.exact_reuse["snapshotsPastWindow"] == "exact"

            kept.unlink()
            s._window_exact = None
            probed.clear()
            inexact.add(second)
            assert save(n_swa + 40) == first
            with pytest.raises(UnsupportedCapabilityError, match="sliding window"):
                save(n_swa + 80)
            assert probed == [first, second] and s.snapshots_past_window is False
            assert list(json.loads(kept.read_text()).values()) == [False]
            with pytest.raises(UnsupportedCapabilityError, match="sliding window"):
                save(n_swa + 40)  # refused from then on, without measuring again
            assert probed == [first, second]
            assert s.exact_reuse["snapshotsPastWindow"].startswith("refused")
    finally:
        s._window_exact = measured


@given(pos=st.integers(0, 3000), n=st.integers(1, 3000), size=st.integers(16, 600),
       min_batch=st.sampled_from([1, 8, 16]))
def test_invariant_batches_cover_the_suffix_in_micro_batches_of_at_least_the_minimum(
        pos: int, n: int, size: int, min_batch: int) -> None:
    size = max(size, 2 * min_batch)
    batches = invariant_batches(pos, pos + n, size, min_batch)
    assert batches[0][0] == pos and batches[-1][1] == pos + n
    assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
    for start, stop, kind in batches:
        assert 0 < stop - start <= size
        # Only a suffix shorter than the minimum is one smaller micro-batch (not reusable).
        assert (kind == "chunks") == (stop - start >= min_batch)
        assert kind == "chunks" or len(batches) == 1


@given(common=st.integers(0, 400), prefilled=st.integers(0, 400), grow=st.integers(-200, 300),
       size=st.sampled_from([128, 256]), tile=st.sampled_from([32, 64]),
       min_batch=st.sampled_from([8, 12]))
def test_two_regime_reuse_keeps_the_longest_prefix_the_cold_prefill_computes_alike(
        common: int, prefilled: int, grow: int, size: int, tile: int, min_batch: int) -> None:
    """``tiled_reusable`` against trying every length; then the batches from there put every
    token in the regime a cold prefill of the prompt puts it in."""
    prompt_len = max(1, prefilled + grow)
    common = min(common, prefilled, prompt_len)
    exact = tile_boundary(prefilled, tile, min_batch)
    pieces = prefilled if prefilled >= min_batch else exact
    kept = tiled_reusable(common, prompt_len, exact, pieces, tile, min_batch)
    assert kept == _kept_two_regime(tile, min_batch, common, prefilled, prompt_len)
    edge = tile_boundary(prompt_len, tile, min_batch)
    cold = tiled_batches(0, prompt_len, size, tile, min_batch)
    warm = tiled_batches(kept, prompt_len, size, tile, min_batch)
    for batches in (cold, warm):
        assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
        assert batches[-1][1] == prompt_len
        for start, stop, kind in batches:
            big = stop - start >= tile
            assert big == (stop <= edge) and stop - start <= size  # the regime is the cold one
            assert (kind == "rest") == (stop - start < min_batch) and (kind != "rest" or
                                                                    len(cold) == 1)
    assert warm[0][0] == kept and cold[0][0] == 0


def test_the_probe_splits_put_tokens_in_micro_batches_of_the_candidate_size() -> None:
    for k in invariance.CANDIDATES:
        n = invariance.probe_length(k)
        for max_batch in (2 * k, 2 * k + 5, 128, 512):
            if max_batch < 2 * k:
                continue
            reference = invariance.within([n], max_batch, k)
            assert sum(reference) == n and k <= min(reference) and max(reference) <= max_batch
            for sizes in invariance.splits(k, n):
                parts = invariance.within(sizes, max_batch, k)
                assert sum(parts) == n and min(parts) >= k and max(parts) <= max_batch
                assert {k, k + 1, k + 3} & set(parts)
