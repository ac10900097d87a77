"""Workspace events: files changed on disk, workspace folders added or removed."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from lsprotocol import types
from pygls.capabilities import get_capability

from contenox_lsp.documents import open_document
from contenox_lsp.paths import root_of, uri_to_path
from contenox_lsp.server import ContenoxServer

logger = logging.getLogger(__name__)

WATCHER_REGISTRATION_ID = "contenox-watched-files"


def did_change_watched_files(ls: ContenoxServer,
                             params: types.DidChangeWatchedFilesParams) -> None:
    rt = ls.runtime
    if rt is None:
        return
    for ev in params.changes:
        if ev.type == types.FileChangeType.Deleted:
            # A deleted path no longer resolves through symlinks; check it lexically.
            try:
                path = Path(os.path.abspath(uri_to_path(ev.uri)))
            except ValueError:
                continue
            if root_of(path, ls.roots()) is not None:
                rt.disk_changed(path)
            continue
        inside = ls.path_if_inside(ev.uri)
        if inside is None or open_document(ls.workspace, inside) is not None:
            continue  # open buffers are tracked through didChange, not the disk
        rt.disk_changed(inside)


async def did_change_workspace_folders(
    ls: ContenoxServer, params: types.DidChangeWorkspaceFoldersParams
) -> None:
    rt = ls.runtime
    if rt is not None:
        await rt.reindex()


async def register_file_watcher(ls: ContenoxServer) -> None:
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
