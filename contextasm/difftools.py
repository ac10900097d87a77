"""Unified-diff parsing and reduction to the hunks nearest the user's focus.

Used by the budget step for segment G: over budget, the diff keeps the hunks closest to the
cursor (same file, smallest line distance) and those that mention words of the question, in
their original order, each under its file header.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


@dataclass
class Hunk:
    lines: list[str]  # header line first
    new_start: int
    new_len: int


@dataclass
class FileDiff:
    header: list[str]
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        """Best-effort workspace path of this file section ('' when unknown)."""
        for line in self.header:
            if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
                return _strip_prefix(line[4:])
        for line in self.header:
            if line.startswith("--- ") and not line.startswith("--- /dev/null"):
                return _strip_prefix(line[4:])
        for line in self.header:
            if line.startswith("diff "):
                parts = line.split()
                if len(parts) >= 3:
                    return _strip_prefix(parts[-1])
        return ""


@dataclass
class ParsedDiff:
    preamble: list[str]
    files: list[FileDiff]

    def units(self) -> list[tuple[int, int | None]]:
        """(file index, hunk index) of every reducible unit; a hunkless file is one unit."""
        out: list[tuple[int, int | None]] = []
        for fi, f in enumerate(self.files):
            if f.hunks:
                out.extend((fi, hi) for hi in range(len(f.hunks)))
            else:
                out.append((fi, None))
        return out


def _strip_prefix(name: str) -> str:
    name = name.split("\t", 1)[0].strip()
    # Labels like "b/x.py (unsaved)": keep only the path.
    name = name.split(" (", 1)[0]
    if name.startswith(("a/", "b/")):
        name = name[2:]
    return name


def parse_diff(text: str) -> ParsedDiff:
    """Split unified-diff text into file sections and hunks (tolerant of foreign lines)."""
    lines = text.splitlines()
    parsed = ParsedDiff(preamble=[], files=[])
    current: FileDiff | None = None
    old_left = new_left = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if current is not None and current.hunks and (old_left > 0 or new_left > 0):
            # Inside a hunk the counts decide, so a removed line "-- x" is never a header.
            hunk = current.hunks[-1]
            if line.startswith(" ") or line == "":
                old_left -= 1
                new_left -= 1
            elif line.startswith("-"):
                old_left -= 1
            elif line.startswith("+"):
                new_left -= 1
            elif not line.startswith("\\"):
                old_left = new_left = 0
                continue  # not a hunk line: reprocess it as a header
            hunk.lines.append(line)
            i += 1
            continue
        starts_file = line.startswith("diff ") or (
            line.startswith("--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+++ ")
            and not (current is not None and _owns_pair(current, line, lines[i + 1]))
        )
        m = _HUNK_RE.match(line)
        if starts_file:
            current = FileDiff(header=[line])
            parsed.files.append(current)
        elif m and current is not None:
            old_left = int(m.group(2)) if m.group(2) is not None else 1
            new_left = int(m.group(4)) if m.group(4) is not None else 1
            current.hunks.append(Hunk(lines=[line], new_start=int(m.group(3)), new_len=new_left))
        elif current is None:
            parsed.preamble.append(line)
        elif current.hunks:
            current.hunks[-1].lines.append(line)  # e.g. "\ No newline at end of file"
        else:
            current.header.append(line)
        i += 1
    return parsed


def _owns_pair(f: FileDiff, minus: str, plus: str) -> bool:
    """Whether a ``---``/``+++`` pair continues ``f``'s ``diff ...`` header (same path)."""
    if f.hunks or not f.header[0].startswith("diff "):
        return False
    if any(h.startswith("--- ") for h in f.header):
        return False
    paths = {_strip_prefix(x[4:]) for x in (minus, plus)} - {"/dev/null"}
    words = {_strip_prefix(w) for w in f.header[0].split()[2:]}
    return bool(paths & words)


def focus_order(
    parsed: ParsedDiff,
    *,
    file_path: str | None,
    line: int | None,
    question: str,
) -> list[tuple[int, int | None]]:
    """Units sorted most relevant first: cursor's file by line distance, then question words."""
    words = {w.lower() for w in _WORD_RE.findall(question)}
    qlower = question.lower()
    focus = _norm(file_path) if file_path else None
    scored: list[tuple[tuple[int, int, int, int], tuple[int, int | None]]] = []
    for order, (fi, hi) in enumerate(parsed.units()):
        f = parsed.files[fi]
        path = _norm(f.path)
        body = f.hunks[hi].lines if hi is not None else f.header
        mentions = sum(1 for w in words if any(w in b.lower() for b in body))
        same_file = (
            focus is not None
            and bool(path)
            and (path == focus or path.endswith("/" + focus) or focus.endswith("/" + path))
        )
        if same_file:
            distance = _distance(f.hunks[hi], line) if hi is not None and line else 0
            key = (0, distance, -mentions, order)
        elif mentions or (path and (path in qlower or path.rsplit("/", 1)[-1] in qlower)):
            key = (1, 0, -mentions, order)
        else:
            key = (2, 0, 0, order)
        scored.append((key, (fi, hi)))
    scored.sort(key=lambda item: item[0])
    return [unit for _, unit in scored]


def _norm(path: str) -> str:
    return path.replace("\\", "/").lstrip("./")


def _distance(hunk: Hunk, line: int) -> int:
    start, end = hunk.new_start, hunk.new_start + max(hunk.new_len, 1) - 1
    if start <= line <= end:
        return 0
    return start - line if line < start else line - end


def render_units(parsed: ParsedDiff, keep: Sequence[tuple[int, int | None]]) -> str:
    """The diff restricted to ``keep``, in original order, each file header once."""
    wanted = set(keep)
    out: list[str] = list(parsed.preamble)
    for fi, f in enumerate(parsed.files):
        hunks = [h for hi, h in enumerate(f.hunks) if (fi, hi) in wanted]
        if not hunks and (fi, None) not in wanted:
            continue
        out.extend(f.header)
        for h in hunks:
            out.extend(h.lines)
    return "\n".join(out) + ("\n" if out else "")
