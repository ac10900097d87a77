"""Model runtime: profiles, persistent sessions with prefix reuse, snapshots, structured errors.

The public seam::

    from engine import load_profile, open_session
    with open_session(load_profile(None)) as s:
        r = s.prefill(s.tokenize("...", add_bos=True))
        g = s.generate(max_tokens=16)
"""

from __future__ import annotations

from engine.errors import (
    BatchTooLargeError,
    CancelledError,
    ContextOverflowError,
    DecodeFailedError,
    DecodeFatalError,
    EngineError,
    InvalidBatchError,
    InvalidSessionStateError,
    ModelLoadError,
    ModelNotFoundError,
    NoKvSlotError,
    ProfileError,
    ProfileMismatchError,
    SnapshotCorruptError,
    SnapshotIncompatibleError,
    UnsupportedCapabilityError,
)
from engine.profile import EMBEDDED_MODEL, Profile, default_profile, load_profile
from engine.results import (
    BranchInfo,
    GenerateResult,
    PrefillResult,
    SessionMetrics,
    SnapshotResult,
    drain,
)
from engine.session import Session, open_session, reusable_prefix

__all__ = [
    "EMBEDDED_MODEL",
    "BatchTooLargeError",
    "BranchInfo",
    "CancelledError",
    "ContextOverflowError",
    "DecodeFailedError",
    "DecodeFatalError",
    "EngineError",
    "GenerateResult",
    "InvalidBatchError",
    "InvalidSessionStateError",
    "ModelLoadError",
    "ModelNotFoundError",
    "NoKvSlotError",
    "PrefillResult",
    "Profile",
    "ProfileError",
    "ProfileMismatchError",
    "Session",
    "SessionMetrics",
    "SnapshotCorruptError",
    "SnapshotIncompatibleError",
    "SnapshotResult",
    "UnsupportedCapabilityError",
    "default_profile",
    "drain",
    "load_profile",
    "open_session",
    "reusable_prefix",
]
