"""A raw model continuation → the text an editor shows as ghost text (or nothing).

What users expect of inline completion: a single-line trigger stops at the end of the line; a
multi-line one stops where the indentation returns to the enclosing level; text that repeats
what follows the cursor is cut; a repeat of the line before the cursor is dropped; whitespace
alone is never offered.
"""

from __future__ import annotations

from contenox_lsp.completion.window import CursorWindow

#: At most this many lines in a multi-line completion.
MAX_LINES = 8


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _cut_overlap(text: str, after: str) -> str:
    """Drop the end of ``text`` that the document already has right after the cursor."""
    if not after:
        return text
    for k in range(min(len(text), len(after)), 0, -1):
        if text.endswith(after[:k]) and after[:k].strip():
            return text[: len(text) - k]
    return text


def _repeats(line: str, previous_line: str | None) -> bool:
    """The model wrote the line above the cursor again."""
    return previous_line is not None and bool(previous_line.strip()) \
        and line.strip() == previous_line.strip()


def finish(raw: str, win: CursorWindow, previous_line: str | None) -> str | None:
    """The completion to show for ``raw`` at ``win``; None when nothing is worth showing."""
    text = raw.replace("\r\n", "\n")
    if not win.multiline:
        text = text.split("\n", 1)[0]
        text = _cut_overlap(text, win.line_suffix)
    else:
        kept: list[str] = []
        base = len(win.line_prefix.expandtabs())
        for i, line in enumerate(text.split("\n")):
            if i > 0 and line.strip() and _indent_of(line.expandtabs()) < base:
                break  # back at the enclosing level: the block is complete
            if i > 0 and not line.strip() and kept and not kept[-1].strip():
                break  # two blank lines: the model moved on
            kept.append(line)
            if len(kept) >= MAX_LINES:
                break
        while kept and not kept[-1].strip():
            kept.pop()
        if kept and _repeats(win.line_prefix + kept[0], previous_line):
            kept = kept[1:]
            if kept:  # the next line now starts at the cursor, after its indentation
                first = kept[0]
                kept[0] = (first[len(win.line_prefix):] if first.startswith(win.line_prefix)
                           else first.lstrip())
        text = "\n".join(kept)
        text = _cut_overlap(text, win.line_suffix)
    text = text.rstrip()
    if not text.strip():
        return None
    return text
