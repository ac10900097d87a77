"""A tiny progress bar on stderr (tqdm is not a dependency); stdout stays clean."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts planned work units; redraws one line on a terminal, prints lines otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 28) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.monotonic()
        self.label = ""
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_line = 0.0

    def add_total(self, units: int) -> None:
        self.total += max(0, units)

    def step(self, label: str, units: int = 1) -> None:
        """Mark ``units`` done and show ``label`` as what is running next."""
        self.done = min(self.total, self.done + units)
        self.label = label
        self._draw()

    def note(self, label: str) -> None:
        self.label = label
        self._draw()

    def _draw(self) -> None:
        frac = self.done / self.total
        filled = int(frac * self.width)
        elapsed = time.monotonic() - self.t0
        line = (
            f"bench [{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:3.0f}% "
            f"{_clock(elapsed)}  {self.label}"
        )
        if self._tty:
            self.stream.write("\r\x1b[2K" + line[:160])
        else:
            # Not a terminal (CI, a log file): one line per update, at most every 2 seconds.
            now = time.monotonic()
            if now - self._last_line < 2.0 and self.done < self.total:
                return
            self._last_line = now
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        self.done = self.total
        self.label = "done"
        self._draw()
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s"
