"""The composition root: builds the server, registers every handler, runs it.

``run_stdio(options)`` / ``run_tcp(host, port, options)`` are what the CLI calls. This is the
only module that knows every feature; the handlers know the server's state, the server knows
no handler.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from lsprotocol import types

from contenox_lsp.handlers import (
    code_actions,
    completion,
    contenox,
    documents,
    lifecycle,
    next_edit,
    workspace,
)
from contenox_lsp.options import ServerOptions
from contenox_lsp.process import configure_logging, protect_stdout, share_the_gil_often
from contenox_lsp.server import ContenoxServer


def build_server(options: ServerOptions | None = None) -> ContenoxServer:
    server = ContenoxServer(options or ServerOptions())
    features: dict[str, Callable[..., Any]] = {
        types.INITIALIZE: lifecycle.initialize,
        types.INITIALIZED: lifecycle.initialized,
        types.SHUTDOWN: lifecycle.shutdown,
        types.EXIT: lifecycle.exit_,
        types.TEXT_DOCUMENT_DID_OPEN: documents.did_open,
        types.TEXT_DOCUMENT_DID_CHANGE: documents.did_change,
        types.TEXT_DOCUMENT_DID_SAVE: documents.did_save,
        types.TEXT_DOCUMENT_DID_CLOSE: documents.did_close,
        types.WORKSPACE_DID_CHANGE_WATCHED_FILES: workspace.did_change_watched_files,
        types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS: workspace.did_change_workspace_folders,
        **contenox.REQUESTS,
    }
    for method, handler in features.items():
        server.feature(method)(handler)
    server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                   code_actions.CODE_ACTION_OPTIONS)(code_actions.code_action)
    for name, command in code_actions.COMMANDS.items():
        server.command(name)(command)
    server.feature(completion.INLINE_COMPLETION,
                   types.InlineCompletionOptions())(completion.inline_completion)
    server.command(completion.CMD_ACCEPT)(completion.accept_completion)
    for method in (next_edit.NEXT_EDIT, next_edit.COPILOT_INLINE_EDIT):
        server.feature(method)(next_edit.next_edit)
    server.feature(next_edit.DID_SHOW_INLINE_EDIT)(next_edit.did_show_inline_edit)
    server.command(next_edit.CMD_ACCEPT)(next_edit.accept_next_edit)
    server.command(next_edit.CMD_REJECT)(next_edit.reject_next_edit)
    return server


def run_stdio(options: ServerOptions) -> None:
    """Serve one client over stdin/stdout (how editors launch a language server)."""
    configure_logging(options.log_level)
    share_the_gil_often()
    rpc_out = protect_stdout()
    build_server(options).start_io(sys.stdin.buffer, rpc_out)


def run_tcp(host: str, port: int, options: ServerOptions) -> None:
    """Serve one client over TCP. Only loopback addresses are accepted."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"refusing to listen on {host!r}: only 127.0.0.1 is allowed")
    configure_logging(options.log_level)
    share_the_gil_often()
    build_server(options).start_tcp(host, port)
