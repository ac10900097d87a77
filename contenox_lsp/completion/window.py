"""The local window of a completion: the code before and after the cursor.

The window starts at a line that is a multiple of ``WINDOW_ALIGN`` and at least
``LINES_BEFORE`` lines above the cursor line, so it stays put while the user types on a line
and while the cursor moves down (the start only jumps every ``WINDOW_ALIGN`` lines): the
prompt then grows at its end, and a request prefills only what was typed since the last one.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Lines of code before the cursor line the window holds at least.
LINES_BEFORE = 48
#: The window's first line is a multiple of this (the boundary that stays put).
WINDOW_ALIGN = 32
#: Lines after the cursor line the fill-in-the-middle suffix holds.
LINES_AFTER = 16


@dataclass(frozen=True)
class At:
    """Where a completion is for: the document, its version, the cursor (client units)."""

    uri: str
    version: int | None
    line: int
    character: int


@dataclass(frozen=True)
class CursorWindow:
    """The document around the cursor (0-based ``line``; ``column`` in characters)."""

    line: int
    start_line: int
    before: str  # from start_line up to the cursor (the current line up to the cursor last)
    after: str  # the rest of the current line and LINES_AFTER lines after it
    line_prefix: str  # the current line up to the cursor
    line_suffix: str  # the current line after the cursor

    @property
    def indent(self) -> str:
        """The indentation of the current line (what a block continues at)."""
        return self.line_prefix[: len(self.line_prefix) - len(self.line_prefix.lstrip())]

    @property
    def multiline(self) -> bool:
        """A multi-line trigger: nothing but indentation before the cursor and nothing after
        it on the line (a new line or an empty block). Otherwise the completion is the rest of
        the current line."""
        return not self.line_prefix.strip() and not self.line_suffix.strip()


def window_start(line: int) -> int:
    return max(0, (line - LINES_BEFORE) // WINDOW_ALIGN * WINDOW_ALIGN)


def cursor_window(text: str, line: int, column: int) -> CursorWindow:
    """The window of ``text`` for a cursor at ``line``/``column`` (both clamped)."""
    lines = text.split("\n")
    line = max(0, min(line, len(lines) - 1))
    current = lines[line]
    column = max(0, min(column, len(current)))
    start = window_start(line)
    prefix, suffix = current[:column], current[column:]
    before = "".join(ln + "\n" for ln in lines[start:line]) + prefix
    after_lines = lines[line + 1 : line + 1 + LINES_AFTER]
    after = suffix + "".join("\n" + ln for ln in after_lines)
    return CursorWindow(line, start, before, after, prefix, suffix)
