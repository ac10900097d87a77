"""The server object: pygls's ``LanguageServer`` plus this server's typed state.

It holds state and the small services every handler needs (workspace folders, path checks,
request tracking for cancellation, messages to the user, the editor state for assembly). It
imports no feature: ``app.build_server`` registers the handlers of ``contenox_lsp.handlers``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from lsprotocol import types
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
from contenox_lsp.turn import PinState, WorkspaceState

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
        # Request id → the asyncio task doing its work, so $/cancelRequest reaches
        # handlers that pygls runs nested (workspace/executeCommand).
        self.inflight: dict[MsgId, asyncio.Task[Any]] = {}
        # The running inline completion, and the one a newer request cancelled (it answers
        # an empty list instead of RequestCancelled).
        self.completion_task: asyncio.Task[Any] | None = None
        self.completion_superseded: asyncio.Task[Any] | None = None

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
