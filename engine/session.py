"""The backend-independent session seam: what everything above the engine may call."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from contextasm.identity import ContextIdentity
from engine.errors import UnsupportedCapabilityError
from engine.fim import FimTokens
from engine.profile import Profile, load_profile
from engine.results import (
    BranchInfo,
    GenerateResult,
    PrefillResult,
    SessionMetrics,
    SnapshotResult,
)


@runtime_checkable
class Session(Protocol):
    """One model + one context, persistent across requests (see README "Engine")."""

    backend: str
    profile: Profile
    identity: ContextIdentity
    metrics: SessionMetrics

    @property
    def n_ctx(self) -> int: ...
    @property
    def bos_token_id(self) -> int | None: ...
    @property
    def tokenizer_digest(self) -> str: ...
    @property
    def resident_tokens(self) -> list[int]: ...
    @property
    def n_resident(self) -> int: ...
    @property
    def resident_identity(self) -> ContextIdentity | None: ...
    @property
    def reusable_resident(self) -> int:
        """How many leading resident tokens a later prefill may reuse at least (llama.cpp with
        exact reuse: those computed in whole chunks; a prompt that ends in the same partial
        chunk also reuses its whole tail pieces; generated tokens are recomputed)."""
        ...
    @property
    def capabilities(self) -> dict[str, bool]: ...
    @property
    def exact_reuse(self) -> dict[str, Any] | None: ...
    @property
    def remote_status(self) -> dict[str, Any] | None:
        """Remote backends: endpoint, session key, replica, the server's reported reuse."""
        ...
    @property
    def prompt_format_source(self) -> str | None: ...
    @property
    def fim_tokens(self) -> FimTokens | None:
        """The vocabulary's fill-in-the-middle tokens; None when it has none."""
        ...
    @property
    def model_description(self) -> str:
        """A short human name of the loaded model (for status displays)."""
        ...
    @property
    def reuse_granularity(self) -> int:
        """Prefix reuse happens in whole multiples of this many tokens (1: any position;
        OpenVINO's prefix cache shares whole KV blocks only)."""
        ...

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]: ...
    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str: ...
    def prefill(
        self, tokens: Sequence[int], identity: ContextIdentity | None = None
    ) -> PrefillResult: ...
    def generate(self, max_tokens: int = 256, *, lookup: int = 0) -> GenerateResult: ...
    def stream(self, max_tokens: int = 256, *,
               lookup: int = 0) -> Generator[str, bool | None, GenerateResult]:
        """Text pieces as tokens are decoded. ``lookup`` > 0 asks for prompt-lookup decoding
        (drafts of up to that many tokens verified per batch) where the backend has it (the
        llama backend, greedy sampling); the others decode token by token."""
        ...
    def cancel(self) -> None: ...
    def reset(self) -> None: ...
    def save_snapshot(self, path: str | Path) -> SnapshotResult: ...
    def load_snapshot(
        self, path: str | Path, expect_prefix: Sequence[int] | None = None
    ) -> SnapshotResult: ...
    def branch_save(self, name: str) -> BranchInfo: ...
    def branch_restore(self, name: str) -> BranchInfo: ...
    def branch_drop(self, name: str) -> None: ...
    def branches(self) -> list[BranchInfo]: ...
    def warm_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading tokens of ``tokens`` the next prefill would reuse, from the live
        sequence or a parked branch (no side effects)."""
        ...
    def close(self) -> None: ...
    def __enter__(self) -> Session: ...
    def __exit__(self, *exc: object) -> None: ...


def reusable_prefix(session: Session, common: int) -> int:
    """Of ``common`` leading tokens equal to the resident ones, how many the next prefill
    reuses on this session (rounded down to its reuse granularity). The end of a prompt may be
    recomputed besides: the last token always, and under the invariant exact-reuse schedule
    its last ``minBatch`` tokens (``Session.exact_reuse``)."""
    g = max(1, session.reuse_granularity)
    return min(common, session.reusable_resident) // g * g


def open_session(profile: Profile | None = None) -> Session:
    """Load the profile's model and create its context once; use as a context manager."""
    profile = profile or load_profile(None)
    if profile.backend == "llama":
        from engine.llama.session import LlamaSession

        return LlamaSession.open(profile)
    if profile.backend == "openvino":
        from engine.openvino.session import OpenVinoSession

        return OpenVinoSession.open(profile)
    if profile.backend == "llama-server":
        from engine.remote.llama_server import LlamaServerSession

        return LlamaServerSession.open(profile)
    if profile.backend == "openai":
        from engine.remote.openai_compat import OpenAiSession

        return OpenAiSession.open(profile)
    raise UnsupportedCapabilityError(
        f"backend {profile.backend!r} is not available in this build", backend=profile.backend
    )
