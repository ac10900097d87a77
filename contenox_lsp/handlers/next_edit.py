"""``contenox/nextEdit`` and its Copilot-named aliases, and the accept/reject commands.

The request and answer are shaped like Copilot's ``textDocument/copilotInlineEdit`` (which is
served too, with the ``textDocument/didShowInlineEdit`` notification), so clients written for
it work unchanged. The same rules as inline completion: cancel-previous, a stale ``version``
gets an empty list, an empty list while the model loads, InvalidParams for bad positions.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from contenox_lsp import params as P
from contenox_lsp.handlers.common import run_cancellable, single_arg
from contenox_lsp.handlers.completion import column, document_request
from contenox_lsp.next_edit.layout import Layout
from contenox_lsp.server import ContenoxServer

NEXT_EDIT = "contenox/nextEdit"
COPILOT_INLINE_EDIT = "textDocument/copilotInlineEdit"
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
CMD_ACCEPT = "contenox.acceptNextEdit"
CMD_REJECT = "contenox.rejectNextEdit"


def _empty() -> dict[str, Any]:
    return {"edits": []}


async def next_edit(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    req = document_request(ls, params, NEXT_EDIT)
    include_prompt = params.get("includePrompt") if isinstance(params, dict) else None
    if include_prompt is not None and not isinstance(include_prompt, bool):
        raise P.invalid("params.includePrompt must be a boolean")
    if not req.current:
        return _empty()  # the document changed since the client asked
    rt = ls.runtime
    if rt is None or not rt.model_ready:
        return _empty()  # the model is loading: nothing, not an error
    doc, pos = req.doc, req.pos
    lines = doc.lines
    line_text = lines[pos.line].rstrip("\r\n") if pos.line < len(lines) else ""
    found, layout = await run_cancellable(ls, rt.next_edit_at(
        req.path, doc.source, pos.line, column(ls, line_text, pos.character), doc.version))
    out = _empty()
    if include_prompt and layout is not None:
        out["prompt"] = _prompt_view(layout)
    if found is None:
        return out
    codec = ls.workspace.position_codec
    rng = codec.range_to_client_units(lines, types.Range(
        start=types.Position(line=found.replacement.start[0],
                             character=found.replacement.start[1]),
        end=types.Position(line=found.replacement.end[0], character=found.replacement.end[1])))
    out["edits"] = [{
        "text": found.replacement.text,
        "textDocument": {"uri": req.uri, "version": doc.version},
        "range": {"start": {"line": rng.start.line, "character": rng.start.character},
                  "end": {"line": rng.end.line, "character": rng.end.character}},
        "command": {"title": "Accept next edit", "command": CMD_ACCEPT,
                    "arguments": [{"id": found.id}]},
    }]
    return out


def _prompt_view(layout: Layout) -> dict[str, Any]:
    """The prompt the model saw, in its three parts (``includePrompt``: for benchmarks and
    debugging): each a list of ``[text, special]`` pieces."""
    return {"stable": [list(p) for p in layout.stable],
            "history": [list(p) for p in layout.history],
            "region": [list(p) for p in layout.region]}


def did_show_inline_edit(ls: ContenoxServer, params: Any) -> None:
    """Copilot's notification that an edit was shown (counted; never an error)."""
    rt = ls.runtime
    if rt is not None:
        rt.next_edit_shown()


async def accept_next_edit(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    return _decide(ls, args, CMD_ACCEPT, accepted=True)


async def reject_next_edit(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    return _decide(ls, args, CMD_REJECT, accepted=False)


def _decide(ls: ContenoxServer, args: tuple[Any, ...], cmd: str,
            accepted: bool) -> dict[str, Any]:
    arg = single_arg(args, cmd)
    suggestion_id = P.opt_int(arg, "id", "arguments[0]", 0, 2**31 - 1)
    if suggestion_id is None:
        raise P.invalid("arguments[0].id is required")
    rt = ls.runtime
    counted = rt is not None and rt.next_edit_decided(suggestion_id, accepted)
    return {"counted": counted}
