"""Snapshots of a llama session's live sequence: its KV state with identity, tokens and a
checksum written to a file (``engine.snapshot_file``), and loaded back into the live sequence.

A layer of ``LlamaSession`` (its base class), above the branch layer whose spare sequences a
load is checked in first.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp

from contextasm.identity import ContextIdentity
from engine.errors import InvalidSessionStateError, SnapshotCorruptError
from engine.llama.branches import MAIN_SEQ, BranchLayer
from engine.llama.live import Computed
from engine.results import SessionMetrics, SnapshotResult, ms_since
from engine.snapshot_file import SnapshotPayload, check_compatible, read_snapshot, write_snapshot


class SnapshotLayer(BranchLayer):
    """Save and load of the live sequence."""

    # The session's state this layer reads (set in LlamaSession.__init__).
    backend: str
    identity: ContextIdentity
    metrics: SessionMetrics
    _model: Any
    _chunk: int

    @property
    def n_ctx(self) -> int:
        raise NotImplementedError

    def _ensure_context(self) -> None:
        raise NotImplementedError

    def save_snapshot(self, path: str | Path) -> SnapshotResult:
        """Write the live sequence's KV state with its identity, tokens and a checksum.

        Under exact reuse only the whole chunks are saved, and the live sequence is cut back to
        them first: a partial last chunk or generated tokens would be recomputed by the next
        prefill anyway, and llama.cpp saves only the sliding window's cells, so a restored
        prefix can be extended but not rolled back into.
        """
        with self._exclusive("save_snapshot"):
            live = self._live
            if self._ctx is None or not live.tokens or self._resident_identity is None:
                raise InvalidSessionStateError("nothing resident to snapshot", resident=len(live))
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

    def _snapshot_exact_tokens(self, payload: SnapshotPayload) -> int:
        """How much of a loaded snapshot counts as computed in whole chunks (0 if unknown)."""
        if not self._exact:
            return len(payload.tokens)
        claimed = payload.meta.get("exact_tokens")
        if not isinstance(claimed, int) or isinstance(claimed, bool) or claimed < 0:
            return 0
        return min(claimed, len(payload.tokens)) // self._chunk * self._chunk

