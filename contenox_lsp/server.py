"""The Contenox language server: pygls 2.x on stdio (editors) or 127.0.0.1 TCP.

``run_stdio(options)`` / ``run_tcp(host, port, options)`` are the entry points the CLI calls.
State lives on ``ContenoxServer``; each module registers its own handlers:
``sync`` (lifecycle, documents, workspace events), ``requests`` (``contenox/*``),
``code_actions`` (code actions + ``workspace/executeCommand``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from contenox_lsp import __version__
from contenox_lsp.options import ServerOptions, coerce_options
from contenox_lsp.params import invalid
from contenox_lsp.paths import OutsideWorkspaceError, safe_path, uri_to_path
from contenox_lsp.pins import PinSet
from contenox_lsp.protocol import ContenoxProtocol, raw_converter

logger = logging.getLogger(__name__)


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
        # Set up in ``initialized`` (see sync.py); None until then.
        self.runtime: Any = None
        # Request id → the asyncio task doing its work, so $/cancelRequest reaches
        # handlers that pygls runs nested (workspace/executeCommand).
        self.inflight: dict[Any, asyncio.Task[Any]] = {}

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

    # -- cancellation --------------------------------------------------------------------------

    def track(self) -> Any:
        """Register the current task under the current request id (for $/cancelRequest)."""
        msg_id = self.protocol.msg_id
        task = asyncio.current_task()
        if msg_id is not None and task is not None:
            self.inflight[msg_id] = task
        return msg_id

    def untrack(self, msg_id: Any) -> None:
        if msg_id is not None:
            self.inflight.pop(msg_id, None)

    def on_cancel_request(self, msg_id: Any) -> None:
        task = self.inflight.pop(msg_id, None)
        if task is not None and not task.done():
            task.cancel()

    # -- messages ------------------------------------------------------------------------------

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=message))


def build_server(options: ServerOptions | None = None) -> ContenoxServer:
    from contenox_lsp import code_actions, requests, sync

    server = ContenoxServer(options or ServerOptions())
    sync.register(server)
    requests.register(server)
    code_actions.register(server)
    return server


def configure_logging(level: str) -> None:
    """Logging goes to stderr only; stdout carries JSON-RPC and nothing else."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # pygls logs every message body at INFO, llama.cpp every graph detail: keep both out of
    # anything but debug output.
    noisy = logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    for name in ("pygls", "contenox.llama_cpp"):
        logging.getLogger(name).setLevel(noisy)


def _protect_stdout() -> Any:
    """Move the real stdout out of reach: JSON-RPC gets a private duplicate of fd 1, and fd 1
    itself is pointed at stderr, so a stray print() or C-level printf from a native library
    can never corrupt the protocol stream."""
    sys.stdout.flush()
    rpc_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(rpc_fd, "wb")


def run_stdio(options: ServerOptions | Any = None) -> None:
    """Serve one client over stdin/stdout (how editors launch a language server).

    ``options``: ServerOptions, or the CLI's argparse namespace (see ``coerce_options``)."""
    options = coerce_options(options)
    configure_logging(options.log_level)
    rpc_out = _protect_stdout()
    server = build_server(options)
    server.start_io(sys.stdin.buffer, rpc_out)


def run_tcp(host: str, port: int, options: ServerOptions | Any = None) -> None:
    """Serve one client over TCP. Only loopback addresses are accepted."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"refusing to listen on {host!r}: only 127.0.0.1 is allowed")
    options = coerce_options(options)
    configure_logging(options.log_level)
    server = build_server(options)
    server.start_tcp(host, port)


def start_parent_watchdog(pid: int | None, interval: float = 3.0) -> None:
    """Exit when the editor process dies (LSP ``processId``), even if stdin stays open."""
    if not pid or pid == os.getpid():
        return

    def watch() -> None:
        import time

        while True:
            time.sleep(interval)
            if not _pid_alive(pid):
                logger.warning("editor process %s is gone; exiting", pid)
                os._exit(1)

    threading.Thread(target=watch, name="contenox-parent-watchdog", daemon=True).start()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
