"""LSP incremental changes → tree-sitter byte edits.

LSP positions are (line, character) where the character unit is the negotiated position
encoding (UTF-16 code units by default, or UTF-8 bytes, or UTF-32 code points) and lines end at
``\\r\\n``, ``\\r`` or ``\\n``. tree-sitter wants UTF-8 byte offsets and (row, byte column)
points with rows counted at ``\\n`` only. Everything here works on the UTF-8 bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ENCODINGS = ("utf-16", "utf-8", "utf-32")
_EOL = re.compile(rb"\r\n|\r|\n")


class EditError(ValueError):
    """An edit that cannot be applied (malformed, or not matching the text)."""


@dataclass(frozen=True)
class ByteEdit:
    start_byte: int
    old_end_byte: int
    new_end_byte: int
    start_point: tuple[int, int]
    old_end_point: tuple[int, int]
    new_end_point: tuple[int, int]


def encode_text(text: str) -> bytes:
    # surrogatepass: a lone surrogate from a JSON-RPC string must not crash indexing.
    return text.encode("utf-8", "surrogatepass")


def point_at(source: bytes, offset: int) -> tuple[int, int]:
    """tree-sitter point (row, byte column) of a byte offset."""
    row = source.count(b"\n", 0, offset)
    return row, offset - (source.rfind(b"\n", 0, offset) + 1)


def _line_span(source: bytes, line: int, cr: bool) -> tuple[int, int] | None:
    """(start, content end) of LSP line ``line``, or None past the last line."""
    if cr:  # rare: \r and \r\n terminators need the regex
        begin = 0
        if line > 0:
            for i, eol in enumerate(_EOL.finditer(source), 1):
                if i == line:
                    begin = eol.end()
                    break
            else:
                return None
        found = _EOL.search(source, begin)
        return begin, (found.start() if found else len(source))
    if line == 0:
        begin = 0
    else:
        # split(maxsplit) runs in C and stops after ``line`` newlines.
        parts = source.split(b"\n", line)
        if len(parts) <= line:
            return None
        begin = len(source) - len(parts[-1])
    end = source.find(b"\n", begin)
    return begin, (len(source) if end == -1 else end)


def _column_to_bytes(line: bytes, character: int, encoding: str) -> int:
    if character <= 0:
        return 0
    if line.isascii():
        return min(character, len(line))
    if encoding == "utf-8":
        off = min(character, len(line))
        while 0 < off < len(line) and line[off] & 0xC0 == 0x80:
            off -= 1  # never split a code point
        return off
    text = line.decode("utf-8", "surrogatepass")
    if encoding == "utf-32":
        return len(encode_text(text[:character]))
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > character:
            return len(encode_text(text[:i]))
    return len(line)


def _offset_in(source: bytes, span: tuple[int, int] | None, character: int, enc: str) -> int:
    if span is None:  # past the last line: the end of the document
        return len(source)
    begin, end = span
    return begin + _column_to_bytes(source[begin:end], character, enc)


def offset_of(source: bytes, line: int, character: int, encoding: str) -> int:
    """Byte offset of an LSP position; past-the-end positions clamp as the spec says."""
    if line < 0 or character < 0:
        raise EditError(f"negative position {line}:{character}")
    return _offset_in(source, _line_span(source, line, b"\r" in source), character, encoding)


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _position(obj: Any) -> tuple[int, int]:
    line, character = _field(obj, "line"), _field(obj, "character")
    if not isinstance(line, int) or not isinstance(character, int):
        raise EditError(f"malformed position {obj!r}")
    return line, character


def apply_edits(
    source: bytes, edits: Sequence[Any], encoding: str = "utf-16"
) -> tuple[bytes, list[ByteEdit]]:
    """Apply LSP content changes in order; return the new text and one ``ByteEdit`` each.

    A change without a ``range`` replaces the whole document (LSP full-sync event).
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"position_encoding must be one of {ENCODINGS}, not {encoding!r}")
    out: list[ByteEdit] = []
    for edit in edits:
        text = _field(edit, "text")
        if not isinstance(text, str):
            raise EditError(f"edit without text: {edit!r}")
        new = encode_text(text)
        rng = _field(edit, "range")
        if rng is None:
            start, end = 0, len(source)
        else:
            sl, sc = _position(_field(rng, "start"))
            el, ec = _position(_field(rng, "end"))
            if min(sl, sc, el, ec) < 0:
                raise EditError(f"negative position in {rng!r}")
            cr = b"\r" in source
            span = _line_span(source, sl, cr)
            start = _offset_in(source, span, sc, encoding)
            if el != sl:
                span = _line_span(source, el, cr)
            end = _offset_in(source, span, ec, encoding)  # one-line edits: the same line
            if end < start:
                raise EditError(f"range end before start: {rng!r}")
        start_point = point_at(source, start)
        old_end_point = point_at(source, end)
        newlines = new.count(b"\n")
        if newlines:
            new_end_point = (start_point[0] + newlines, len(new) - new.rfind(b"\n") - 1)
        else:
            new_end_point = (start_point[0], start_point[1] + len(new))
        out.append(
            ByteEdit(start, end, start + len(new), start_point, old_end_point, new_end_point)
        )
        source = source[:start] + new + source[end:]
    return source, out


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo] and a[:hi + 1] != b[:hi + 1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def diff_edit(old: bytes, new: bytes) -> ByteEdit:
    """The single edit that turns ``old`` into ``new`` (their differing middle part)."""
    prefix = _common_prefix(old, new)
    suffix = _common_suffix(old, new, min(len(old), len(new)) - prefix)
    old_end, new_end = len(old) - suffix, len(new) - suffix
    return ByteEdit(
        prefix,
        old_end,
        new_end,
        point_at(old, prefix),
        point_at(old, old_end),
        point_at(new, new_end),
    )


def envelope(edits: Sequence[ByteEdit]) -> tuple[int, int]:
    """``[lo, hi)`` in final coordinates covering every byte the edits wrote or joined."""
    lo = hi = -1
    for e in edits:
        s, oe, ne = e.start_byte, e.old_end_byte, e.new_end_byte
        if lo < 0:
            lo, hi = s, ne
            continue
        if hi > s:
            hi = hi + ne - oe if hi >= oe else ne
        lo, hi = min(lo, s), max(hi, ne)
    return max(lo, 0), max(hi, 0)
