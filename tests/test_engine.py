"""Engine behaviour on the real embedded model: warm output must equal cold output.

Every "warm" result is checked against a cold run of the same full prompt (KV cleared first)
under greedy decoding, which is the correctness gate of prefix reuse. With exact reuse (the
default profile) the gate is stronger: the next-token logits are bitwise equal too.

Under the default profile the session picks its exact-reuse schedule at load
(``engine/README.md``): token by token with a minimum micro-batch recomputed where the kernels
are batch-invariant, whole chunks (``reuse_granularity``) and tail pieces where not. Prompts
here are cut at multiples of ``chunk`` where a test asserts that a whole prefix is reused, and
``whole_chunks`` / ``same_prompt_again`` state what the schedule gives for the others.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import (
    CancelledError,
    ContextOverflowError,
    DecodeFailedError,
    DecodeFatalError,
    InvalidBatchError,
    InvalidSessionStateError,
    ModelNotFoundError,
    NoKvSlotError,
    Session,
    SnapshotCorruptError,
    SnapshotIncompatibleError,
    UnsupportedCapabilityError,
    load_profile,
    open_session,
)
from engine.llama import logbridge
from engine.llama import model as llama_model
from engine.llama.session import TAIL_PIECE, reusable_tokens
from engine.results import RATE_MIN_TOKENS, PrefillResult, SessionMetrics
from engine.snapshot_file import read_snapshot, write_snapshot

N_GEN = 16


def _source_text() -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / "json" / "decoder.py").read_text("utf-8")


@pytest.fixture(scope="module")
def text() -> str:
    return _source_text()


def prompt(session: Session, body: str, limit: int) -> list[int]:
    return session.tokenize(body, add_bos=True)[:limit]


def cold_tokens(session: Session, toks: list[int]) -> list[int]:
    session.reset()
    r = session.prefill(toks)
    assert r.reused_tokens == 0
    return session.generate(max_tokens=N_GEN).tokens


def whole_chunks(session: Any, n: int) -> int:
    """What a longer prompt's prefill reuses of ``n`` valid prefilled resident tokens: all
    of them (invariant schedule), whole chunks only (chunked)."""
    g = session.reuse_granularity
    return n // g * g


def reused_of(session: Any, n: int, prompt_len: int) -> int:
    """What a ``prompt_len``-token prompt's prefill reuses of ``n`` prefilled resident tokens
    it starts with (``n`` a whole number of chunks under the chunked schedule): all of them,
    but the invariant schedule recomputes at least a minimum micro-batch."""
    if session.schedule.kind == "invariant":
        return min(n, prompt_len - session.schedule.min_batch)
    return whole_chunks(session, n)


def chunk(session: Session) -> int:
    """A length scale for prompts: the reuse chunk, at least 32."""
    return max(32, session.reuse_granularity)


def same_prompt_again(session: Any, n: int) -> int:
    """What a prefill of the ``n``-token prompt just prefilled reuses: all but a minimum
    micro-batch (invariant), or all but its last token (re-decoded for its logits), back to a
    whole chunk or a whole piece of the last, partial chunk (chunked)."""
    if session.schedule.kind == "invariant":
        return n - session.schedule.min_batch
    g = session.reuse_granularity
    piece = TAIL_PIECE if g % TAIL_PIECE == 0 else g
    exact = n // g * g
    return reusable_tokens(n, n, exact, exact + (n - exact) // piece * piece, g, piece)


@pytest.fixture()
def s(llama_session: Any) -> Iterator[Any]:
    """The shared session with its fault-injection seam restored after each test."""
    real = llama_session._decode_fn
    yield llama_session
    llama_session._decode_fn = real


def test_identity_and_default_profile(s: Any) -> None:
    prof = load_profile(None)
    assert prof.swa_full is True, "the Gemma 3 default must keep every position reusable"
    assert s.identity.swa_full is True
    assert len(s.identity.model_digest) == 64
    assert len(s.identity.tokenizer_digest) == 64
    assert "llama-cpp-python" in s.identity.backend_version
    assert s.identity.profile_id == prof.profile_id


def test_exact_reuse_is_the_default_and_says_how(s: Any) -> None:
    prof = load_profile(None)
    assert prof.exact_reuse is True
    info = s.exact_reuse
    assert info["kind"] in ("invariant", "chunked")
    assert info["description"] in s.identity.backend_version  # part of every cache identity
    if info["kind"] == "invariant":
        # Token-granular: nothing to pad, micro-batches at llama.cpp's full size.
        assert s.reuse_granularity == s.identity.block_size == 1
        assert 1 < info["minBatch"] <= prof.get("context.n_ubatch") // 2
    else:
        # The assembler pads the stable region to whole chunks: reused to its last token.
        assert s.reuse_granularity == prof.exact_chunk == s.identity.block_size


def test_new_suffix_after_cached_prefix_equals_cold(s: Any, text: str) -> None:
    prefix = prompt(s, text, 6 * chunk(s))
    full = prefix + s.tokenize("\n# Summary of the decoder above:\n")
    s.reset()
    s.prefill(prefix)
    r = s.prefill(full)
    assert r.reused_tokens == len(prefix)
    assert r.new_tokens == len(full) - len(prefix)
    warm = s.generate(max_tokens=N_GEN).tokens
    assert warm == cold_tokens(s, full)


def test_fully_cached_prompt_still_decodes_correctly(s: Any, text: str) -> None:
    toks = prompt(s, text, 300)
    cold = cold_tokens(s, toks)
    r = s.prefill(toks)
    # The last token is re-decoded for its logits, with what the schedule recomputes with it.
    assert r.reused_tokens == same_prompt_again(s, len(toks)) < len(toks)
    assert s.generate(max_tokens=N_GEN).tokens == cold


def test_edit_in_middle_reuses_up_to_the_edit(s: Any, text: str) -> None:
    toks = prompt(s, text, 500)
    edited = list(toks)
    edited[250:252] = s.tokenize(" CHANGED")
    s.reset()
    s.prefill(toks)
    s.generate(max_tokens=4)
    r = s.prefill(edited)
    assert r.reused_tokens == whole_chunks(s, 250)
    warm = s.generate(max_tokens=N_GEN).tokens
    assert warm == cold_tokens(s, edited)


def test_stream_and_generate_give_same_tokens(s: Any, text: str) -> None:
    toks = prompt(s, text, 200)
    s.prefill(toks)
    g = s.generate(max_tokens=N_GEN)
    s.prefill(toks)
    it = s.stream(max_tokens=N_GEN)
    pieces: list[str] = []
    while True:
        try:
            pieces.append(next(it))
        except StopIteration as stop:
            streamed = stop.value
            break
    assert streamed.tokens == g.tokens
    assert "".join(pieces) == g.text == streamed.text
    assert g.ttft_ms > 0 and g.decode_tokens == len(g.tokens)


def test_generate_without_prefill_is_invalid_state(s: Any, text: str) -> None:
    s.prefill(prompt(s, text, 50))
    s.generate(max_tokens=2)
    with pytest.raises(InvalidSessionStateError):
        s.generate(max_tokens=2)


def test_manifest_mismatch_forces_full_prefill(s: Any, text: str) -> None:
    toks = prompt(s, text, 200)
    s.prefill(toks)
    other = dataclasses.replace(s.identity, tokenizer_digest="0" * 64)
    r = s.prefill(toks, identity=other)
    assert r.reused_tokens == 0
    assert r.miss_reason is not None and "tokenizer_digest" in r.miss_reason
    # and back: the resident state now belongs to `other`, so the session identity misses too
    r2 = s.prefill(toks)
    assert r2.reused_tokens == 0


def test_over_context_is_rejected_before_any_decode(s: Any, text: str) -> None:
    toks = prompt(s, text, 100)
    s.prefill(toks)
    before = s.resident_tokens
    calls: list[int] = []
    real = s._decode_fn
    s._decode_fn = lambda ctx, batch: calls.append(1) or real(ctx, batch)
    with pytest.raises(ContextOverflowError) as err:
        s.prefill([toks[1]] * (s.n_ctx + 1))
    assert err.value.data["requested"] == s.n_ctx + 1
    assert err.value.data["n_ctx"] == s.n_ctx
    assert calls == []
    assert s.resident_tokens == before


def test_invalid_token_ids_are_rejected(s: Any) -> None:
    with pytest.raises(InvalidBatchError):
        s.prefill([s.n_vocab + 5])
    with pytest.raises(InvalidBatchError):
        s.prefill([])


def _inject_once(s: Any, status: int, on_call: int = 1) -> None:
    """Small honest fault injector: the Nth decode call returns ``status`` without decoding."""
    real = s._decode_fn
    count = {"n": 0}

    def fake(ctx: Any, batch: Any) -> int:
        count["n"] += 1
        if count["n"] == on_call:
            return status
        return int(real(ctx, batch))

    s._decode_fn = fake


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (1, NoKvSlotError),
        (2, CancelledError),
        (-1, InvalidBatchError),
        (-3, DecodeFatalError),
        (7, DecodeFailedError),
    ],
)
def test_decode_status_maps_to_error_and_session_recovers(
    s: Any, text: str, status: int, error: type[Exception]
) -> None:
    toks = prompt(s, text, 300)
    s.reset()
    s.prefill(toks[: 2 * chunk(s)])
    _inject_once(s, status)
    with pytest.raises(error) as err:
        s.prefill(toks)
    assert err.value.data["status"] == status  # type: ignore[attr-defined]
    if status < -1:
        assert s.n_resident == 0  # context freed; rebuilt on the next request
    elif status == -1:
        # A batch llama.cpp rejects means its state and ours disagree: start clean.
        assert s.n_resident == 0
    else:
        assert s.resident_tokens == toks[: 2 * chunk(s)]  # rolled back to the committed prefix
    r = s.prefill(toks)
    assert r.reused_tokens == (0 if status <= -1 else 2 * chunk(s))
    warm = s.generate(max_tokens=N_GEN).tokens
    assert warm == cold_tokens(s, toks)


def test_cancelled_prefill_rolls_back_to_committed_chunk(
        s: Any, text: str, caplog: pytest.LogCaptureFixture) -> None:
    n_batch = s.profile.n_batch
    toks = prompt(s, text, n_batch * 2 + 50)
    assert len(toks) > n_batch * 2
    s.reset()
    real = s._decode_fn
    calls = {"n": 0}

    def cancel_on_second_chunk(ctx: Any, batch: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 2:
            s.cancel()  # the real abort callback stops the real decode
        return int(real(ctx, batch))

    s._decode_fn = cancel_on_second_chunk
    with caplog.at_level(logging.DEBUG, logger="contenox.llama_cpp"), \
            pytest.raises(CancelledError) as err:
        s.prefill(toks)
    assert err.value.data["status"] == 2
    # llama.cpp logs the stop as errors ("failed to decode, ret = 2"); it is the cancellation
    # the engine reports itself, so those lines go out at DEBUG while the cancel is pending
    # (every decode stops at once until the next request).
    stopped = [r for r in caplog.records if "failed to decode" in r.getMessage()]
    assert stopped and all(r.levelno == logging.DEBUG for r in stopped)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logbridge._aborting.is_set()
    # Rolled back to what the first decode call committed (n_batch tokens under the chunked
    # schedule, one micro-batch under the invariant one).
    committed = s.n_resident
    assert 0 < committed <= n_batch and s.resident_tokens == toks[:committed]
    assert committed == err.value.data["committed_tokens"]
    s._decode_fn = real
    r = s.prefill(toks)
    assert not logbridge._aborting.is_set()  # a new request: llama.cpp's errors are its own
    assert r.reused_tokens == committed
    warm = s.generate(max_tokens=N_GEN).tokens
    assert warm == cold_tokens(s, toks)


def test_cancel_from_another_thread_stops_prefill(s: Any, text: str) -> None:
    toks = prompt(s, text, 1000)
    s.reset()
    real = s._decode_fn
    started = threading.Event()

    def signal(ctx: Any, batch: Any) -> int:
        started.set()
        return int(real(ctx, batch))

    s._decode_fn = signal
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            s.prefill(toks)
            outcome["result"] = "completed"
        except CancelledError as exc:
            outcome["result"] = exc

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(30)
    s.cancel()
    t.join(60)
    assert isinstance(outcome["result"], CancelledError)
    assert s.n_resident < len(toks)
    assert s.resident_tokens == toks[: s.n_resident]


def test_cancel_stops_decode(s: Any, text: str) -> None:
    s.prefill(prompt(s, text, 100))
    it = s.stream(max_tokens=64)
    next(it)
    s.cancel()
    with pytest.raises(CancelledError):
        for _ in it:
            pass


def test_snapshot_roundtrip_into_fresh_session(s: Any, text: str, tmp_path: Path) -> None:
    prefix = prompt(s, text, 6 * chunk(s))
    full = prefix + s.tokenize("\n# Next, the scanner:\n")
    s.reset()
    s.prefill(prefix)
    snap = tmp_path / "prefix.snap"
    saved = s.save_snapshot(snap)
    assert saved.tokens == len(prefix) and saved.bytes > 0
    assert stat.S_IMODE(os.stat(snap).st_mode) == 0o600
    cold = cold_tokens(s, full)
    with open_session(load_profile(None)) as fresh:
        loaded = fresh.load_snapshot(snap)
        assert loaded.tokens == len(prefix)
        assert fresh.resident_tokens == prefix
        r = fresh.prefill(full)
        assert r.reused_tokens == len(prefix)
        assert fresh.generate(max_tokens=N_GEN).tokens == cold


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_snapshot_leaves_state_unchanged(
    s: Any, text: str, tmp_path: Path, damage: str
) -> None:
    toks = prompt(s, text, 120)
    s.prefill(toks)
    snap = tmp_path / "x.snap"
    s.save_snapshot(snap)
    blob = snap.read_bytes()
    if damage == "truncate":
        snap.write_bytes(blob[: len(blob) // 2])
    elif damage == "flip":
        mid = len(blob) // 2
        snap.write_bytes(blob[:mid] + bytes([blob[mid] ^ 0xFF]) + blob[mid + 1 :])
    elif damage == "garbage":
        snap.write_bytes(b"not a snapshot at all" * 10)
    else:
        snap.write_bytes(b"")
    other = prompt(s, text[500:], 80)
    s.prefill(other)
    before = s.resident_tokens
    with pytest.raises(SnapshotCorruptError):
        s.load_snapshot(snap)
    assert s.resident_tokens == before
    r = s.prefill(other)
    assert r.reused_tokens == same_prompt_again(s, len(other))


def test_incompatible_snapshot_is_refused(s: Any, text: str, tmp_path: Path) -> None:
    toks = prompt(s, text, 120)
    s.prefill(toks)
    snap = tmp_path / "x.snap"
    s.save_snapshot(snap)
    payload = read_snapshot(snap)
    alien = dataclasses.replace(
        payload, identity=dataclasses.replace(payload.identity, model_digest="f" * 64)
    )
    write_snapshot(snap, alien)
    before = s.resident_tokens
    with pytest.raises(SnapshotIncompatibleError) as err:
        s.load_snapshot(snap)
    assert err.value.data["field"] == "model_digest"
    assert s.resident_tokens == before


def test_branches_keep_two_prefixes_warm(s: Any, text: str) -> None:
    a = prompt(s, text, 5 * chunk(s))
    b = prompt(s, text[3000:], 300)
    assert a[:5] != b[:5] or a[1:5] != b[1:5]
    s.reset()
    s.prefill(a)
    info = s.branch_save("a")
    assert info.tokens == len(a)
    s.prefill(b)  # the live sequence now holds b
    full = a + s.tokenize("\n# continued\n")
    cold = cold_tokens(s, full)
    s.prefill(a)
    s.branch_save("a")
    s.prefill(b)
    r = s.prefill(full)
    assert r.restored_branch == "a"
    assert r.reused_tokens == reused_of(s, len(a), len(full))
    assert s.generate(max_tokens=N_GEN).tokens == cold
    assert [x.name for x in s.branches()] == ["a"]
    s.branch_drop("a")
    assert s.branches() == []


def test_missing_model_is_model_not_found(tmp_path: Path) -> None:
    prof = load_profile(None).with_overrides({"model.path": str(tmp_path / "nope.gguf")})
    with pytest.raises(ModelNotFoundError) as err:
        open_session(prof)
    assert err.value.code == "model_not_found"
    assert "nope.gguf" in str(err.value)


@pytest.mark.parametrize("amx", [True, False])
def test_repacked_weights_are_refused_where_llama_cpp_has_amx_kernels(
        amx: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a build with AMX kernels repacked weights go to the AMX buffer type, whose matmul
    crashed the process at the first batch of more than one token (Intel Xeon with AMX):
    refused before the load with a structured error. Which builds have them is set here, as
    most machines have no AMX; without them the same profile loads and decodes."""
    really_amx = llama_model.amx_kernels()
    monkeypatch.setattr(llama_model, "amx_kernels", lambda: amx)
    prof = load_profile(None).with_overrides(
        {"context.repack_weights": True, "context.n_ctx": 512, "context.n_seq_max": 1,
         "cache.exact_schedule": "chunked"}, source="test")
    if amx:
        with pytest.raises(UnsupportedCapabilityError) as err:
            open_session(prof)
        assert err.value.code == "unsupported_capability"
        assert err.value.data["capability"] == "repack_weights"
        assert "context.repack_weights = false" in err.value.message
        return
    if really_amx:
        pytest.skip("this build has AMX kernels: repacking would crash the process here")
    with open_session(prof) as sess:
        assert sess.prefill(sess.tokenize("def f(x):\n    return x\n", add_bos=True)).new_tokens


