"""The ``contenox/*`` requests (the public contract, documented in PROTOCOL.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from contenox_lsp import params as P
from contenox_lsp.documents import encoding_name, open_document
from contenox_lsp.handlers.common import (
    add_pin,
    pins_view,
    remove_pins,
    run_cancellable,
    runtime,
    turn_for,
)
from contenox_lsp.progress import WorkDone, send_partial_result
from contenox_lsp.runtime import Runtime
from contenox_lsp.server import ContenoxServer
from contenox_lsp.turn import TurnSpec
from contenox_lsp.views import explain_view

EXPLAIN_CONTEXT = "contenox/explainContext"
ASK = "contenox/ask"
PIN = "contenox/pin"
UNPIN = "contenox/unpin"
LIST_PINS = "contenox/listPins"
STATUS = "contenox/status"
SNAPSHOT = "contenox/snapshot"
DOCUMENT = "contenox/document"
CONVERSATION = "contenox/conversation"


def conversation_id(p: dict[str, Any]) -> str | None:
    cid = P.opt_str(p, "conversationId", "params")
    if cid is not None and not 0 < len(cid) <= P.MAX_CONVERSATION_ID_CHARS:
        raise P.invalid("params.conversationId must be 1 to "
                        f"{P.MAX_CONVERSATION_ID_CHARS} characters")
    return cid


def with_conversation(turn: TurnSpec, rt: Runtime, cid: str | None) -> TurnSpec:
    """The turn with the conversation's earlier turns in front of it (segment H)."""
    if cid is None:
        return turn
    return replace(turn, outputs=rt.conversation_outputs(cid) + turn.outputs)


async def explain_context(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, EXPLAIN_CONTEXT)
    uri = P.text_document_uri(p, "params", required=False)
    pos = P.opt_position(p, "position", "params")
    question = P.opt_str(p, "question", "params") or ""
    include_text = p.get("includeText")
    if include_text is None:  # every field may be null (PROTOCOL.md)
        include_text = False
    if not isinstance(include_text, bool):
        raise P.invalid("params.includeText must be a boolean")
    cid = conversation_id(p)
    outputs = P.outputs(p, "outputs", "params")
    path = ls.checked_path(uri) if uri else None
    rt = runtime(ls)
    turn = with_conversation(turn_for(ls, path, None, pos, question, outputs), rt, cid)
    session = await rt.session()
    assembly = await rt.assemble(turn)
    return explain_view(assembly, session, rt.resident_tokens(), include_text=include_text,
                        question_code_bound=rt.question_code_bound(),
                        budget=rt.context_budget(), index=rt.index_view())


async def ask(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, ASK, allow_none=False)
    question = P.req_str(p, "question", "params")
    uri = P.text_document_uri(p, "params", required=False)
    rng = P.opt_range(p, "range", "params")
    max_tokens = P.opt_int(p, "maxTokens", "params", 1, 4096)
    partial = P.progress_token(p, "partialResultToken", "params")
    work_token = P.progress_token(p, "workDoneToken", "params")
    cid = conversation_id(p)
    outputs = P.outputs(p, "outputs", "params")
    if rng is not None and uri is None:
        raise P.invalid("params.range needs params.textDocument")
    path = ls.checked_path(uri) if uri else None
    rt = runtime(ls)
    turn = with_conversation(
        turn_for(ls, path, rng, rng.start if rng else None, question, outputs), rt, cid)
    on_piece: Callable[[str], None] | None = None
    if partial is not None:
        loop = asyncio.get_running_loop()
        token = partial

        def on_piece(piece: str) -> None:
            send_partial_result(ls, loop, token, {"text": piece})

    work = WorkDone(ls, work_token) if work_token is not None else None
    out = await run_cancellable(
        ls, rt.run_prompt(turn, max_tokens or ls.options.max_tokens, on_piece, work)
    )
    if path is not None and rng is not None and rng.start == rng.end:
        rt.cursor_at(path, rng.start.line)
    if cid is not None:
        # Only a finished answer joins the conversation (a cancelled ask raised above).
        n = await rt.conversation_append(cid, question, out["text"])
        out = {**out, "conversationId": cid, "turn": n}
        rt.inputs_changed()  # the idle prefill now warms this conversation's turns
    return out


async def pin(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, PIN, allow_none=False)
    return await add_pin(ls, P.req_str(p, "uri", "params"), P.opt_range(p, "range", "params"))


async def unpin(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, UNPIN, allow_none=False)
    return remove_pins(ls, P.req_str(p, "uri", "params"), P.opt_range(p, "range", "params"))


async def list_pins(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    P.as_object(params, LIST_PINS)
    return {"pins": await pins_view(ls, ls.pins.list())}


async def status(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    P.as_object(params, STATUS)
    return status_view(ls.runtime)


async def document(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    """The server's copy of an open document (to check sync; used by tests and editors)."""
    p = P.as_object(params, DOCUMENT, allow_none=False)
    uri = P.text_document_uri(p, "params", required=True)
    assert uri is not None
    path = ls.checked_path(uri)
    doc = open_document(ls.workspace, path)
    if doc is None:
        raise P.invalid(f"{uri} is not open")
    return {
        "uri": doc.uri,
        "version": doc.version,
        "text": doc.source,
        "positionEncoding": encoding_name(ls.workspace),
    }


async def snapshot(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, SNAPSHOT, allow_none=False)
    action = P.opt_choice(p, "action", "params", ("save", "load", "list", "clear"))
    if action is None:
        raise P.invalid("params.action is required: 'save', 'load', 'list' or 'clear'")
    name = P.opt_str(p, "name", "params")
    return await run_cancellable(ls, runtime(ls).snapshot(action, name))


async def conversation(ls: ContenoxServer, params: Any) -> dict[str, Any]:
    p = P.as_object(params, CONVERSATION, allow_none=False)
    action = P.opt_choice(p, "action", "params", ("list", "clear"))
    if action is None:
        raise P.invalid("params.action is required: 'list' or 'clear'")
    cid = conversation_id(p)
    rt = runtime(ls)
    if action == "list":
        return rt.conversation_view(cid)
    removed = await rt.conversation_clear(cid)
    if removed:
        rt.inputs_changed()
    return {"removed": removed}


#: Every ``contenox/*`` request and its handler (PROTOCOL.md documents each one).
REQUESTS = {
    EXPLAIN_CONTEXT: explain_context,
    ASK: ask,
    PIN: pin,
    UNPIN: unpin,
    LIST_PINS: list_pins,
    STATUS: status,
    DOCUMENT: document,
    SNAPSHOT: snapshot,
    CONVERSATION: conversation,
}


def status_view(rt: Runtime | None) -> dict[str, Any]:
    if rt is None:
        return {"state": "cold", "model": None, "backend": None, "profileId": None,
                "residentTokens": 0, "pendingPrefillTokens": 0, "lastRequest": None,
                "index": {"state": "idle", "files": 0}}
    return rt.status()
