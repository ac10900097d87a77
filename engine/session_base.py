"""What every backend's session does the same way: one call at a time, prompt checks before any
work, and the resident-state accessors of the seam (``engine.session.Session``)."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from contextasm.identity import ContextIdentity
from contextasm.manifest import common_prefix_length
from engine.errors import (
    ContextOverflowError,
    InvalidBatchError,
    InvalidSessionStateError,
    UnsupportedCapabilityError,
)
from engine.results import BranchInfo, GenerateResult, SnapshotResult, drain


def check_prompt(tokens: Sequence[int], n_vocab: int, n_ctx: int, reserve: int = 0) -> list[int]:
    """``tokens`` as a list of ints, or the structured error raised before any work: empty,
    an id outside the vocabulary, or more than ``n_ctx - reserve`` tokens (``reserve``: room a
    backend needs beside the prompt)."""
    toks = [int(t) for t in tokens]
    if not toks:
        raise InvalidBatchError("prefill needs at least one token", tokens=0)
    bad = next((t for t in toks if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise InvalidBatchError(
            f"token id {bad} is outside the vocabulary (0..{n_vocab - 1})",
            token=bad,
            n_vocab=n_vocab,
        )
    if len(toks) > n_ctx - reserve:
        raise ContextOverflowError(
            f"prompt of {len(toks)} tokens does not fit the context of {n_ctx}",
            requested=len(toks),
            n_ctx=n_ctx,
        )
    return toks


class SessionBase:
    """Resident state and call exclusion shared by the backends. A subclass keeps
    ``_tokens`` (the resident prompt) and ``_resident_identity`` current, or (the llama
    session, whose live sequence is one ``Computed`` value) overrides what reads ``_tokens``."""

    _tokens: list[int]
    _resident_identity: ContextIdentity | None

    def __init__(self) -> None:
        self._busy = threading.Lock()

    def stream(self, max_tokens: int = 256, *,
               lookup: int = 0) -> Generator[str, bool | None, GenerateResult]:
        raise NotImplementedError

    def generate(self, max_tokens: int = 256, *, lookup: int = 0) -> GenerateResult:
        """``stream`` run to its end (every backend decodes through its stream)."""
        return drain(self.stream(max_tokens=max_tokens, lookup=lookup))

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        """One engine call at a time: a second concurrent call is refused, never queued."""
        if not self._busy.acquire(blocking=False):
            raise InvalidSessionStateError(
                f"session busy: {what} called while another call runs", operation=what
            )
        try:
            yield
        finally:
            self._busy.release()

    @property
    def resident_tokens(self) -> list[int]:
        """The tokens whose KV the session holds for its next prefill (a copy)."""
        return list(self._tokens)

    @property
    def n_resident(self) -> int:
        return len(self._tokens)

    @property
    def reusable_resident(self) -> int:
        """How many leading resident tokens a later prefill may reuse (all, by default)."""
        return len(self._tokens)

    @property
    def resident_identity(self) -> ContextIdentity | None:
        return self._resident_identity

    @property
    def prompt_format_source(self) -> str | None:
        """Where the identity's prompt format came from (``contextasm.templates``); None where
        the backend does not say."""
        return None

    @property
    def remote_status(self) -> dict[str, Any] | None:
        """Remote backends: the endpoint, the session key and the server's last reported
        reuse (``contenox/status`` ``remote``); None in process."""
        return None

    @property
    def exact_reuse(self) -> dict[str, Any] | None:
        """How this session keeps warm == cold (the llama backend's schedule, measured at
        load); None where the backend does not say."""
        return None

    def _live_warm_prefix(self, tokens: Sequence[int], identity: ContextIdentity,
                          granularity: int) -> int:
        """The live sequence's part of ``warm_prefix``: the common prefix (none after an
        identity change), within the reusable resident tokens, in whole reuse blocks, never
        the last prompt token (its logits are computed again)."""
        if self._resident_identity is not None and self._resident_identity != identity:
            return 0
        return self._live_reusable(tokens, granularity)

    def _live_reusable(self, tokens: Sequence[int], granularity: int) -> int:
        """Of the live sequence, what a prefill of ``tokens`` keeps (identity aside): the
        common prefix within the reusable resident tokens, in whole reuse blocks, never the
        last prompt token. A backend with a finer rule overrides this."""
        n = min(common_prefix_length(self._tokens, tokens), self.reusable_resident,
                len(tokens) - 1)
        g = max(1, granularity)
        return max(0, n) // g * g


class WithoutSequenceState:
    """Snapshots and parked branches for a backend that has neither: each call is refused with
    ``UnsupportedCapabilityError`` (``why`` says what keeps prefixes warm instead)."""

    backend: str
    why_no_sequence_state: str = ""

    def _unsupported(self, capability: str) -> UnsupportedCapabilityError:
        return UnsupportedCapabilityError(
            f"the {self.backend} backend does not support {capability} "
            f"({self.why_no_sequence_state})",
            capability=capability,
            backend=self.backend,
        )

    def save_snapshot(self, path: str | Path) -> SnapshotResult:
        raise self._unsupported("snapshots")

    def load_snapshot(
        self, path: str | Path, expect_prefix: Sequence[int] | None = None
    ) -> SnapshotResult:
        raise self._unsupported("snapshots")

    def branch_save(self, name: str) -> BranchInfo:
        raise self._unsupported("branches")

    def branch_restore(self, name: str) -> BranchInfo:
        raise self._unsupported("branches")

    def branch_drop(self, name: str) -> None:
        raise self._unsupported("branches")

    def branches(self) -> list[BranchInfo]:
        return []