@pytest.fixture(scope="module")
def swa_session() -> Iterator[Any]:
    prof = load_profile(None).with_overrides(
        {
            "context.swa_full": False,
            "context.n_ctx": 2048,
            "context.n_batch": 64,
            "context.n_ubatch": 64,
            "context.n_seq_max": 1,
        }
    )
    with open_session(prof) as sess:
        yield sess


def test_swa_rollback_past_window_is_a_reported_miss(swa_session: Any, text: str) -> None:
    s = swa_session
    n_swa = s._model.n_swa
    assert n_swa > 0, "Gemma 3 uses sliding-window attention"
    toks = prompt(s, text, n_swa + 400)
    s.prefill(toks)
    edited = toks[:100] + s.tokenize(" edited") + toks[102:]
    r = s.prefill(edited)
    assert r.reused_tokens == 0
    assert r.miss_reason is not None and "sliding window" in r.miss_reason
    warm = s.generate(max_tokens=N_GEN).tokens
    assert warm == cold_tokens(s, edited)


def test_swa_append_still_reuses(swa_session: Any, text: str) -> None:
    s = swa_session
    toks = prompt(s, text, 11 * chunk(s))
    s.reset()
    s.prefill(toks)
    full = toks + s.tokenize("\n# more\n")
    r = s.prefill(full)
    assert r.reused_tokens == reused_of(s, len(toks), len(full))
    assert s.generate(max_tokens=N_GEN).tokens == cold_tokens(s, full)


