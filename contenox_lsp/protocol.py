"""pygls protocol tweaks the server needs.

- Position encoding: utf-8 when the client offers it, else utf-16 (pygls would pick the
  client's first preference, which may be utf-32).
- A request whose params do not fit the LSP type (e.g. a malformed ``textDocument/codeAction``)
  is answered with InvalidParams; stock pygls raises inside the reader loop and never answers.
- Requests after ``shutdown`` get InvalidRequest instead of silence.
- ``$/cancelRequest`` is forwarded to the server so engine work behind the request is aborted
  (pygls only cancels the asyncio task of the outermost handler).
- Every decoded body passes one envelope check (``receive``) before anything is structured:
  a message that is no JSON-RPC 2.0 request, notification or response is answered with
  InvalidRequest (with its id when it has a usable one), text that is no valid Unicode with
  InvalidParams. Problems without an id are logged, and shown to the user once per kind.
"""

from __future__ import annotations

import collections.abc
import logging
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

import attrs
from cattrs import Converter
from lsprotocol import converters, types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
)
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    LanguageServerProtocol,
)
from pygls.protocol.language_server import lsp_method

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from contenox_lsp.framing import Message, Problem

logger = logging.getLogger(__name__)


#: Typed LSP requests whose params reach the handler as raw JSON: inline completion takes the
#: non-standard fields of Copilot's language server (``textDocument.version``), which the
#: LSP type would drop.
RAW_PARAMS = frozenset({types.TEXT_DOCUMENT_INLINE_COMPLETION})

#: ``capabilities.experimental`` of the ``initialize`` result: next-edit suggestions and the
#: method names that serve them (PROTOCOL.md, "Next-edit suggestions").
EXPERIMENTAL_CAPABILITIES: dict[str, object] = {
    "contenoxNextEdit": {"methods": ["contenox/nextEdit", "textDocument/copilotInlineEdit"]}}


@attrs.define
class _UnparsableMessage:
    """Stands in for a message whose params could not be structured into the LSP type."""

    id: Any
    method: str
    jsonrpc: str
    error: str


def raw_converter() -> Converter:
    """pygls's converter, except that params/results of methods without an LSP type stay
    plain JSON values (pygls turns them into namedtuples, renaming keys that are not
    Python identifiers and dropping a ``type_name`` key; custom requests need the raw JSON),
    and that JSON scalars are structured strictly: cattrs would turn ``"5"`` into the line
    number 5, ``1.5`` into 1 and ``true`` into the URI ``"True"``; here each is InvalidParams.
    The LSP types are the schema of every typed method; this makes them checked as such."""
    converter = converters.get_converter()
    for scalar, accepts in _STRICT_SCALARS.items():
        converter.register_structure_hook(scalar, _strict_hook(scalar, accepts))
    # cattrs structures a list from any iterable: ``"x"`` became ``["x"]``, ``{}`` became
    # ``[]`` (codeAction's ``context.only`` / ``diagnostics``). A JSON array is required.
    converter.register_structure_hook_factory(_is_list_type, lambda t: _strict_list(converter, t))

    def keep_raw(obj: dict[str, Any], cls: type) -> Any:
        # JSON-RPC lets a request or notification omit "params" (e.g. contenox/status).
        if cls is not JsonRPCResponseMessage and "params" not in obj:
            obj = {**obj, "params": None}
        return cls(**obj)

    for cls in (JsonRPCRequestMessage, JsonRPCResponseMessage, JsonRPCNotification):
        converter.register_structure_hook(cls, keep_raw)

    def command_or_code_action(obj: Any, _: type) -> types.Command | types.CodeAction:
        # lsprotocol 2025.0.0 takes anything with a "command" key for a Command, so a client
        # could not read a CodeAction that carries its command. A Command's is a string.
        if isinstance(obj, dict) and isinstance(obj.get("command"), str):
            return converter.structure(obj, types.Command)
        return converter.structure(obj, types.CodeAction)

    # The union as lsprotocol spells it (typing.Union; ``X | Y`` is another key to cattrs).
    converter.register_structure_hook(Union[types.Command, types.CodeAction],  # noqa: UP007
                                      command_or_code_action)
    return converter


_STRICT_SCALARS: dict[type, Callable[[Any], bool]] = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
}


def _is_list_type(cls: Any) -> bool:
    return get_origin(cls) in (list, collections.abc.Sequence, collections.abc.MutableSequence)


