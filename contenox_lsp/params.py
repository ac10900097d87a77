"""Validation of raw request params.

Custom ``contenox/*`` requests reach the handlers as plain JSON values (pygls has no type
for them), so every field is checked here and a readable InvalidParams (-32602) is raised
for anything malformed, instead of a crash or a silent drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from contextasm.inputs import TOOL_OUTPUT_KINDS

UINT_MAX = 2**31 - 1
#: The longest ``conversationId`` a request may name (a stored conversation's too).
MAX_CONVERSATION_ID_CHARS = 200
#: ``outputs`` of a request: at most this many entries, each at most this many characters.
MAX_OUTPUTS = 8
MAX_OUTPUT_CHARS = 200_000
#: The kinds an output of a request may have (segment H).
REQUEST_OUTPUT_KINDS = TOOL_OUTPUT_KINDS


def invalid(message: str) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(message=f"Invalid params: {message}")


def as_object(params: Any, method: str, *, allow_none: bool = True) -> dict[str, Any]:
    """The params object of ``method``; ``null``/absent is an empty object when allowed."""
    if params is None and allow_none:
        return {}
    if not isinstance(params, dict):
        raise invalid(f"{method} expects an object, got {_json_type(params)}")
    return params


def req_str(d: dict[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise invalid(f"{where}.{key} must be a non-empty string")
    return v


def opt_str(d: dict[str, Any], key: str, where: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise invalid(f"{where}.{key} must be a string")
    return v


def opt_int(d: dict[str, Any], key: str, where: str, lo: int, hi: int) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise invalid(f"{where}.{key} must be an integer between {lo} and {hi}")
    return v


def opt_choice(d: dict[str, Any], key: str, where: str, choices: tuple[str, ...]) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if v not in choices:
        raise invalid(f"{where}.{key} must be one of {', '.join(repr(c) for c in choices)}")
    return str(v)


def outputs(d: dict[str, Any], key: str, where: str) -> tuple[tuple[str, str, str], ...]:
    """``[{kind, source?, text}]`` → ``(kind, source, text)`` tuples (segment H); absent or
    null is none."""
    v = d.get(key)
    if v is None:
        return ()
    if not isinstance(v, list):
        raise invalid(f"{where}.{key} must be an array of {{kind, source?, text}}")
    if len(v) > MAX_OUTPUTS:
        raise invalid(f"{where}.{key} has {len(v)} entries; at most {MAX_OUTPUTS}")
    out: list[tuple[str, str, str]] = []
    for i, item in enumerate(v):
        at = f"{where}.{key}[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"{at} must be an object {{kind, source?, text}}")
        kind = opt_choice(item, "kind", at, REQUEST_OUTPUT_KINDS)
        if kind is None:
            raise invalid(f"{at}.kind must be one of "
                          f"{', '.join(repr(c) for c in REQUEST_OUTPUT_KINDS)}")
        text = item.get("text")
        if not isinstance(text, str):
            raise invalid(f"{at}.text must be a string")
        if len(text) > MAX_OUTPUT_CHARS:
            raise invalid(f"{at}.text has {len(text)} characters; at most {MAX_OUTPUT_CHARS}")
        source = opt_str(item, "source", at)
        out.append((kind, source.strip() if source and source.strip() else "request", text))
    return tuple(out)


def position(v: Any, where: str) -> types.Position:
    if not isinstance(v, dict):
        raise invalid(f"{where} must be a Position object {{line, character}}")
    line, char = v.get("line"), v.get("character")
    for name, x in (("line", line), ("character", char)):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= UINT_MAX:
            raise invalid(f"{where}.{name} must be a non-negative integer")
    assert isinstance(line, int) and isinstance(char, int)
    return types.Position(line=line, character=char)


def range_(v: Any, where: str) -> types.Range:
    if not isinstance(v, dict):
        raise invalid(f"{where} must be a Range object {{start, end}}")
    start = position(v.get("start"), f"{where}.start")
    end = position(v.get("end"), f"{where}.end")
    if (end.line, end.character) < (start.line, start.character):
        raise invalid(f"{where}.end is before {where}.start")
    return types.Range(start=start, end=end)


def opt_range(d: dict[str, Any], key: str, where: str) -> types.Range | None:
    v = d.get(key)
    return None if v is None else range_(v, f"{where}.{key}")


def opt_position(d: dict[str, Any], key: str, where: str) -> types.Position | None:
    v = d.get(key)
    return None if v is None else position(v, f"{where}.{key}")


def text_document_uri(d: dict[str, Any], where: str, *, required: bool) -> str | None:
    """``{textDocument: {uri}}`` → the uri (or None when absent and optional)."""
    td = d.get("textDocument")
    if td is None:
        if required:
            raise invalid(f"{where}.textDocument is required")
        return None
    if not isinstance(td, dict):
        raise invalid(f"{where}.textDocument must be an object {{uri}}")
    return req_str(td, "uri", f"{where}.textDocument")


def progress_token(d: dict[str, Any], key: str, where: str) -> int | str | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise invalid(f"{where}.{key} must be an integer or a string")
    return v


@dataclass(frozen=True)
class DiagnosticArg:
    """The subset of an LSP Diagnostic the fix action needs."""

    range: types.Range
    message: str
    source: str | None = None
    code: str | None = None


def diagnostic(v: Any, where: str) -> DiagnosticArg:
    if not isinstance(v, dict):
        raise invalid(f"{where} must be a Diagnostic object")
    rng = range_(v.get("range"), f"{where}.range")
    msg = req_str(v, "message", where)
    src = opt_str(v, "source", where)
    code = v.get("code")
    if code is not None and not isinstance(code, str | int):
        raise invalid(f"{where}.code must be a string or an integer")
    return DiagnosticArg(rng, msg, src, None if code is None else str(code))


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return type(v).__name__
