"""Snapshots of a llama session's live sequence: its KV state with identity, tokens and a
checksum written to a file (``engine.snapshot_file``), and loaded back into the live sequence.

A layer of ``LlamaSession`` (its base class), above the branch layer whose spare sequences a
load is checked in first.

Sliding-window models: llama.cpp saves only the cells a sliding-window layer can still attend
to, so a restored sequence longer than the window lays those cells out differently from a cold
prefill. On most CPUs that gives the same bits; on some (seen: an AVX-only AMD EPYC, and an AMD
EPYC with AVX-512 at some lengths only) the attention kernels round differently over the other
layout, and the answer drifts. A save of such a sequence measures it at the length it saves
(``_restored_window_exact``: the live sequence and a copy restored from its own state decode the
same tokens, and must give the same logits). The answer is kept per model, build and kernel
settings: one length that differs refuses every snapshot longer than the window from then on,
with a clear error instead of restoring something that is not exact; every length is trusted
only once ``WINDOW_TRUST_LENGTHS`` lengths restored exactly (one lucky length is not the
CPU's answer), and until then each new length is measured.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from contextasm.identity import ContextIdentity
from engine.errors import (
    DecodeFatalError,
    InvalidSessionStateError,
    SnapshotCorruptError,
    UnsupportedCapabilityError,
)
from engine.json_map import read_map, write_entry
from engine.llama.abort_flag import AbortFlag
from engine.llama.branches import MAIN_SEQ, BranchLayer, fill_batch
from engine.llama.invariance import PROBE_TEXT, kernel_settings, probe_key
from engine.llama.live import Computed
from engine.model_files import cache_dir
from engine.profile import Profile
from engine.results import SessionMetrics, SnapshotResult, ms_since
from engine.snapshot_file import SnapshotPayload, check_compatible, read_snapshot, write_snapshot

log = logging.getLogger(__name__)

#: The batches the restored-window probe decodes after the live sequence and after its
#: restored copy. Where the layout matters, single-token decodes agreed and batches of 8 or
#: more mostly did not (some text agreed): several batches of different sizes and text.
WINDOW_PROBE_BATCHES = (11, 16, 13, 9, 16, 12, 1, 1)
#: Lengths that must restore exactly, each measured by a save, before every length is
#: trusted. On an AMD EPYC with AVX-512 (Gemma 3 270M, window 512) a sequence of 2,000 tokens
#: restored exactly and ones of 583, 1,000, 1,500 and 2,500 did not: the probe's answer holds
#: for the length it measured, and a kept "exact" from one length let other lengths drift.
WINDOW_TRUST_LENGTHS = 3
#: Part of the probe's cache key (2: answers per length; a version-1 "exact", measured at one
#: length and kept for all, is measured again).
WINDOW_PROBE_VERSION = 2


class SnapshotLayer(BranchLayer):
    """Save and load of the live sequence."""

    # The session's state this layer reads (set in LlamaSession.__init__).
    backend: str
    identity: ContextIdentity
    metrics: SessionMetrics
    profile: Profile
    _model: Any
    _chunk: int
    # The restored-window probe's answer as this process knows it: True (every length), False
    # (none), the lengths measured exact so far, or None (not read from the cache file yet).
    _window_exact: bool | list[int] | None = None
    _abort: AbortFlag

    @property
    def n_ctx(self) -> int:
        raise NotImplementedError

    def _ensure_context(self) -> None:
        raise NotImplementedError

    def _clear_live(self) -> None:
        raise NotImplementedError

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        raise NotImplementedError

    def _snapshot_tokens(self) -> int:
        """How many live tokens a snapshot would hold (the schedule's rule)."""
        return self._live.exact if self._exact else len(self._live)

    def _settle_for_snapshot(self) -> None:
        """Make the live sequence's ``_snapshot_tokens`` all reusable by a longer prompt (a
        schedule that computes a prompt's last tokens another way does it again here)."""

    def save_snapshot(self, path: str | Path) -> SnapshotResult:
        """Write the live sequence's KV state with its identity, tokens and a checksum.

        Under exact reuse only the whole chunks are saved, and the live sequence is cut back to
        them first: a partial last chunk or generated tokens would be recomputed by the next
        prefill anyway, and llama.cpp saves only the sliding window's cells, so a restored
        prefix can be extended but not rolled back into. Under the two-regime schedule every
        prefilled token is saved: those of the last small micro-batches are computed again in
        a tile-sized one first, as any longer prompt computes them.
        """
        with self._exclusive("save_snapshot"):
            live = self._live
            if self._ctx is None or not live.tokens or self._resident_identity is None:
                raise InvalidSessionStateError("nothing resident to snapshot", resident=len(live))
            saved = self._snapshot_tokens()
            # Whether a restored window is exact depends on its length: measured on the live
            # sequence as it is (a refusal changes nothing), and again below on what is saved
            # when the cut leaves another length (a refusal there leaves it cut, as a save
            # would: the generated or partial tokens a next prefill computes again anyway).
            if self._past_window(saved) and not self._restored_window_exact(len(live)):
                raise self._window_refusal(saved)
            self._settle_for_snapshot()
            if self._exact and live.exact < len(live):
                if live.exact == 0:
                    raise InvalidSessionStateError(
                        "nothing resident in whole chunks to snapshot",
                        resident=len(live),
                        chunk=self._chunk,
                    )
                llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, live.exact, -1)
                live.cut(live.exact)
                self._logits_ready = False
            if self._past_window(len(live)) and not self._restored_window_exact(len(live)):
                raise self._window_refusal(len(live))
            t0 = time.perf_counter()
            self._flush_copies()
            size = int(llama_cpp.llama_state_seq_get_size(self._ctx, MAIN_SEQ))
            buf = (ctypes.c_uint8 * size)()
            n = int(llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, MAIN_SEQ))
            payload = SnapshotPayload(
                identity=self._resident_identity,
                tokens=list(live.tokens),
                state=ctypes.string_at(buf, n),  # buf[:n] would build a list of ints
                meta={
                    "backend": self.backend,
                    "model": self._model.description,
                    "exact_tokens": live.exact,
                },
            )
            nbytes = write_snapshot(Path(path), payload)
            result = SnapshotResult(
                path=str(path), tokens=len(live), bytes=nbytes, ms=ms_since(t0)
            )
            self.metrics.last_snapshot_save = result
            return result

    def load_snapshot(
        self, path: str | Path, expect_prefix: Sequence[int] | None = None
    ) -> SnapshotResult:
        """Restore a snapshot into the live sequence.

        Checksum, header, identity and (given ``expect_prefix``, the tokens the caller's store
        entry is keyed by) the token list are verified before the context is touched; the state
        is loaded into a spare sequence first and must hold exactly the header's positions, so
        a rejected state leaves the live one as it was.
        """
        with self._exclusive("load_snapshot"):
            t0 = time.perf_counter()
            payload = read_snapshot(Path(path))
            check_compatible(payload, path, self.identity, self.n_ctx, expect_prefix)
            if self._past_window(len(payload.tokens)) and self.snapshots_past_window is False:
                raise UnsupportedCapabilityError(
                    f"{path} holds {len(payload.tokens)} tokens, more than the sliding window "
                    f"({self._model.n_swa}); such a snapshot does not restore exactly on this "
                    "CPU", capability="snapshots_past_window", path=str(path),
                    tokens=len(payload.tokens), window=self._model.n_swa)
            self._ensure_context()
            self._flush_copies()
            spare = self._free_seq() if self._n_seq_max > 1 else MAIN_SEQ
            if spare is None:
                self._drop_lru_branch()
                spare = self._free_seq()
            target = spare if spare is not None else MAIN_SEQ
            arr = (ctypes.c_uint8 * len(payload.state)).from_buffer_copy(payload.state)
            llama_cpp.llama_memory_seq_rm(self._mem, target, -1, -1)
            read = int(
                llama_cpp.llama_state_seq_set_data(self._ctx, arr, len(payload.state), target)
            )
            last = int(llama_cpp.llama_memory_seq_pos_max(self._mem, target))
            if read == 0 or last != len(payload.tokens) - 1:
                llama_cpp.llama_memory_seq_rm(self._mem, target, -1, -1)
                if target == MAIN_SEQ:
                    self._live.clear()
                raise SnapshotCorruptError(
                    f"llama.cpp rejected the state in {path}" if read == 0 else
                    f"the state in {path} ends at position {last}, its header holds "
                    f"{len(payload.tokens)} tokens",
                    path=str(path),
                    reason="state rejected" if read == 0 else "state does not match its tokens",
                )
            if target != MAIN_SEQ:
                # Accepted: now load it into the live sequence itself, which writes the cells
                # at once and lays them out as a cold prefill would.
                llama_cpp.llama_memory_seq_rm(self._mem, target, -1, -1)
                llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
                self._live.clear()
                if not llama_cpp.llama_state_seq_set_data(
                    self._ctx, arr, len(payload.state), MAIN_SEQ
                ):
                    llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
                    raise SnapshotCorruptError(
                        f"llama.cpp rejected the state in {path} on the live sequence",
                        path=str(path),
                        reason="state rejected",
                    )
            exact = self._snapshot_exact_tokens(payload)
            self._live.set(Computed(list(payload.tokens), exact, exact))
            self._resident_identity = payload.identity
            self._logits_ready = False
            result = SnapshotResult(path=str(path), tokens=len(payload.tokens),
                                    bytes=len(payload.state), ms=ms_since(t0))
            self.metrics.last_snapshot_load = result
            return result

    # -- sliding windows (module doc) ------------------------------------------------------

    def _past_window(self, n: int) -> bool:
        """Whether a snapshot of the live sequence's first ``n`` tokens drops sliding-window
        cells (under exact reuse, where the layout matters)."""
        return self._exact and self._model.n_swa > 0 and n > self._model.n_swa

    @property
    def snapshots_past_window(self) -> bool | None:
        """Whether a snapshot longer than the sliding window restores exactly on this CPU:
        True once ``WINDOW_TRUST_LENGTHS`` lengths did, False once one did not; None where
        there is no window (or exact reuse is off) or it is not decided yet."""
        if not (self._exact and self._model.n_swa > 0):
            return None
        verdict = self._window_verdict()
        return verdict if isinstance(verdict, bool) else None

    @property
    def window_lengths_exact(self) -> int:
        """How many lengths past the window restored exactly while it is not decided yet."""
        verdict = self._window_verdict()
        return len(verdict) if isinstance(verdict, list) else 0

    def _window_verdict(self) -> bool | list[int]:
        if self._window_exact is None:
            found = read_map(self._window_probe_path()).get(self._window_probe_key())
            self._window_exact = (
                found if isinstance(found, bool) else
                sorted({n for n in found if isinstance(n, int) and not isinstance(n, bool)})
                if isinstance(found, list) else [])
        return self._window_exact

    def _window_probe_path(self) -> Path:
        return cache_dir() / "engine" / "restored-window.json"

    def _window_probe_key(self) -> str:
        return probe_key(identity=self.identity.to_dict(), window_probe=WINDOW_PROBE_VERSION,
                         **kernel_settings(self.profile))

    def _window_refusal(self, tokens: int) -> UnsupportedCapabilityError:
        return UnsupportedCapabilityError(
            f"a snapshot of more than {self._model.n_swa} tokens (the sliding window) "
            "does not restore exactly on this CPU: llama.cpp keeps only the window's "
            "cells, and this CPU's attention kernels round differently over that "
            "layout", capability="snapshots_past_window", tokens=tokens,
            window=self._model.n_swa)

    def _restored_window_exact(self, n: int) -> bool:
        """Whether a snapshot of the live sequence (``n`` tokens, longer than the window)
        restores exactly: the kept answer, or measured now and kept. Needs a spare sequence;
        without one (``n_seq_max = 1``) the answer is no."""
        verdict = self._window_verdict()
        if isinstance(verdict, bool):
            return verdict
        if n in verdict:
            return True
        t0 = time.perf_counter()
        try:
            same = self._measure_restored_window()
        except Exception:
            self._clear_live()  # whatever the failure left there is not known to be exact
            raise
        log.info("restored-window probe at %d tokens: %s (%.0f ms)", n,
                 "exact" if same else "not exact", ms_since(t0))
        lengths = sorted({*verdict, n})
        kept: bool | list[int] = (
            False if not same else True if len(lengths) >= WINDOW_TRUST_LENGTHS else lengths)
        self._window_exact = kept
        write_entry(self._window_probe_path(), self._window_probe_key(), kept)
        return same

    def _measure_restored_window(self) -> bool:
        """Decode the same batches after the live sequence (in a whole-stream copy, which
        keeps its layout) and after the live sequence restored from its own state, as a
        snapshot load does; True when every logit has the same bits. The live sequence is
        then copied back (its logits must be computed again). It runs to its end, a cancel
        waiting for it (~2 s, once per machine and model): it must leave the live sequence as
        it was."""
        self._abort.attach(self._ctx, suspended=True)
        try:
            return self._compare_restored_window()
        finally:
            self._abort.attach(self._ctx)

    def _compare_restored_window(self) -> bool:
        spare = self._free_seq()
        if spare is None and self._drop_lru_branch():
            spare = self._free_seq()
        if spare is None:
            return False
        self._flush_copies()
        n = len(self._live)
        size = int(llama_cpp.llama_state_seq_get_size(self._ctx, MAIN_SEQ))
        buf = (ctypes.c_uint8 * size)()
        got = int(llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, MAIN_SEQ))
        self._logits_ready = False
        # Fresh text, not the sequence's own tokens (a repeat of those agreed where new code
        # did not); batches as a prefill after a restored snapshot, then single decode steps.
        text = self.tokenize(PROBE_TEXT, add_bos=False)
        steps, pos = [], n
        for size in WINDOW_PROBE_BATCHES:
            steps.append((text[pos - n: pos - n + size], pos))
            pos += size
        self._copy_seq(MAIN_SEQ, spare)
        kept = [self._probe_batch(spare, tokens, at) for tokens, at in steps]
        llama_cpp.llama_memory_seq_rm(self._mem, spare, n, -1)
        try:
            llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
            restored = bool(llama_cpp.llama_state_seq_set_data(self._ctx, buf, got, MAIN_SEQ))
            return restored and all(
                self._probe_batch(MAIN_SEQ, tokens, at) == logits
                for (tokens, at), logits in zip(steps, kept, strict=True))
        finally:
            # The live sequence as it was, cell for cell: the copy runs at the next decode,
            # one token after the sequence that is then taken off again.
            self._copy_seq(spare, MAIN_SEQ)
            self._probe_batch(MAIN_SEQ, text[:1], n)
            llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, n, -1)
            self._copies_pending = False
            llama_cpp.llama_memory_seq_rm(self._mem, spare, -1, -1)

    def _probe_batch(self, seq: int, tokens: Sequence[int], pos: int) -> bytes:
        """Decode ``tokens`` at ``pos`` of sequence ``seq`` in one batch; every position's
        logits."""
        fill_batch(self._batch, tokens, pos, seq, "all")
        status = int(llama_cpp.llama_decode(self._ctx, self._batch))
        if status != 0:
            raise DecodeFatalError(
                f"llama_decode returned {status} in the restored-window probe", status=status)
        row = 4 * int(self._model.n_vocab)
        return b"".join(ctypes.string_at(llama_cpp.llama_get_logits_ith(self._ctx, i), row)
                        for i in range(len(tokens)))

    def _snapshot_exact_tokens(self, payload: SnapshotPayload) -> int:
        """How much of a loaded snapshot counts as computed in whole chunks (0 if unknown)."""
        if not self._exact:
            return len(payload.tokens)
        claimed = payload.meta.get("exact_tokens")
        if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed < 0:
            return 0
        return min(claimed, len(payload.tokens)) // self._chunk * self._chunk