def _strict_list(converter: Converter, cls: Any) -> Callable[[Any, Any], list[Any]]:
    (item,) = get_args(cls) or (Any,)

    def structure(value: Any, _: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {type(value).__name__} {value!r:.40}")
        return [converter.structure(v, item) for v in value]

    return structure


def _strict_hook(scalar: type, accepts: Callable[[Any], bool]) -> Callable[[Any, type], Any]:
    def structure(value: Any, cls: type) -> Any:
        if not accepts(value):
            raise TypeError(f"expected {scalar.__name__}, got {type(value).__name__} {value!r:.40}")
        # The hook also receives subclasses: int and str enums (MessageType, ...).
        return value if cls is scalar else cls(value)

    return structure


def negotiate_encoding(capabilities: types.ClientCapabilities) -> str:
    """utf-8 when offered, else utf-16 (the LSP default every client supports)."""
    general = capabilities.general
    offered = list(general.position_encodings or []) if general is not None else []
    if types.PositionEncodingKind.Utf8 in offered:
        return types.PositionEncodingKind.Utf8
    return types.PositionEncodingKind.Utf16


def envelope_error(value: Any) -> str | None:
    """Why ``value`` is no JSON-RPC 2.0 message LSP allows (None when it is one)."""
    if isinstance(value, list):
        return "batch messages are not part of LSP"
    if not isinstance(value, dict):
        return "a message must be a JSON object"
    if value.get("jsonrpc") != "2.0":
        return 'the "jsonrpc" member must be "2.0"'
    if "method" in value:
        if not isinstance(value["method"], str) or not value["method"]:
            return 'the "method" member must be a non-empty string'
        if "id" in value and not usable_id(value["id"]):
            return 'the "id" member must be an integer or a string'
        return None
    if "id" in value and ("result" in value or "error" in value):
        return None  # a response to one of the server's requests
    return 'a message needs a "method" (request, notification) or a "result"/"error"'


def usable_id(msg_id: Any) -> bool:
    """LSP ids are integers or strings (JSON-RPC's null and fractions are not used)."""
    return isinstance(msg_id, str) or (isinstance(msg_id, int) and not isinstance(msg_id, bool))


class ContenoxProtocol(LanguageServerProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reported_problems: set[str] = set()
        """Kinds of stream problems already shown to the user (each is shown once)."""
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
        result.capabilities.experimental = dict(EXPERIMENTAL_CAPABILITIES)
        return result

    # -- the message stream (contenox_lsp.transport feeds it) --------------------------------

    def receive(self, message: Message) -> None:
        """One decoded body: checked, then structured and dispatched as pygls would."""
        value = message.value
        why = envelope_error(value)
        msg_id: Any = value.get("id") if isinstance(value, dict) else None
        is_request = isinstance(value, dict) and "method" in value and "id" in value
        if why is None and message.text_error is not None:
            if is_request:
                bad = JsonRpcInvalidParams(message=f"Invalid params: {message.text_error}")
                self._send_response(msg_id, None, bad.to_response_error())
            else:
                self.problem("bad-text", f"{value.get('method')}: {message.text_error}")
            return
        if why is not None:
            self.problem("invalid-request", why)
            is_response = (isinstance(value, dict) and "method" not in value
                           and ("result" in value or "error" in value))
            if not is_response:  # JSON-RPC answers an invalid request, with id null if need be
                answer_id = msg_id if usable_id(msg_id) else None
                err = JsonRpcInvalidRequest(message=f"Invalid request: {why}")
                self._send_response(answer_id, None, err.to_response_error())  # type: ignore[arg-type]
            return
        try:
            self.handle_message(self.structure_message(value))
        except Exception as exc:
            # What pygls's reader does with a message it cannot handle (it keeps reading).
            logger.exception("Unable to handle message")
            self._server._report_server_error(exc, JsonRpcException)

    def framing_problem(self, problem: Problem) -> None:
        self.problem(problem.kind, problem.detail)
        if problem.answer:
            # JSON-RPC: a body that cannot be read is answered with id null.
            err: JsonRpcException = (
                JsonRpcInvalidRequest(message=f"Invalid request: {problem.detail}")
                if problem.kind == "too-large"
                else JsonRpcParseError(message=f"Parse error: {problem.detail}"))
            self._send_response(None, None, err.to_response_error())  # type: ignore[arg-type]

    def problem(self, kind: str, detail: str) -> None:
        """A malformed message: logged each time, shown to the user once per kind."""
        logger.warning("malformed message from the client (%s): %s", kind, detail)
        if kind in self.reported_problems:
            return
        self.reported_problems.add(kind)
        self.notify(types.WINDOW_SHOW_MESSAGE, types.ShowMessageParams(
            type=types.MessageType.Warning,
            message=f"contenox-lsp ignored a malformed message from the editor ({kind}: "
                    f"{detail[:200]}); further ones of this kind go to the log only."))

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
