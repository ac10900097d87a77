"""Signature text of a definition: the header the repo map shows in place of the body.

The signature runs from the start of the definition (including what wraps it on the same
line, like ``export``) up to its body (so a body, docstring or comment edit never changes
it), without comments and with whitespace collapsed (so re-indenting or re-wrapping a header
does not change the map either).
"""

from __future__ import annotations

import re

import tree_sitter as ts

from repo_index.languages import LanguageSpec
from repo_index.syntax import header_anchor

MAX_CHARS = 200
# A definition without a body (constant, prototype, type alias) spanning this many lines or
# more shows only its first line (and the name's line): ``X = {`` rather than a whole table.
MAX_BODYLESS_LINES = 3
_BODY_HOLDERS = ("value", "right")  # JS ``const f = () => {}``, ``a.b = function () {}``
# Wrapped headers collapse to ``f( a, b )``: drop spaces just inside brackets, so that
# re-wrapping a header does not change it.
_OPEN_SPACE = re.compile(r"([(\[{]) ")
_SPACE_CLOSE = re.compile(r" ([)\]}])")
_SPACED = ("( ", "[ ", "{ ", " )", " ]", " }")


def owner_of(spec: LanguageSpec, node: ts.Node) -> ts.Node:
    """The node whose extent is the definition: for a C declarator, the declaration or
    function definition around it (through any pointer/reference declarators)."""
    if spec.signature_owners and node.type.endswith("declarator"):
        up = node.parent
        while up is not None and up.type.endswith("declarator"):
            up = up.parent
        if up is not None and up.type in spec.signature_owners:
            return up
    return node


def _body(owner: ts.Node) -> ts.Node | None:
    body = owner.child_by_field_name("body")
    if body is not None:
        return body
    for name in _BODY_HOLDERS:
        holder = owner.child_by_field_name(name)
        if holder is not None:
            body = holder.child_by_field_name("body")
            if body is not None:
                return body
    return None


def signature(spec: LanguageSpec, source: bytes, owner: ts.Node, name: ts.Node) -> str:
    anchor = header_anchor(owner)
    start = anchor.start_byte
    body = _body(owner)
    cut: tuple[int, int] | None = None  # a middle part left out, shown as "…"
    if body is not None and body.start_byte >= name.end_byte:
        end = body.start_byte
    else:
        end = owner.end_byte
        if source.count(b"\n", start, end) >= MAX_BODYLESS_LINES:
            # Long and bodyless (a table, a struct typedef): first line, and the name's line
            # when the name comes later (``typedef struct { … } point_t;``).
            first_eol = source.find(b"\n", start, end)
            name_line = source.rfind(b"\n", 0, name.start_byte) + 1
            if name_line <= first_eol:
                end = first_eol
            else:
                cut = (first_eol, name_line)
                eol = source.find(b"\n", name.end_byte, end)
                end = end if eol == -1 else eol
    raw = _text(spec, anchor, source, start, end, cut).replace(b"\\\n", b" ")
    text = " ".join(raw.decode("utf-8", "replace").split())
    if any(pair in text for pair in _SPACED):
        text = _SPACE_CLOSE.sub(r"\1", _OPEN_SPACE.sub(r"\1", text))
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 1].rstrip() + "…"
    return text


def _text(
    spec: LanguageSpec,
    owner: ts.Node,
    source: bytes,
    start: int,
    end: int,
    cut: tuple[int, int] | None,
) -> bytes:
    if cut is not None:
        return (
            _text(spec, owner, source, start, cut[0], None)
            + " … ".encode()
            + _text(spec, owner, source, cut[1], end, None)
        )
    raw = source[start:end]
    if any(marker in raw for marker in spec.comment_markers):
        raw = _without_comments(owner, source, start, end)
    return raw


def _without_comments(owner: ts.Node, source: bytes, start: int, end: int) -> bytes:
    """``source[start:end]`` minus the comment nodes inside it (rare: markers in headers)."""
    cuts: list[tuple[int, int]] = []
    stack = [owner]
    while stack:
        node = stack.pop()
        if node.end_byte <= start or node.start_byte >= end:
            continue
        if "comment" in node.type:
            cuts.append((max(node.start_byte, start), min(node.end_byte, end)))
            continue
        stack.extend(node.children)
    if not cuts:
        return source[start:end]
    cuts.sort()
    parts: list[bytes] = []
    pos = start
    for a, b in cuts:
        parts.append(source[pos:a])
        parts.append(b" ")
        pos = b
    parts.append(source[pos:end])
    return b"".join(parts)
