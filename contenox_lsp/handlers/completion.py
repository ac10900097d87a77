"""``textDocument/inlineCompletion`` (LSP 3.18) and the ``contenox.acceptCompletion`` command.

Params arrive as raw JSON (see ``protocol.RAW_PARAMS``) so that the non-standard fields
Copilot's language server takes (``textDocument.version``, ``formattingOptions``) survive:
a ``version`` older than the server's copy of the document gets an empty list, never a
completion for old text.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types

from contenox_lsp import params as P
from contenox_lsp.completion.window import At, CursorWindow, cursor_window
from contenox_lsp.documents import open_document
from contenox_lsp.handlers.common import run_cancellable, single_arg
from contenox_lsp.server import ContenoxServer

INLINE_COMPLETION = types.TEXT_DOCUMENT_INLINE_COMPLETION
CMD_ACCEPT = "contenox.acceptCompletion"
CMD_ACCEPT_NEXT_EDIT = "contenox.acceptNextEdit"  # an insertion offered as a completion

EMPTY: dict[str, Any] = {"items": []}


@dataclass(frozen=True)
class DocumentRequest:
    """A checked ``{textDocument: {uri, version?}, position, context?}`` request: the open
    document and whether the client's ``version`` is the server's (else: an empty answer)."""

    uri: str
    path: Path
    doc: Any  # pygls TextDocument
    pos: types.Position
    current: bool


def document_request(ls: ContenoxServer, params: Any, method: str) -> DocumentRequest:
    """Checks the params of a request at a position of an open document (inline completion,
    next edit): InvalidParams for an unknown or outside document or a position outside it."""
    p = P.as_object(params, method, allow_none=False)
    uri = P.text_document_uri(p, "params", required=True)
    assert uri is not None
    version = P.opt_int(p["textDocument"], "version", "params.textDocument", -(2**31),
                        2**31 - 1)
    pos = P.position(p.get("position"), "params.position")
    context = p.get("context")
    if context is not None:
        if not isinstance(context, dict):
            raise P.invalid("params.context must be an object {triggerKind}")
        P.opt_int(context, "triggerKind", "params.context", 1, 2)
    path = ls.checked_path(uri)
    doc = open_document(ls.workspace, path)
    if doc is None:
        raise P.invalid(f"{uri} is not open")
    lines = doc.lines
    line_text = lines[pos.line].rstrip("\r\n") if pos.line < len(lines) else ""
    if pos.line > len(lines) or (pos.line == len(lines) and pos.character > 0):
        raise P.invalid(f"params.position.line {pos.line} is outside the document")
    units = ls.workspace.position_codec.client_num_units(line_text)
    if pos.character > units:
        raise P.invalid(f"params.position.character {pos.character} is past the end of line "
                        f"{pos.line}")
    return DocumentRequest(uri, path, doc, pos, version is None or version == doc.version)


async def inline_completion(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    req = document_request(ls, params, INLINE_COMPLETION)
    doc, pos = req.doc, req.pos
    if not req.current:
        return EMPTY  # the document changed since the client asked: no completion for old text
    rt = ls.runtime
    if rt is None or not rt.model_ready:
        return EMPTY  # the model is loading: nothing, not an error
    rt.cursor_at(req.path, pos.line)  # where the user is: the idle prefill warms the ask there
    win, previous_line = _window(ls, doc.source, doc.lines, pos.line, pos.character)
    at = At(req.uri, doc.version, pos.line, pos.character)
    offer = await run_cancellable(ls, rt.inline_completion(at, win, previous_line, t0,
                                                            req.path))
    if offer is None:
        return EMPTY
    return _items(offer.text, offer.id, pos, CMD_ACCEPT_NEXT_EDIT if offer.next_edit
                  else CMD_ACCEPT)


async def accept_completion(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    arg = single_arg(args, CMD_ACCEPT)
    completion_id = P.opt_int(arg, "id", "arguments[0]", 0, 2**31 - 1)
    if completion_id is None:
        raise P.invalid("arguments[0].id is required")
    length = P.opt_int(arg, "acceptedLength", "arguments[0]", 0, 2**31 - 1)
    rt = ls.runtime
    counted = rt is not None and rt.completion_accepted(completion_id, length)
    return {"counted": counted}


def speculate_after_edit(ls: ContenoxServer, path: Path,
                         params: types.DidChangeTextDocumentParams) -> None:
    """A keystroke: what was speculated is stale. While the user types with completions on,
    the completion at the cursor a single insertion leaves starts in the background, so the
    request the editor sends after its debounce finds it done or under way."""
    rt = ls.runtime
    if rt is None or not rt.model_ready:
        return
    at, win = _typed_cursor(ls, path, params) if rt.typing_completions else (None, None)
    rt.speculate_completion(path, at, win)


def _typed_cursor(ls: ContenoxServer, path: Path, params: types.DidChangeTextDocumentParams,
                  ) -> tuple[At | None, CursorWindow | None]:
    """Where the one insertion of ``params`` leaves the cursor, and the window there."""
    changes = params.content_changes
    if len(changes) != 1 or not isinstance(changes[0], types.TextDocumentContentChangePartial):
        return None, None
    change = changes[0]
    doc = open_document(ls.workspace, path)
    if doc is None:
        return None, None
    units = ls.workspace.position_codec.client_num_units
    inserted = change.text.split("\n")
    line = change.range.start.line + len(inserted) - 1
    character = units(inserted[-1]) + (change.range.start.character if len(inserted) == 1
                                       else 0)
    lines = doc.lines
    if line >= len(lines) or character > units(lines[line].rstrip("\r\n")):
        return None, None
    win, _ = _window(ls, doc.source, lines, line, character)
    return At(params.text_document.uri, doc.version, line, character), win


def _window(ls: ContenoxServer, source: str, lines: Sequence[str], line: int,
            character: int) -> tuple[CursorWindow, str | None]:
    """The completion window at ``line``/``character`` (client units) and the line above."""
    line_text = lines[line].rstrip("\r\n") if line < len(lines) else ""
    win = cursor_window(source, line, column(ls, line_text, character))
    previous_line = lines[line - 1].rstrip("\r\n") if line > 0 else None
    return win, previous_line


def column(ls: ContenoxServer, line_text: str, character: int) -> int:
    """The client's ``character`` (in the negotiated encoding's units) as a str index."""
    codec = ls.workspace.position_codec
    pos = codec.position_from_client_units([line_text], types.Position(line=0,
                                                                       character=character))
    return pos.character


def _items(text: str, item_id: int, pos: types.Position,
           command: str = CMD_ACCEPT) -> dict[str, Any]:
    at = {"line": pos.line, "character": pos.character}
    return {"items": [{
        "insertText": text,
        "range": {"start": at, "end": at},
        "command": {"title": "Accept completion", "command": command,
                    "arguments": [{"id": item_id}]},
    }]}
