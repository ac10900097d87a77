"""What several handlers share: the runtime guard, cancellable requests, the user turn of a
request, and pins (a request and a command each)."""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled

from contenox_lsp import params as P
from contenox_lsp.documents import open_document, text_in_range, uri_for
from contenox_lsp.errors import RequestCancelled, ServerError
from contenox_lsp.pins import Pin, pin_for
from contenox_lsp.runtime import Runtime
from contenox_lsp.server import ContenoxServer
from contenox_lsp.turn import TurnSpec, line_span, read_disk, turn_at

T = TypeVar("T")


def runtime(ls: ContenoxServer) -> Runtime:
    rt = ls.runtime
    if rt is None:
        raise ServerError("invalid_session_state", "the server is not initialized")
    return rt


async def run_cancellable(ls: ContenoxServer, work: Awaitable[T]) -> T:
    """Await ``work`` as the current request's work, cancellable by $/cancelRequest.

    A client cancel cancels this task (pygls or our protocol hook), which cancels the engine
    job; pygls then answers RequestCancelled (-32800).
    """
    msg_id = ls.track()
    try:
        return await work
    except RequestCancelled as exc:
        raise JsonRpcRequestCancelled(message=f"Request cancelled: {exc}") from exc
    finally:
        ls.untrack(msg_id)


def single_arg(args: tuple[Any, ...], cmd: str) -> dict[str, Any]:
    """The one argument object of a ``workspace/executeCommand`` command."""
    if len(args) != 1 or not isinstance(args[0], dict):
        raise P.invalid(f"{cmd} expects one argument object, got {len(args)} arguments")
    return args[0]


def text_of(ls: ContenoxServer, path: Path) -> str | None:
    """The text the developer sees: the open buffer, else the file on disk."""
    doc = open_document(ls.workspace, path)
    return doc.source if doc is not None else read_disk(path)


def turn_for(
    ls: ContenoxServer,
    path: Path | None,
    rng: types.Range | None,
    pos: types.Position | None,
    question: str,
    outputs: tuple[tuple[str, str, str], ...] = (),
) -> TurnSpec:
    """The user turn for a question about ``path`` (selection ``rng`` / cursor ``pos``)."""
    if path is None:
        return TurnSpec(question=question, outputs=outputs)
    doc = open_document(ls.workspace, path)
    text = doc.source if doc is not None else read_disk(path)
    selection = None
    if rng is not None and rng.start != rng.end:
        if doc is not None:
            selection = text_in_range(doc, rng)
        elif text is not None:
            selection = line_span(text, rng.start.line, rng.end.line)
    return turn_at(ls.roots(), path, question, text=text,
                   line=None if pos is None else pos.line, selection=selection,
                   outputs=outputs)


async def add_pin(ls: ContenoxServer, uri: str, rng: types.Range | None) -> dict[str, Any]:
    """Pin ``uri`` (whole lines of ``rng``, or the whole file): ``contenox/pin`` and the
    pin command."""
    path = ls.checked_path(uri)
    if not path.is_file() and open_document(ls.workspace, path) is None:
        raise P.invalid(f"{uri} is not a file")
    entry = pin_for(path, uri_for(path), rng)
    added = ls.pins.add(entry)
    if added:
        runtime(ls).inputs_changed()
    return {"pinned": added, "pin": (await pins_view(ls, [entry]))[0]}


def remove_pins(ls: ContenoxServer, uri: str, rng: types.Range | None) -> dict[str, Any]:
    """Unpin ``uri`` (the pins ``rng`` touches, or all of the file's): ``contenox/unpin`` and
    the unpin command."""
    removed = ls.pins.remove(ls.checked_path(uri), rng)
    if removed:
        runtime(ls).inputs_changed()
    return {"removed": removed}


async def pins_view(ls: ContenoxServer, pins: list[Pin]) -> list[dict[str, Any]]:
    bodies: list[str | None] = []
    for pin in pins:
        body = text_of(ls, pin.path)
        if body is not None and pin.start_line is not None and pin.end_line is not None:
            body = line_span(body, pin.start_line, pin.end_line)
        bodies.append(body)
    counts = await runtime(ls).token_counts(bodies)
    out = []
    for pin, n in zip(pins, counts, strict=True):
        pin_range = pin.range()
        out.append({
            "uri": pin.uri,
            "range": None if pin_range is None else {
                "start": {"line": pin_range.start.line, "character": 0},
                "end": {"line": pin_range.end.line, "character": 0},
            },
            "label": pin.label,
            "tokens": n,
        })
    return out
