"""What a context shows, file by file, and the three measures of the context eval.

- **file recall**: the share of the task's ground-truth files whose path appears in the prompt;
- **definition located**: the share of changed definitions whose ``def NAME``/``class NAME``
  line appears in a part of the prompt shown for their file (a repo-map file section, a code
  snippet, a pin, the cursor context);
- **body present**: the share of changed definitions whose ``body_line`` (a line that occurs
  once in the repository) appears in the prompt as a whole line. A definition without one
  (``body_line: null``: no line of it is unique) cannot be scored for it and is left out of
  the share; a task with none gets ``None`` (not scored), not a zero.

Each is averaged over tasks; ``bootstrap`` gives a percentile interval over tasks.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextasm import Assembly, SegmentKind

_MAP_FILE = re.compile(r"^(\S[^\n]*):$")
_SNIPPET = re.compile(r"^(\S+):(\d+) ")
_PIN = re.compile(r"^# Pinned: (\S+) lines ")
_USER_FILE = re.compile(r"^File: (\S+?)(?:, line \d+)?$")


@dataclass(frozen=True)
class Part:
    """Text shown for one file."""

    path: str
    text: str


def _split(text: str, header: re.Pattern[str]) -> list[Part]:
    parts: list[Part] = []
    path: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        m = header.match(line)
        if m:
            if path is not None:
                parts.append(Part(path, "\n".join(lines)))
            path, lines = m.group(1), [line]
        elif path is not None:
            lines.append(line)
    if path is not None:
        parts.append(Part(path, "\n".join(lines)))
    return parts


def parts_of(asm: Assembly) -> list[Part]:
    """The prompt's text grouped by the file it shows."""
    out: list[Part] = []
    for seg in asm.segments:
        if seg.kind is SegmentKind.REPO_MAP:
            out += _split(seg.text, _MAP_FILE)
        elif seg.kind is SegmentKind.CODE:
            out += _split(seg.text, _SNIPPET)
        elif seg.kind is SegmentKind.PINNED:
            out += _split(seg.text, _PIN)
        elif seg.kind is SegmentKind.USER:
            out += _split(seg.text, _USER_FILE)
    return out


def _def_line(kind: str, name: str) -> re.Pattern[str]:
    word = "class" if kind == "class" else "def"
    return re.compile(rf"^\s*(?:async\s+)?{word}\s+{re.escape(name)}\b", re.M)


def score(asm: Assembly, task: Mapping[str, Any]) -> dict[str, float | None]:
    """The three measures of one assembled prompt for one task (each 0..1; ``body_present``
    is None when no changed definition has a body line to look for)."""
    text = asm.text
    parts = parts_of(asm)
    files = list(task["gt_files"])
    recall = sum(1 for f in files if f in text) / len(files) if files else 0.0
    defs = list(task["gt_defs"])
    located = body = 0
    whole_lines = {ln.strip() for ln in text.split("\n")}
    bodies = [line.strip() for d in defs if isinstance(line := d.get("body_line"), str)
              and line.strip()]
    for d in defs:
        pattern = _def_line(d["kind"], d["name"])
        if any(p.path == d["file"] and pattern.search(p.text) for p in parts):
            located += 1
    body = sum(1 for line in bodies if line in whole_lines)
    n = len(defs) or 1
    return {"file_recall": recall, "def_located": located / n,
            "body_present": body / len(bodies) if bodies else None}


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def bootstrap(xs: Sequence[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over tasks (seeded: the same run, the same
    interval)."""
    if not xs:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(xs)
    means = sorted(mean([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def percentile(xs: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    s = sorted(xs)
    if not s:
        return 0.0
    k = max(0, min(len(s) - 1, round(q / 100 * len(s) + 0.5) - 1))
    return s[k]
