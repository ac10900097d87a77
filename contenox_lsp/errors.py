"""Mapping of engine / assembly errors to JSON-RPC errors.

Engine and context-assembly errors carry a stable ``code`` string and a ``data`` dict. They
become JSON-RPC errors in the server-defined range (-32099..-32000), one number per code, with
``data = {"code": <stable string>, **data}`` so clients can branch on the string.
"""

from __future__ import annotations

from typing import Any

from pygls.exceptions import JsonRpcException


class RequestCancelled(Exception):
    """The engine job behind a request was cancelled by something other than the client."""


#: Stable string code → JSON-RPC error number (server-defined range).
ERROR_NUMBERS: dict[str, int] = {
    "engine_error": -32000,
    "context_overflow": -32001,
    "batch_too_large": -32002,
    "cancelled": -32003,  # engine-side cancel not caused by $/cancelRequest
    "model_not_found": -32004,
    "unsupported_capability": -32005,
    "invalid_session_state": -32006,
    "profile_mismatch": -32007,
    "snapshot_corrupt": -32008,
    "snapshot_incompatible": -32009,
    "decode_failed": -32010,
    "context_error": -32020,
    "unknown_prompt_format": -32021,
    "invalid_input": -32022,
    "tokenizer_mismatch": -32023,
    "invalid_manifest": -32024,
    "snapshot_store": -32025,
    "index_error": -32030,
    "engine_unavailable": -32040,
    "remote_unavailable": -32041,  # the llama-server backend's server (docs/remote.md)
    "remote_timeout": -32042,
    "remote_error": -32043,
    "invalid_params": -32602,  # JSON-RPC InvalidParams: bad input, not a server fault
}


class InputError(Exception):
    """Bad input from a user or a client (a missing folder, a file outside the workspace):
    the same ``code``/``message``/``data`` shape as the engine's errors, without being one."""

    code = "invalid_params"

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": _jsonable(self.data)}


class ServerError(JsonRpcException):
    """A JSON-RPC error in the server-defined range with a stable string code in ``data``."""

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None) -> None:
        number = ERROR_NUMBERS.get(code, ERROR_NUMBERS["engine_error"])
        payload: dict[str, Any] = {"code": code}
        payload.update(_jsonable(data or {}))
        super().__init__(message=message, code=number, data=payload)
        self.stable_code = code


def from_exception(exc: BaseException) -> ServerError | None:
    """A ServerError for any exception that carries ``.code`` (str) and ``.data`` (dict)."""
    code = getattr(exc, "code", None)
    if not isinstance(code, str):
        return None
    data = getattr(exc, "data", None)
    message = getattr(exc, "message", None) or str(exc) or code
    return ServerError(code, str(message), data if isinstance(data, dict) else None)


def _jsonable(value: Any) -> Any:
    """Best effort: keep JSON types, stringify the rest (error data must serialize)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)
