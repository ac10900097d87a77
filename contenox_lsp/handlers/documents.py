"""Document synchronisation → the edit stream.

pygls applies document changes to its workspace before these handlers run; each handler tells
the runtime which context input changed (a buffer, or the file on disk)."""

from __future__ import annotations

from lsprotocol import types

from contenox_lsp.documents import change_to_edit, encoding_name
from contenox_lsp.handlers.completion import speculate_after_edit
from contenox_lsp.server import ContenoxServer


def did_open(ls: ContenoxServer, params: types.DidOpenTextDocumentParams) -> None:
    path = ls.path_if_inside(params.text_document.uri)
    if path is None or ls.runtime is None:
        return
    ls.runtime.document_opened(path, params.text_document.text, encoding_name(ls.workspace))


def did_change(ls: ContenoxServer, params: types.DidChangeTextDocumentParams) -> None:
    path = ls.path_if_inside(params.text_document.uri)
    if path is None or ls.runtime is None:
        return
    doc = ls.workspace.get_text_document(params.text_document.uri)
    edits = [change_to_edit(c) for c in params.content_changes]
    clean = None if any(e is None for e in edits) else [e for e in edits if e is not None]
    ls.runtime.document_changed(path, doc.source, clean, encoding_name(ls.workspace))
    speculate_after_edit(ls, path, params)


def did_save(ls: ContenoxServer, params: types.DidSaveTextDocumentParams) -> None:
    path = ls.path_if_inside(params.text_document.uri)
    if path is None or ls.runtime is None:
        return
    # The buffer now equals the disk: the unsaved-buffer part of the diff changes.
    ls.runtime.inputs_changed()


def did_close(ls: ContenoxServer, params: types.DidCloseTextDocumentParams) -> None:
    path = ls.path_if_inside(params.text_document.uri)
    if path is None or ls.runtime is None:
        return
    # A closed buffer's unsaved text is discarded: re-read the file from disk.
    ls.runtime.disk_changed(path)
