"""Open documents: text of a path (buffer if open, else disk), ranges, unsaved buffers.

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

#: Files larger than this are not read from disk for prompts.
MAX_FILE_BYTES = 1_000_000


def open_document(ws: Workspace, path: Path) -> TextDocument | None:
    """The open document for ``path``, matched by resolved path (URIs may differ in form)."""
    for doc in ws.text_documents.values():
        try:
            if Path(doc.path).resolve() == path:
                return doc
        except OSError:
            continue
    return None


def read_disk(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def text_of(ws: Workspace, path: Path) -> str | None:
    """Current text of ``path``: the editor buffer when open, otherwise the file on disk."""
    doc = open_document(ws, path)
    if doc is not None:
        return doc.source
    return read_disk(path)


def unsaved_buffers(ws: Workspace, roots: list[Path]) -> dict[Path, str]:
    """Open buffers (inside the workspace) whose text differs from the file on disk."""
    out: dict[Path, str] = {}
    for doc in ws.text_documents.values():
        try:
            path = Path(doc.path).resolve()
        except OSError:
            continue
        if not any(path == r or r in path.parents for r in roots):
            continue
        text = doc.source
        if read_disk(path) != text:
            out[path] = text
    return dict(sorted(out.items()))


def line_span(text: str, start_line: int, end_line: int) -> str:
    """Lines ``start_line..end_line`` (0-based, inclusive) of ``text``, clamped."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return ""
    s = max(0, min(start_line, len(lines) - 1))
    e = max(s, min(end_line, len(lines) - 1))
    return "".join(lines[s : e + 1])


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
