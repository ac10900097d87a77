"""Open documents: the buffer of a path, exact client ranges, incremental changes.

The document store itself is pygls's ``Workspace`` (incremental sync, position codec); this
module only adds the lookups the context assembly needs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import TextDocument, Workspace

logger = logging.getLogger(__name__)

def open_document(ws: Workspace, path: Path) -> TextDocument | None:
    """The open document for ``path``, matched by resolved path (URIs may differ in form)."""
    for doc in ws.text_documents.values():
        try:
            if Path(doc.path).resolve() == path:
                return doc
        except OSError:
            continue
    return None


def text_in_range(doc: TextDocument, rng: types.Range) -> str:
    """Exact text of a client range (position units per the negotiated encoding)."""
    start = doc.offset_at_position(rng.start)
    end = doc.offset_at_position(rng.end)
    return doc.source[start:end]


def change_to_edit(change: Any) -> dict[str, Any] | None:
    """An incremental content change as a plain ``{range, text}`` dict (None for full sync)."""
    if isinstance(change, types.TextDocumentContentChangePartial):
        r = change.range
        return {
            "range": {
                "start": {"line": r.start.line, "character": r.start.character},
                "end": {"line": r.end.line, "character": r.end.character},
            },
            "text": change.text,
        }
    return None


def encoding_name(ws: Workspace) -> str:
    """The negotiated position encoding as its LSP string ("utf-8", "utf-16")."""
    enc = ws.position_encoding or types.PositionEncodingKind.Utf16
    return str(getattr(enc, "value", enc))


def uri_for(path: Path) -> str:
    return from_fs_path(str(path)) or path.as_uri()
