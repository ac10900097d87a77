"""Where a test's or a program's output points into the workspace: the frames of a Python
traceback (``File "src/pkg/mod.py", line 12, in parse``) and pytest's short lines
(``src/pkg/mod.py:12: in parse``, ``src/pkg/mod.py:12: ValueError``).

A failing test's traceback names the functions the failure ran through, the innermost last:
where a bug is, more directly than any word of the question. The question's code part shows
the definitions at these places first (``code_segment.code_inputs``). Only files inside the
workspace count; a frame elsewhere (the standard library, site-packages) is passed over,
never read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from contenox_lsp.paths import is_under
from contextasm.inputs import TOOL_OUTPUT_KINDS

#: Output kinds whose text is searched for frames (an earlier turn's answer is not evidence).
FRAME_KINDS = frozenset(TOOL_OUTPUT_KINDS)
#: Places inside the workspace taken from one turn's outputs at most (the innermost frames).
MAX_PLACES = 4

_TRACEBACK = re.compile(r'^[ \t]*File "([^"\n]+)", line (\d+)(?:, in ([^\s,]+))?', re.M)
_PYTEST = re.compile(r"^([^\s:\"'][^:\n]*?\.pyi?):(\d+):(?: in ([^\s,]+))?", re.M)


@dataclass(frozen=True)
class Frame:
    """One place an output names: the path as written, its 1-based line, the function."""

    path: str
    line: int
    name: str | None = None


def frames_in(text: str) -> list[Frame]:
    """The frames in ``text`` in the order they appear (a traceback's innermost is last)."""
    found: list[tuple[int, Frame]] = []
    for pattern in (_TRACEBACK, _PYTEST):
        for m in pattern.finditer(text):
            line = int(m.group(2))
            if line >= 1:
                found.append((m.start(), Frame(m.group(1).strip(), line, m.group(3))))
    return [frame for _, frame in sorted(found, key=lambda pf: pf[0])]


def _inside(path_text: str, roots: Sequence[Path]) -> Path | None:
    """The file ``path_text`` names inside one of ``roots`` (absolute, or relative to a
    root): checked by its text first, so a path elsewhere is never touched, then with
    symlinks resolved; None when it is outside every root or not a file."""
    written = Path(path_text)
    candidates = [written] if written.is_absolute() else [root / written for root in roots]
    for candidate in candidates:
        lexical = Path(os.path.normpath(candidate))
        if not any(is_under(lexical, root) for root in roots):
            continue
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError):
            continue
        if any(is_under(resolved, root) for root in roots) and resolved.is_file():
            return resolved
    return None


def workspace_places(outputs: Iterable[tuple[str, str, str]], roots: Sequence[Path],
                     limit: int = MAX_PLACES) -> tuple[tuple[str, int], ...]:
    """``(absolute path, 0-based line)`` of the frames in ``outputs`` (``(kind, source,
    text)``, kinds of ``FRAME_KINDS``) that lie in files inside ``roots``: innermost first,
    each place once, at most ``limit``."""
    resolved_roots = [r.resolve() for r in roots]
    places: list[tuple[str, int]] = []
    for kind, _source, text in outputs:
        if kind not in FRAME_KINDS:
            continue
        for frame in reversed(frames_in(text)):
            if len(places) >= limit:  # each frame checked costs a path resolve
                return tuple(places)
            path = _inside(frame.path, resolved_roots)
            place = (str(path), frame.line - 1) if path is not None else None
            if place is not None and place not in places:
                places.append(place)
    return tuple(places)
