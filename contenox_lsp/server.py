"""The server object: pygls's ``LanguageServer`` plus this server's typed state.

It holds state and the small services every handler needs (workspace folders, path checks,
request tracking for cancellation, messages to the user, the editor state for assembly). It
imports no feature: ``app.build_server`` registers the handlers of ``contenox_lsp.handlers``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.exceptions import FeatureRequestError
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from contenox_lsp import __version__
from contenox_lsp.documents import open_document
from contenox_lsp.options import ServerOptions
from contenox_lsp.params import invalid
from contenox_lsp.paths import OutsideWorkspaceError, safe_path, uri_to_path
from contenox_lsp.pins import PinSet
from contenox_lsp.progress import Reporter, WorkDone
from contenox_lsp.protocol import ContenoxProtocol, raw_converter
from contenox_lsp.runtime import Runtime
from contenox_lsp.transport import read_loop, stdin_reader, stream_reader
from contenox_lsp.turn import PinState, WorkspaceState

logger = logging.getLogger(__name__)

#: JSON-RPC request ids as pygls hands them to handlers.
MsgId = int | str


class ContenoxServer(LanguageServer):
    def __init__(self, options: ServerOptions) -> None:
        super().__init__(
            "contenox-lsp",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            protocol_cls=ContenoxProtocol,
            converter_factory=raw_converter,
        )
        self.base_options = options
        self.options = options
        self.pins = PinSet()
        self.runtime: Runtime | None = None
        """Set up in ``initialized`` (handlers/lifecycle.py); None before and after shutdown."""
        self.pending_warnings: list[str] = []
        """initializationOptions problems, shown once the client can receive messages."""
        self.watcher_task: asyncio.Future[None] | None = None  # the watched-files registration
        # Request id → the asyncio task doing its work, so $/cancelRequest reaches
        # handlers that pygls runs nested (workspace/executeCommand).
        self.inflight: dict[MsgId, asyncio.Task[Any]] = {}

    @property
    def rpc(self) -> ContenoxProtocol:
        """The protocol, typed as this server's."""
        assert isinstance(self.protocol, ContenoxProtocol)
        return self.protocol

    # -- transports: pygls's, on this server's framing layer (contenox_lsp.transport) ---------

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        self._stop_event = stop = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        read = stdin_reader(stdin or sys.stdin.buffer, self.thread_pool)
        try:
            asyncio.run(read_loop(stop, read, self.rpc))
        except BrokenPipeError:
            logger.error("the connection to the editor is lost; shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def start_tcp(self, host: str, port: int) -> None:
        self._stop_event = stop = threading.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.protocol.set_writer(writer)
            await read_loop(stop, stream_reader(reader), self.rpc)
            self.shutdown()

        async def serve() -> None:
            self._server = await asyncio.start_server(connection, host, port)
            logger.info("serving on %s:%s", host, port)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(serve())
        except asyncio.CancelledError:
            pass

    def report_server_error(self, error: Exception, source: Any) -> None:
        """A notification handler or the transport failed: logged, shown once per kind
        (pygls shows every one, which floods the editor under malformed input)."""
        if source is FeatureRequestError:
            return  # the request's own response carries the error
        self.rpc.problem(f"{getattr(source, '__name__', source)}/{type(error).__name__}",
                              str(error) or type(error).__name__)

    def start_runtime(self) -> Runtime:
        """The runtime for the negotiated options; its collaborators are this server's."""
        self.runtime = Runtime(self.options, self.roots, self.editor_state, self)
        return self.runtime

    # -- workspace folders and path safety -----------------------------------------------------

    def roots(self) -> list[Path]:
        """Resolved workspace folders (root URI when the client sent no folders)."""
        out: list[Path] = []
        try:
            ws = self.workspace
        except RuntimeError:
            return out
        for folder in ws.folders.values():
            try:
                out.append(Path(os.path.realpath(uri_to_path(folder.uri))))
            except OutsideWorkspaceError:
                continue
        if not out and ws.root_uri:
            try:
                out.append(Path(os.path.realpath(uri_to_path(ws.root_uri))))
            except OutsideWorkspaceError:
                pass
        return sorted(set(out))

    def checked_path(self, uri: str) -> Path:
        """Resolved path of a client URI; InvalidParams "outside the workspace" otherwise."""
        try:
            return safe_path(uri, self.roots())
        except OutsideWorkspaceError as exc:
            raise invalid(str(exc)) from None

    def path_if_inside(self, uri: str) -> Path | None:
        try:
            return safe_path(uri, self.roots())
        except OutsideWorkspaceError:
            return None

    def editor_state(self) -> WorkspaceState:
        """Open buffers and pins, captured on the event loop (pygls's workspace is not
        thread-safe); the assembly then runs on the context thread."""
        ws = self.workspace
        buffers: dict[Path, str] = {}
        for doc in list(ws.text_documents.values()):
            path = self.path_if_inside(doc.uri)
            if path is not None:
                buffers[path] = doc.source
        pins = []
        for pin in self.pins.list():
            doc = open_document(ws, pin.path)
            pins.append(PinState(pin.path, pin.start_line, pin.end_line,
                                 doc.source if doc is not None else None))
        focus = sorted(set(buffers) | {p.path for p in pins})
        return WorkspaceState(tuple(self.roots()), dict(sorted(buffers.items())),
                              tuple(pins), tuple(focus))

    # -- cancellation --------------------------------------------------------------------------

    def track(self) -> MsgId | None:
        """Register the current task under the current request id (for $/cancelRequest)."""
        msg_id = self.protocol.msg_id
        task = asyncio.current_task()
        if msg_id is not None and task is not None:
            self.inflight[msg_id] = task
        return msg_id

    def untrack(self, msg_id: MsgId | None) -> None:
        if msg_id is not None:
            self.inflight.pop(msg_id, None)

    def on_cancel_request(self, msg_id: MsgId) -> None:
        task = self.inflight.pop(msg_id, None)
        if task is not None and not task.done():
            task.cancel()

    # -- messages (the runtime's Notifier) -----------------------------------------------------

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    async def start_progress(self) -> Reporter:
        return await WorkDone.server_initiated(self)
