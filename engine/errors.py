"""Structured engine errors: one class per failure, each with a stable ``code`` and a ``data`` dict.

They cross the LSP boundary as JSON-RPC errors (the server puts ``code`` and ``data`` into the
error's ``data`` field), so ``code`` strings are a public contract: add new ones, never rename.
"""

from __future__ import annotations

from typing import Any, ClassVar


class EngineError(Exception):
    """Base of every error raised through the engine seam."""

    code: ClassVar[str] = "engine_error"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = data

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": dict(self.data)}


class ProfileError(EngineError):
    """A profile file is unreadable, has an unknown key or an invalid value."""

    code = "invalid_profile"


class ModelNotFoundError(EngineError):
    code = "model_not_found"


class ModelLoadError(EngineError):
    """The file exists but llama.cpp (or another backend) could not load it."""

    code = "model_load_failed"


class ContextOverflowError(EngineError):
    """The request needs more positions than the context holds; raised before any decode."""

    code = "context_overflow"


class BatchTooLargeError(EngineError):
    code = "batch_too_large"


class CancelledError(EngineError):
    """``cancel()`` stopped a prefill or decode; committed tokens stay resident."""

    code = "cancelled"


class NoKvSlotError(EngineError):
    """llama_decode returned 1: no free KV cells for the batch (state rolled back)."""

    code = "no_kv_slot"


class InvalidBatchError(EngineError):
    """llama_decode returned -1, or the tokens are not valid ids of this vocabulary."""

    code = "invalid_batch"


class DecodeFailedError(EngineError):
    """llama_decode returned a status this engine does not know; state rolled back."""

    code = "decode_failed"


class DecodeFatalError(EngineError):
    """llama_decode returned < -1; the context is freed and rebuilt on the next request."""

    code = "decode_fatal"


class UnsupportedCapabilityError(EngineError):
    code = "unsupported_capability"


class InvalidSessionStateError(EngineError):
    code = "invalid_session_state"


class ProfileMismatchError(EngineError):
    code = "profile_mismatch"


class SnapshotCorruptError(EngineError):
    """The file is truncated, not a snapshot, or fails its checksum; nothing was loaded."""

    code = "snapshot_corrupt"


class SnapshotIncompatibleError(EngineError):
    """A valid snapshot made under another identity (model, tokenizer, profile...)."""

    code = "snapshot_incompatible"



class RemoteUnavailableError(EngineError):
    """The inference server cannot be reached, or the connection broke mid-request."""

    code = "remote_unavailable"


class RemoteTimeoutError(EngineError):
    """The inference server did not answer within the profile's ``remote.timeout_s``."""

    code = "remote_timeout"


class RemoteError(EngineError):
    """The inference server answered with an error status or something unreadable."""

    code = "remote_error"
