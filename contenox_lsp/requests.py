"""The ``contenox/*`` requests (the public contract, documented in PROTOCOL.md)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled

from contenox_lsp import params as P
from contenox_lsp.context import TurnSpec
from contenox_lsp.documents import (
    encoding_name,
    line_span,
    open_document,
    read_disk,
    text_in_range,
    uri_for,
)
from contenox_lsp.errors import ServerError
from contenox_lsp.pins import pin_for
from contenox_lsp.progress import WorkDone, send_partial_result
from contenox_lsp.runtime import RequestCancelled, Runtime
from engine.session import reusable_prefix

if TYPE_CHECKING:
    from contenox_lsp.server import ContenoxServer

logger = logging.getLogger(__name__)

EXPLAIN_CONTEXT = "contenox/explainContext"
ASK = "contenox/ask"
PIN = "contenox/pin"
UNPIN = "contenox/unpin"
LIST_PINS = "contenox/listPins"
STATUS = "contenox/status"
SNAPSHOT = "contenox/snapshot"
DOCUMENT = "contenox/document"

#: Lines of code around the cursor sent as cursor context.
CURSOR_CONTEXT_LINES = 8


def runtime(ls: ContenoxServer) -> Runtime:
    rt = ls.runtime
    if rt is None:
        raise ServerError("invalid_session_state", "the server is not initialized")
    assert isinstance(rt, Runtime)
    return rt


def register(server: ContenoxServer) -> None:
    @server.feature(EXPLAIN_CONTEXT)
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
        path = ls.checked_path(uri) if uri else None
        turn = turn_for(ls, path, None, pos, question)
        return await explain(runtime(ls), turn, include_text)

    @server.feature(ASK)
    async def ask(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        p = P.as_object(params, ASK, allow_none=False)
        question = P.req_str(p, "question", "params")
        uri = P.text_document_uri(p, "params", required=False)
        rng = P.opt_range(p, "range", "params")
        max_tokens = P.opt_int(p, "maxTokens", "params", 1, 4096)
        partial = P.progress_token(p, "partialResultToken", "params")
        work_token = P.progress_token(p, "workDoneToken", "params")
        if rng is not None and uri is None:
            raise P.invalid("params.range needs params.textDocument")
        path = ls.checked_path(uri) if uri else None
        turn = turn_for(ls, path, rng, rng.start if rng else None, question)
        rt = runtime(ls)
        on_piece = None
        if partial is not None:
            loop = asyncio.get_running_loop()

            def on_piece(piece: str) -> None:
                send_partial_result(ls, loop, partial, {"text": piece})

        work = WorkDone(ls, work_token) if work_token is not None else None
        return await run_cancellable(
            ls, rt.run_prompt(turn, max_tokens or ls.options.max_tokens, on_piece, work)
        )

    @server.feature(PIN)
    async def pin(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        p = P.as_object(params, PIN, allow_none=False)
        return await add_pin(ls, P.req_str(p, "uri", "params"), P.opt_range(p, "range", "params"))

    @server.feature(UNPIN)
    async def unpin(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        p = P.as_object(params, UNPIN, allow_none=False)
        return remove_pins(ls, P.req_str(p, "uri", "params"), P.opt_range(p, "range", "params"))

    @server.feature(LIST_PINS)
    async def list_pins(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        P.as_object(params, LIST_PINS)
        return {"pins": await pins_view(ls, ls.pins.list())}

    @server.feature(STATUS)
    async def status(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        P.as_object(params, STATUS)
        return status_view(ls)

    @server.feature(DOCUMENT)
    async def document(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        # The server's copy of an open document (to check sync; used by tests and editors).
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

    @server.feature(SNAPSHOT)
    async def snapshot(ls: ContenoxServer, params: Any) -> dict[str, Any]:
        from contenox_lsp import snapshots

        p = P.as_object(params, SNAPSHOT, allow_none=False)
        action = P.opt_choice(p, "action", "params", ("save", "load", "list", "clear"))
        if action is None:
            raise P.invalid("params.action is required: 'save', 'load', 'list' or 'clear'")
        name = P.opt_str(p, "name", "params")
        return await run_cancellable(ls, snapshots.handle(runtime(ls), action, name))


async def run_cancellable(ls: ContenoxServer, coro: Any) -> Any:
    """Await ``coro`` as the current request's work, cancellable by $/cancelRequest.

    A client cancel cancels this task (pygls or our protocol hook), which cancels the engine
    job; pygls then answers RequestCancelled (-32800).
    """
    msg_id = ls.track()
    try:
        return await coro
    except RequestCancelled as exc:
        raise JsonRpcRequestCancelled(message=f"Request cancelled: {exc}") from exc
    finally:
        ls.untrack(msg_id)


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
    rel = _relative(ls, path)
    selection = None
    cursor = None
    line = None
    if rng is not None and (rng.start != rng.end):
        if doc is not None:
            selection = text_in_range(doc, rng)
        elif text is not None:
            selection = line_span(text, rng.start.line, rng.end.line)
    if pos is not None:
        line = pos.line + 1
        if selection is None and text is not None:
            cursor = line_span(text, max(0, pos.line - CURSOR_CONTEXT_LINES),
                               pos.line + CURSOR_CONTEXT_LINES)
    return TurnSpec(question=question, path=Path(rel), selection=selection or None,
                    cursor_context=cursor or None, line=line, outputs=outputs)


def _relative(ls: ContenoxServer, path: Path) -> str:
    for root in ls.roots():
        if root in path.parents:
            return path.relative_to(root).as_posix()
    return path.as_posix()


async def explain(rt: Runtime, turn: TurnSpec, include_text: bool = False) -> dict[str, Any]:
    session = await rt.session()
    assembly = await rt.assemble(turn)
    resident = rt.resident_tokens()
    ident_now = getattr(session, "resident_identity", session.identity)
    common, reason = assembly.reuse_against_resident(resident, ident_now)
    # What the next prefill really reuses (OpenVINO: whole KV blocks only); the idle
    # pre-prefill's own work is done once the common prefix covers the idle target.
    reused = reusable_prefix(session, common)
    ident = assembly.identity
    segments = []
    for seg in assembly.segments:
        extra = {"text": seg.text} if include_text else {}
        segments.append({
            "kind": seg.kind.value,
            "label": seg.label,
            "tokens": seg.n_tokens,
            "tokenStart": seg.token_start,
            "tokenEnd": seg.token_end,
            "status": "cached" if seg.token_end <= reused else "new",
            "cacheClass": seg.cache_class.value,
            "invalidation": seg.invalidation,
            "byteHash": seg.byte_hash,
            "tokenHash": seg.token_hash,
            "truncated": seg.truncated,
            **extra,
        })
    return {
        "profileId": ident.profile_id,
        "backend": ident.backend,
        "nCtx": ident.n_ctx,
        "totalTokens": assembly.n_tokens,
        "reusedTokens": reused,
        "newTokens": assembly.n_tokens - reused,
        "residentTokens": len(resident),
        "pendingPrefillTokens": max(0, assembly.user_start - min(common, assembly.user_start)),
        "userStart": assembly.user_start,
        "missReason": reason,
        "reuseGranularity": int(getattr(session, "reuse_granularity", 1)),
        "capabilities": dict(session.capabilities),
        "segments": segments,
        "dropped": [
            {"kind": d.kind.value, "label": d.label, "cacheClass": d.cache_class.value,
             "tokens": d.full_tokens, "status": "evicted"}
            for d in assembly.dropped
        ],
    }


async def add_pin(ls: ContenoxServer, uri: str, rng: Any) -> dict[str, Any]:
    """Pin ``uri`` (whole lines of ``rng``, or the whole file): ``contenox/pin`` and the
    pin command."""
    path = ls.checked_path(uri)
    if not path.is_file() and open_document(ls.workspace, path) is None:
        raise P.invalid(f"{uri} is not a file")
    entry = pin_for(path, uri_for(path), rng)
    added = ls.pins.add(entry)
    if added:
        runtime(ls).prefetch.note_change()
    return {"pinned": added, "pin": (await pins_view(ls, [entry]))[0]}


def remove_pins(ls: ContenoxServer, uri: str, rng: Any) -> dict[str, Any]:
    """Unpin ``uri`` (the pins ``rng`` touches, or all of the file's): ``contenox/unpin`` and
    the unpin command."""
    removed = ls.pins.remove(ls.checked_path(uri), rng)
    if removed:
        runtime(ls).prefetch.note_change()
    return {"removed": removed}


async def pins_view(ls: ContenoxServer, pins: list[Any]) -> list[dict[str, Any]]:
    rt = runtime(ls)
    texts: list[str | None] = []
    for pin in pins:
        doc = open_document(ls.workspace, pin.path)
        text = doc.source if doc is not None else None
        texts.append(text)
    counts: list[int | None] = [None] * len(pins)
    if rt.session_ready():
        session = await rt.session()

        def count(_svc: Any) -> list[int | None]:
            out: list[int | None] = []
            for pin, text in zip(pins, texts, strict=True):
                body = text if text is not None else read_disk(pin.path)
                if body is None:
                    out.append(None)
                    continue
                if pin.start_line is not None:
                    body = line_span(body, pin.start_line, pin.end_line)
                out.append(len(session.tokenize(body, add_bos=False, special=False)))
            return out

        counts = await rt.context.call(count)
    out = []
    for pin, n in zip(pins, counts, strict=True):
        rng = pin.range()
        out.append({
            "uri": pin.uri,
            "range": None if rng is None else {
                "start": {"line": rng.start.line, "character": 0},
                "end": {"line": rng.end.line, "character": 0},
            },
            "label": pin.label,
            "tokens": n,
        })
    return out


def status_view(ls: ContenoxServer) -> dict[str, Any]:
    rt = ls.runtime
    if rt is None:
        return {"state": "cold", "model": None, "backend": None, "profileId": None,
                "residentTokens": 0, "pendingPrefillTokens": 0, "lastRequest": None,
                "index": {"state": "idle", "files": 0}}
    assert isinstance(rt, Runtime)
    model = backend = profile_id = None
    capabilities: dict[str, bool] | None = None
    if rt.session_ready():
        s = rt.worker.ready.result()
        ident = s.identity
        backend, profile_id = ident.backend, ident.profile_id
        capabilities = dict(s.capabilities)
        model = str(getattr(s, "model_description", None) or getattr(s, "model_path", None)
                    or ident.model_digest[:16])
    err = None
    f = rt.worker.ready
    if f.done() and not f.cancelled() and f.exception() is not None:
        err = str(f.exception())
    busy = rt.worker.busy_with
    return {
        "state": rt.state(),
        "model": model,
        "backend": backend,
        "profileId": profile_id,
        "capabilities": capabilities,
        "residentTokens": len(rt.resident_tokens()),
        "pendingPrefillTokens": rt.prefetch.pending_tokens(),
        "targetTokens": len(rt.prefetch.target) if rt.prefetch.target is not None else None,
        "lastInvalidated": rt.prefetch.last_invalidated,
        "contextStale": rt.prefetch.stale,
        "lastRequest": rt.last_metrics,
        "running": None if busy is None else busy.label,
        "prefillOnIdle": rt.options.prefill_on_idle,
        "debounceMs": rt.options.debounce_ms,
        "error": err,
        "index": {
            "state": rt.context.index_state,
            "files": rt.context.index_files,
            "error": rt.context.index_error,
        },
    }
