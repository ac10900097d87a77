"""Parked branches of a llama session: other prefixes kept warm in sequences
1..n_seq_max-1, and the copies between sequences (``engine.llama.session``'s module doc).

A layer of ``LlamaSession`` (its base class), kept apart as llama-cpp-python keeps its
``_internals``: this module knows the KV sequences and the branch table, nothing of prefill
or decode; the session provides the reuse rule (``_reusable``) and the fatal path
(``_go_fatal``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import llama_cpp

from contextasm.identity import ContextIdentity
from engine.errors import DecodeFatalError, InvalidSessionStateError, UnsupportedCapabilityError
from engine.llama.live import Computed
from engine.results import BranchInfo
from engine.session_base import SessionBase

log = logging.getLogger(__name__)

#: The live sequence; parked branches use the others.
MAIN_SEQ = 0


#: Which positions of a batch get logits: none, the last one, or every one.
Logits = Literal["none", "last", "all"]


def fill_batch(batch: Any, tokens: Sequence[int], pos: int, seq: int, logits: Logits) -> None:
    """Put ``tokens`` at positions ``pos``.. of sequence ``seq`` into ``batch`` (every
    batch the session decodes is filled here)."""
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = 1 if logits == "all" else 0
    if logits == "last":
        batch.logits[len(tokens) - 1] = 1


@dataclass
class Branch:
    name: str
    seq_id: int
    computed: Computed
    identity: ContextIdentity
    last_used: float


class BranchLayer(SessionBase):
    """The branch table of a llama session and the sequence copies it needs."""

    # The session's state this layer reads and writes (set in LlamaSession.__init__).
    _ctx: Any
    _mem: Any
    _batch: Any
    _live: Computed
    _branches: dict[str, Branch]
    _n_seq_max: int
    _exact: bool
    _copies_pending: bool
    _logits_ready: bool

    def _reusable(self, resident: Computed, toks: Sequence[int]) -> int:
        raise NotImplementedError  # the session's schedule decides

    def _go_fatal(self, reason: str) -> None:
        raise NotImplementedError

    def _copy_seq(self, src: int, dst: int) -> None:
        """One pool: the destination shares the source's cells. Separate streams (exact
        reuse): llama.cpp copies the whole stream, cells at the same indices, every cell of the
        window kept (the sequence-state API would drop the cells outside the sliding window);
        the copy itself runs at the next decode, see ``_flush_copies``."""
        llama_cpp.llama_memory_seq_rm(self._mem, dst, -1, -1)
        llama_cpp.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
        self._copies_pending = self._exact

    def _flush_copies(self) -> None:
        """Make pending stream copies happen before the stream buffers are read or written
        directly (state save/load): llama.cpp runs them at the start of the next decode, so
        decode one token in a free stream and forget it."""
        if not self._copies_pending:
            return
        scratch = self._free_seq()
        if scratch is None:
            # Every other stream holds a branch (or there is none): give the oldest one up.
            if self._drop_lru_branch():
                scratch = self._free_seq()
            else:
                scratch = MAIN_SEQ if not self._live.tokens else None
        if scratch is None:
            return  # n_seq_max = 1: nothing is ever copied between streams
        fill_batch(self._batch, [0], 0, scratch, "none")
        status = int(llama_cpp.llama_decode(self._ctx, self._batch))
        llama_cpp.llama_memory_seq_rm(self._mem, scratch, -1, -1)
        # 2 (aborted by a pending cancel) comes after the copies: llama.cpp runs them first.
        if status not in (0, 2):
            self._go_fatal(f"llama_decode returned {status} while copying a sequence")
            raise DecodeFatalError(
                "could not complete a sequence copy; the context will be rebuilt", status=status
            )
        self._copies_pending = False

    def _free_seq(self) -> int | None:
        used = {b.seq_id for b in self._branches.values()}
        return next((s for s in range(1, self._n_seq_max) if s not in used), None)

    def _drop_lru_branch(self) -> bool:
        if not self._branches:
            return False
        victim = min(self._branches.values(), key=lambda b: b.last_used)
        log.info("dropping parked branch %r to free KV cells", victim.name)
        self.branch_drop(victim.name)
        return True

    def _best_branch(
        self, toks: Sequence[int], ident: ContextIdentity
    ) -> tuple[Branch, int] | None:
        best: tuple[Branch, int] | None = None
        for b in sorted(self._branches.values(), key=lambda b: b.name):
            if b.identity != ident:
                continue
            n = self._reusable(b.computed, toks)
            if best is None or n > best[1]:
                best = (b, n)
        return best

    def branch_save(self, name: str) -> BranchInfo:
        """Park a copy of the live prefix under ``name`` (cells are shared, not duplicated).

        ``prefill`` restores a parked branch automatically when it shares a longer prefix with
        the new prompt than the live sequence does. With all slots taken, the least recently
        used branch is replaced.
        """
        if self._n_seq_max < 2:
            raise UnsupportedCapabilityError(
                "branches need context.n_seq_max >= 2", capability="branches"
            )
        if self._ctx is None or not self._live.tokens or self._resident_identity is None:
            raise InvalidSessionStateError("nothing resident to branch", resident=len(self._live))
        existing = self._branches.get(name)
        seq = existing.seq_id if existing else self._free_seq()
        if seq is None:
            self._drop_lru_branch()
            seq = self._free_seq()
        assert seq is not None
        self._copy_seq(MAIN_SEQ, seq)
        branch = Branch(name, seq, self._live.copy(), self._resident_identity, time.monotonic())
        self._branches[name] = branch
        return BranchInfo(name=name, seq_id=seq, tokens=len(branch.computed))

    def branch_restore(self, name: str) -> BranchInfo:
        branch = self._branches.get(name)
        if branch is None:
            raise InvalidSessionStateError(f"no parked branch named {name!r}", branch=name)
        self._copy_seq(branch.seq_id, MAIN_SEQ)
        self._live.set(branch.computed)
        self._resident_identity = branch.identity
        self._logits_ready = False
        branch.last_used = time.monotonic()
        return BranchInfo(name=name, seq_id=branch.seq_id, tokens=len(branch.computed))

    def branch_drop(self, name: str) -> None:
        branch = self._branches.pop(name, None)
        if branch is not None and self._mem is not None:
            llama_cpp.llama_memory_seq_rm(self._mem, branch.seq_id, -1, -1)

    def branches(self) -> list[BranchInfo]:
        return [
            BranchInfo(name=b.name, seq_id=b.seq_id, tokens=len(b.computed))
            for b in sorted(self._branches.values(), key=lambda b: b.seq_id)
        ]