def test_forged_snapshot_is_refused_before_it_can_poison_the_session(
    s: Any, text: str, tmp_path: Path
) -> None:
    """A valid checksum over another prefix's KV under this prefix's tokens is refused: the
    state's positions must match the header's token list."""
    a = prompt(s, text, 4 * chunk(s))
    b = prompt(s, text[4000:], 2 * chunk(s))
    s.reset()
    s.prefill(a)
    snap_a, snap_b = tmp_path / "a.snap", tmp_path / "b.snap"
    s.save_snapshot(snap_a)
    s.prefill(b)
    s.save_snapshot(snap_b)
    forged = dataclasses.replace(read_snapshot(snap_a), state=read_snapshot(snap_b).state)
    write_snapshot(snap_a, forged)
    before = s.resident_tokens
    with pytest.raises(SnapshotCorruptError) as err:
        s.load_snapshot(snap_a)
    assert err.value.data["reason"] == "state does not match its tokens"
    assert s.resident_tokens == before
    assert s.prefill(a).reused_tokens == reused_of(s, 1, len(a))  # a and b share only BOS
    assert s.generate(max_tokens=N_GEN).tokens == cold_tokens(s, a)


def test_snapshot_of_another_prefix_than_expected_is_refused(
    s: Any, text: str, tmp_path: Path
) -> None:
    """A store entry keyed by one prefix whose file holds another (files swapped on disk)."""
    a = prompt(s, text, 3 * chunk(s))
    s.reset()
    s.prefill(a)
    snap = tmp_path / "a.snap"
    s.save_snapshot(snap)
    other = prompt(s, text[2000:], 3 * chunk(s))
    s.prefill(other)
    before = s.resident_tokens
    with pytest.raises(SnapshotIncompatibleError) as err:
        s.load_snapshot(snap, expect_prefix=other[: 2 * chunk(s)])
    assert err.value.data["field"] == "tokens"
    assert s.resident_tokens == before
    loaded = s.load_snapshot(snap, expect_prefix=a[: 2 * chunk(s)])
    assert loaded.tokens == len(a) and s.resident_tokens == a


def test_the_prefill_rate_counts_prefills_that_computed_enough_tokens() -> None:
    metrics = SessionMetrics()
    assert metrics.prefill_rate() is None
    metrics.record_prefill(PrefillResult(reused_tokens=900, new_tokens=RATE_MIN_TOKENS - 1,
                                         prefill_ms=500.0, total_tokens=963))
    assert metrics.prefill_rate() is None  # a small suffix says little about speed
    metrics.record_prefill(PrefillResult(reused_tokens=0, new_tokens=400, prefill_ms=2000.0,
                                         total_tokens=400))
    metrics.record_prefill(PrefillResult(reused_tokens=0, new_tokens=200, prefill_ms=1000.0,
                                         total_tokens=200))
    assert metrics.prefill_rate() == pytest.approx(200.0)
