"""initialize, initialized, shutdown, exit."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

from lsprotocol import types
from pygls.capabilities import get_capability

from contenox_lsp.handlers.workspace import register_file_watcher
from contenox_lsp.options import merge_initialization_options
from contenox_lsp.process import configure_logging, start_parent_watchdog
from contenox_lsp.runtime import Runtime
from contenox_lsp.server import ContenoxServer

logger = logging.getLogger(__name__)


def initialize(ls: ContenoxServer, params: types.InitializeParams) -> None:
    options, warnings = merge_initialization_options(
        ls.base_options, params.initialization_options
    )
    ls.options = options
    ls.pending_warnings = warnings
    configure_logging(options.log_level)
    for w in warnings:
        logger.warning("%s", w)
    start_parent_watchdog(params.process_id)


def initialized(ls: ContenoxServer, params: types.InitializedParams) -> None:
    # A plain function, not a coroutine: pygls runs a coroutine handler as a task, which starts
    # only after the messages read with this one are handled — a didOpen and a code action sent
    # right behind `initialized` would find no runtime, and the cursor they give would be lost.
    rt = ls.start_runtime()
    # Documents opened before this ran start the edit history; an editor that shows inline
    # completions has the idle time warm their prompt too.
    rt.client_ready(inline_completion=get_capability(
        ls.client_capabilities, "text_document.inline_completion", None) is not None)
    rt.start_task = asyncio.ensure_future(_start(ls, rt))
    for w in ls.pending_warnings:
        ls.show(f"contenox: {w}", types.MessageType.Warning)
    ls.watcher_task = asyncio.ensure_future(register_file_watcher(ls))


async def _start(ls: ContenoxServer, rt: Runtime) -> None:
    try:
        await rt.start()
    except Exception as exc:
        logger.exception("runtime start failed")
        ls.show(f"contenox: start-up failed: {exc}", types.MessageType.Error)


async def shutdown(ls: ContenoxServer, params: Any) -> None:
    rt = ls.runtime
    if rt is not None:
        ls.runtime = None
        # Stopping joins the engine thread; do it off the loop.
        await asyncio.get_running_loop().run_in_executor(None, rt.close)


def exit_(ls: ContenoxServer, params: Any) -> None:
    # pygls would sys.exit() from inside the loop and then wait for the stdin reader
    # thread; leave promptly instead, after releasing the model if shutdown was skipped.
    rt = ls.runtime
    if rt is not None:
        rt.close()
    code = 0 if ls.protocol._shutdown else 1
    logging.shutdown()
    try:
        sys.stderr.flush()
    finally:
        os._exit(code)
