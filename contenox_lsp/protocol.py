"""pygls protocol tweaks the server needs.

- Position encoding: utf-8 when the client offers it, else utf-16 (pygls would pick the
  client's first preference, which may be utf-32).
- A request whose params do not fit the LSP type (e.g. a malformed ``textDocument/codeAction``)
  is answered with InvalidParams; stock pygls raises inside the reader loop and never answers.
- Requests after ``shutdown`` get InvalidRequest instead of silence.
- ``$/cancelRequest`` is forwarded to the server so engine work behind the request is aborted
  (pygls only cancels the asyncio task of the outermost handler).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
from cattrs import Converter
from lsprotocol import converters, types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
)
from pygls.protocol.language_server import lsp_method

if TYPE_CHECKING:
    from collections.abc import Generator

logger = logging.getLogger(__name__)


#: Typed LSP requests whose params reach the handler as raw JSON: inline completion takes the
#: non-standard fields of Copilot's language server (``textDocument.version``), which the
#: LSP type would drop.
RAW_PARAMS = frozenset({types.TEXT_DOCUMENT_INLINE_COMPLETION})


@attrs.define
class _UnparsableMessage:
    """Stands in for a message whose params could not be structured into the LSP type."""

    id: Any
    method: str
    jsonrpc: str
    error: str


def raw_converter() -> Converter:
    """pygls's converter, except that params/results of methods without an LSP type stay
    plain JSON values. (pygls turns them into namedtuples, renaming keys that are not
    Python identifiers and dropping a ``type_name`` key; custom requests need the raw JSON.)"""
    converter = converters.get_converter()

    def keep_raw(obj: dict[str, Any], cls: type) -> Any:
        # JSON-RPC lets a request or notification omit "params" (e.g. contenox/status).
        if cls is not JsonRPCResponseMessage and "params" not in obj:
            obj = {**obj, "params": None}
        return cls(**obj)

    for cls in (JsonRPCRequestMessage, JsonRPCResponseMessage, JsonRPCNotification):
        converter.register_structure_hook(cls, keep_raw)
    return converter


def negotiate_encoding(capabilities: types.ClientCapabilities) -> str:
    """utf-8 when offered, else utf-16 (the LSP default every client supports)."""
    general = capabilities.general
    offered = list(general.position_encodings or []) if general is not None else []
    if types.PositionEncodingKind.Utf8 in offered:
        return types.PositionEncodingKind.Utf8
    return types.PositionEncodingKind.Utf16


class ContenoxProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # LSP: initialize is sent once; a second one must not re-root the workspace, and a
        # second initialized must not start a second runtime (and load a second model).
        self._initialize_seen = False
        self._initialized_seen = False

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(
        self, params: types.InitializeParams
    ) -> Generator[Any, Any, types.InitializeResult]:
        chosen = negotiate_encoding(params.capabilities)
        # pygls picks the first encoding the client lists; narrow the list to our choice
        # so the workspace codec and the advertised capability agree with it.
        if params.capabilities.general is None:
            params.capabilities.general = types.GeneralClientCapabilities()
        params.capabilities.general.position_encodings = [types.PositionEncodingKind(chosen)]
        result = yield from super().lsp_initialize(params)
        return result

    def structure_message(self, data: dict[str, Any]) -> Any:
        if data.get("method") in RAW_PARAMS and "id" in data:
            # Kept as JSON: the handler validates it and reads fields the LSP type lacks.
            return JsonRPCRequestMessage(id=data["id"], method=str(data["method"]),
                                         jsonrpc="2.0", params=data.get("params"))
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data and "jsonrpc" in data:
                cause = exc.__cause__
                detail = _describe(cause) if cause is not None else str(exc)
                return _UnparsableMessage(data["id"], str(data["method"]), "2.0", detail)
            raise

    def handle_message(self, message: Any) -> None:
        if isinstance(message, _UnparsableMessage):
            bad = JsonRpcInvalidParams(
                message=f"Invalid params for {message.method}: {message.error}"
            )
            self._send_response(message.id, None, bad.to_response_error())
            return
        method = getattr(message, "method", None)
        if method == types.INITIALIZE and hasattr(message, "id"):
            if self._initialize_seen:
                err = JsonRpcInvalidRequest(message="initialize may be sent only once")
                self._send_response(message.id, None, err.to_response_error())
                return
            self._initialize_seen = True
        if method == types.INITIALIZED:
            if self._initialized_seen:
                logger.warning("ignoring a second 'initialized' notification")
                return
            self._initialized_seen = True
        if self._shutdown and method != types.EXIT and hasattr(message, "id") and method:
            err = JsonRpcInvalidRequest(message="The server is shutting down")
            self._send_response(message.id, None, err.to_response_error())
            return
        super().handle_message(message)

    def _handle_cancel_notification(self, msg_id: Any) -> None:
        super()._handle_cancel_notification(msg_id)
        hook = getattr(self._server, "on_cancel_request", None)
        if hook is not None:
            hook(msg_id)


def _describe(exc: BaseException) -> str:
    """A short reason from a cattrs ClassValidationError tree (first leaf error)."""
    subs = getattr(exc, "exceptions", None)
    if subs:
        first = subs[0]
        note = ""
        notes = getattr(first, "__notes__", None)
        if notes:
            note = f" ({notes[0]})"
        return f"{_describe(first)}{note}"
    return str(exc) or type(exc).__name__
