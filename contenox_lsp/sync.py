"""Lifecycle, document synchronisation and workspace events → the edit stream.

pygls applies document changes to its workspace before these handlers run; the handlers map
each change to the context inputs it can invalidate (repo index for the file, the diff, a pin)
and restart the debounce timer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.capabilities import get_capability

from contenox_lsp.documents import change_to_edit, encoding_name
from contenox_lsp.options import merge_initialization_options
from contenox_lsp.server import configure_logging, start_parent_watchdog

if TYPE_CHECKING:
    from contenox_lsp.server import ContenoxServer

logger = logging.getLogger(__name__)

WATCHER_REGISTRATION_ID = "contenox-watched-files"


def register(server: ContenoxServer) -> None:
    pending_warnings: list[str] = []

    @server.feature(types.INITIALIZE)
    def initialize(ls: ContenoxServer, params: types.InitializeParams) -> None:
        options, warnings = merge_initialization_options(
            ls.base_options, params.initialization_options
        )
        ls.options = options
        pending_warnings[:] = warnings
        configure_logging(options.log_level)
        for w in warnings:
            logger.warning("%s", w)
        start_parent_watchdog(params.process_id)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: ContenoxServer, params: types.InitializedParams) -> None:
        from contenox_lsp.runtime import Runtime

        # Create the runtime before awaiting anything: didOpen may arrive right away.
        ls.runtime = Runtime(ls)
        ls.runtime.start_task = asyncio.ensure_future(_start_runtime(ls))
        for w in pending_warnings:
            ls.show(f"contenox: {w}", types.MessageType.Warning)
        await _register_file_watcher(ls)

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: ContenoxServer, params: Any) -> None:
        rt = ls.runtime
        if rt is not None:
            ls.runtime = None
            # Stopping joins the engine thread; do it off the loop.
            await asyncio.get_running_loop().run_in_executor(None, rt.close)

    @server.feature(types.EXIT)
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

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: ContenoxServer, params: types.DidOpenTextDocumentParams) -> None:
        path = ls.path_if_inside(params.text_document.uri)
        if path is None or ls.runtime is None:
            return
        ls.runtime.context.update(path, params.text_document.text, None, _encoding(ls))
        ls.runtime.note_edit(path)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: ContenoxServer, params: types.DidChangeTextDocumentParams) -> None:
        path = ls.path_if_inside(params.text_document.uri)
        if path is None or ls.runtime is None:
            return
        doc = ls.workspace.get_text_document(params.text_document.uri)
        edits = [change_to_edit(c) for c in params.content_changes]
        clean = None if any(e is None for e in edits) else [e for e in edits if e is not None]
        ls.runtime.context.update(path, doc.source, clean, _encoding(ls))
        ls.runtime.note_edit(path)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: ContenoxServer, params: types.DidSaveTextDocumentParams) -> None:
        path = ls.path_if_inside(params.text_document.uri)
        if path is None or ls.runtime is None:
            return
        # The buffer now equals the disk: the unsaved-buffer part of the diff changes.
        ls.runtime.note_edit(path)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: ContenoxServer, params: types.DidCloseTextDocumentParams) -> None:
        path = ls.path_if_inside(params.text_document.uri)
        if path is None or ls.runtime is None:
            return
        # A closed buffer's unsaved text is discarded: re-read the file from disk.
        ls.runtime.context.update_from_disk(path)
        ls.runtime.note_edit(path)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: ContenoxServer, params: types.DidChangeWatchedFilesParams) -> None:
        rt = ls.runtime
        if rt is None:
            return
        changed = False
        for ev in params.changes:
            if ev.type == types.FileChangeType.Deleted:
                # A deleted path no longer resolves through symlinks; check it lexically.
                try:
                    from contenox_lsp.paths import uri_to_path

                    path = Path(os.path.abspath(uri_to_path(ev.uri)))
                except ValueError:
                    continue
                if not any(path == r or r in path.parents for r in ls.roots()):
                    continue
                rt.context.remove(path)
                changed = True
                continue
            inside = ls.path_if_inside(ev.uri)
            if inside is None or _is_open(ls, inside):
                continue  # open buffers are tracked through didChange, not the disk
            rt.context.update_from_disk(inside)
            changed = True
        if changed:
            rt.prefetch.note_change()

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def did_change_folders(
        ls: ContenoxServer, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        rt = ls.runtime
        if rt is None:
            return
        await rt.reindex()


async def _start_runtime(ls: ContenoxServer) -> None:
    rt = ls.runtime
    if rt is None:
        return
    try:
        await rt.start()
    except Exception as exc:
        logger.exception("runtime start failed")
        ls.show(f"contenox: start-up failed: {exc}", types.MessageType.Error)


async def _register_file_watcher(ls: ContenoxServer) -> None:
    """Ask the client to report on-disk changes (files changed outside the editor)."""
    if not get_capability(
        ls.client_capabilities, "workspace.did_change_watched_files.dynamic_registration", False
    ):
        return
    options = types.DidChangeWatchedFilesRegistrationOptions(
        watchers=[types.FileSystemWatcher(glob_pattern="**/*")]
    )
    try:
        await ls.client_register_capability_async(
            types.RegistrationParams(
                registrations=[
                    types.Registration(
                        id=WATCHER_REGISTRATION_ID,
                        method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                        register_options=options,
                    )
                ]
            )
        )
    except Exception as exc:  # the client may refuse; the server works without it
        logger.info("watched-files registration failed: %s", exc)


def _encoding(ls: ContenoxServer) -> str:
    return encoding_name(ls.workspace)


def _is_open(ls: ContenoxServer, path: Path) -> bool:
    from contenox_lsp.documents import open_document

    return open_document(ls.workspace, path) is not None
