"""Pinned files and ranges (segment F).

Pins are kept in a deterministic order (path, then range) so the pinned segments are
byte-identical from turn to turn while their text does not change.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types


@dataclass(frozen=True)
class Pin:
    path: Path
    uri: str
    start_line: int | None = None
    """First line of a range pin (0-based), None for a whole-file pin."""
    end_line: int | None = None
    """Last line of a range pin (inclusive)."""

    @property
    def key(self) -> tuple[str, int, int]:
        return (str(self.path), -1 if self.start_line is None else self.start_line,
                -1 if self.end_line is None else self.end_line)

    @property
    def label(self) -> str:
        if self.start_line is None or self.end_line is None:
            return str(self.path)
        return f"{self.path}:{self.start_line + 1}-{self.end_line + 1}"

    def range(self) -> types.Range | None:
        if self.start_line is None or self.end_line is None:
            return None
        return types.Range(
            start=types.Position(line=self.start_line, character=0),
            end=types.Position(line=self.end_line + 1, character=0),
        )


def pin_for(path: Path, uri: str, rng: types.Range | None) -> Pin:
    """Pins are line-granular: a range pin covers the whole lines it touches."""
    if rng is None:
        return Pin(path, uri)
    end_line = rng.end.line
    if rng.end.character == 0 and rng.end.line > rng.start.line:
        end_line -= 1  # a selection ending at column 0 does not include that line
    return Pin(path, uri, rng.start.line, end_line)


class PinSet:
    """Thread-safe: read by the assembler thread, written by request handlers."""

    def __init__(self) -> None:
        self._pins: dict[tuple[str, int, int], Pin] = {}
        self._lock = threading.Lock()

    def add(self, pin: Pin) -> bool:
        with self._lock:
            if pin.key in self._pins:
                return False
            self._pins[pin.key] = pin
            return True

    def remove(self, path: Path, rng: types.Range | None) -> int:
        """Remove one range pin, or every pin of ``path`` when ``rng`` is None."""
        with self._lock:
            if rng is None:
                keys = [k for k, p in self._pins.items() if p.path == path]
            else:
                target = pin_for(path, "", rng).key
                keys = [target] if target in self._pins else []
            for k in keys:
                del self._pins[k]
            return len(keys)

    def is_pinned(self, path: Path) -> bool:
        with self._lock:
            return any(p.path == path for p in self._pins.values())

    def list(self) -> list[Pin]:
        with self._lock:
            return [self._pins[k] for k in sorted(self._pins)]

    def __len__(self) -> int:
        return len(self._pins)
