"""The edit history: the developer's recent changes, grouped into undo-sized steps.

Every ``didChange`` gives the document's new text. Changes are grouped into steps the way an
editor's undo does: a step ends at a pause (``PAUSE_S``), when the next change is elsewhere
(more than ``JUMP_LINES`` lines away, or another file), or after a change that typed a newline.
A change that touches more than ``BURST_LINES`` lines at once (a checkout, a formatter, a paste
of a file) is not typing: it ends the open step and is left out. At most ``MAX_STEPS`` steps are
kept, oldest dropped first (``dropped`` counts them).

A finished step never changes, and new steps are appended after it, so a prompt that renders
the steps in order changes only at its end between requests (the open step is rendered last).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PAUSE_S = 1.5
JUMP_LINES = 8
BURST_LINES = 40
MAX_STEPS = 8


@dataclass(frozen=True)
class Step:
    """One undo-sized change of ``path``: lines ``start``.. of the text before it (``before``)
    became ``after``; ``accepted``: it was a suggestion the user took."""

    path: str
    start: int
    before: tuple[str, ...]
    after: tuple[str, ...]
    accepted: bool = False

    def hunk(self) -> str:
        """The step as one unified-diff hunk (``@@`` header, ``-`` and ``+`` lines)."""
        return (f"@@ -{self.start + 1},{len(self.before)} +{self.start + 1},{len(self.after)} @@"
                + (" accepted suggestion" if self.accepted else "") + "\n"
                + "".join(f"-{line}\n" for line in self.before)
                + "".join(f"+{line}\n" for line in self.after))

    def unified(self) -> str:
        """The step as a unified diff with the file path."""
        return f"--- a/{self.path}\n+++ b/{self.path}\n" + self.hunk()


def common_ends(a: Sequence[object], b: Sequence[object]) -> tuple[int, int]:
    """How many leading and (then) trailing items ``a`` and ``b`` share: what is left
    between them is the one span where they differ."""
    lead = 0
    while lead < min(len(a), len(b)) and a[lead] == b[lead]:
        lead += 1
    trail = 0
    while trail < min(len(a), len(b)) - lead and a[-1 - trail] == b[-1 - trail]:
        trail += 1
    return lead, trail


def changed_lines(old: str, new: str) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """(first changed line, old lines, new lines) of the one span where ``old`` and ``new``
    differ (common leading and trailing lines taken off)."""
    a, b = old.split("\n"), new.split("\n")
    lead, trail = common_ends(a, b)
    return lead, tuple(a[lead:len(a) - trail]), tuple(b[lead:len(b) - trail])


@dataclass
class _Open:
    path: str
    base: str  # the text before the step's first change
    text: str  # the text after its last change
    line: int  # where its last change was
    at: float
    closed: bool = False  # its last change typed a newline: the next change starts a step


class EditHistory:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._texts: dict[str, str] = {}
        self._steps: list[Step] = []
        self._open: _Open | None = None
        self.dropped = 0
        """Steps dropped from the front (bounded history), since the start."""
        self.bursts = 0
        """Changes left out as not typing."""
        self._accepting: tuple[str, str] | None = None  # (path, text) an accept will produce

    def opened(self, path: str, text: str) -> None:
        """The document's text when the editor opened it (no step)."""
        self._texts[path] = text

    def expect_accept(self, path: str, text: str) -> None:
        """The next change of ``path`` to ``text`` is an accepted suggestion (marked so)."""
        self._accepting = (path, text)

    def changed(self, path: str, text: str) -> None:
        """The document's text after a ``didChange``."""
        old = self._texts.get(path)
        self._texts[path] = text
        if old is None or old == text:
            return
        now = self._clock()
        start, before, after = changed_lines(old, text)
        accepted = self._accepting == (path, text)
        self._accepting = None
        if max(len(before), len(after)) > BURST_LINES:
            self._close()
            self.bursts += 1
            return
        op = self._open
        if op is not None and (op.closed or op.path != path or now - op.at > PAUSE_S
                               or abs(start - op.line) > JUMP_LINES or accepted):
            self._close()
            op = None
        if op is None:
            op = self._open = _Open(path, old, text, start, now)
        op.text, op.line, op.at = text, start, now
        op.closed = len(after) > len(before)  # a newline was typed: the step ends with it
        if accepted:
            self._close(accepted=True)

    def _close(self, accepted: bool = False) -> None:
        op, self._open = self._open, None
        if op is None:
            return
        step = _step(op, accepted)
        if step is not None:
            self._steps.append(step)
            if len(self._steps) > MAX_STEPS:
                del self._steps[0]
                self.dropped += 1

    def steps(self) -> list[Step]:
        """The finished steps, oldest first, then the open one (if it changed anything)."""
        out = list(self._steps)
        if self._open is not None:
            step = _step(self._open, False)
            if step is not None:
                out.append(step)
        return out

    def last_before(self, path: str) -> str | None:
        """``path``'s text before its most recent step (what undoing that step gives)."""
        if self._open is not None and self._open.path == path:
            return self._open.base
        for step in reversed(self._steps):
            if step.path == path:
                text = self._texts.get(path)
                if text is None:
                    return None
                lines = text.split("\n")
                return "\n".join([*lines[:step.start], *step.before,
                                  *lines[step.start + len(step.after):]])
        return None

    def text(self, path: str) -> str | None:
        return self._texts.get(path)


def _step(op: _Open, accepted: bool) -> Step | None:
    start, before, after = changed_lines(op.base, op.text)
    if before == after:
        return None
    return Step(op.path, start, before, after, accepted)
