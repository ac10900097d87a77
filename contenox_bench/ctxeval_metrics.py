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
``placements`` says, per changed definition, where the prompt shows it (``PLACES``): what the
three means do not say about why a definition was missed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contextasm import Assembly, SegmentKind
from contextasm.render import HEADERS_HEADING

_MAP_FILE = re.compile(r"^(\S[^\n]*):$")
_SNIPPET = re.compile(r"^(\S+):(\d+) ")
_PIN = re.compile(r"^# Pinned: (\S+) lines ")
_USER_FILE = re.compile(r"^File: (\S+?)(?:, line \d+)?$")


#: The three measures, in the order reports give them.
MEASURES = ("file_recall", "def_located", "body_present")
#: Where a prompt can show a changed definition, the most complete first: its code in a code
#: segment (whole, or a long one's head and focus lines), its header in a code segment's list
#: of headers, the code around the cursor, a pinned range, the repo map.
PLACES = ("code", "header", "cursor", "pin", "map")


@dataclass(frozen=True)
class Part:
    """Text shown for one file, and where (one of ``PLACES``)."""

    path: str
    text: str
    place: str = "code"


def _split(text: str, header: re.Pattern[str], place: str) -> list[Part]:
    parts: list[Part] = []
    path: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):
        m = header.match(line)
        if m:
            if path is not None:
                parts.append(Part(path, "\n".join(lines), place))
            path, lines = m.group(1), [line]
        elif path is not None:
            lines.append(line)
    if path is not None:
        parts.append(Part(path, "\n".join(lines), place))
    return parts


def parts_of(asm: Assembly) -> list[Part]:
    """The prompt's text grouped by the file it shows."""
    out: list[Part] = []
    for seg in asm.segments:
        if seg.kind is SegmentKind.REPO_MAP:
            out += _split(seg.text, _MAP_FILE, "map")
        elif seg.kind is SegmentKind.CODE:
            # The list of headers follows every definition shown whole: its heading's last
            # occurrence is the list's, whatever a definition's code contains.
            code, heading, headers = seg.text.rpartition(HEADERS_HEADING)
            if not heading:
                code, headers = headers, ""
            out += _split(code, _SNIPPET, "code") + _split(headers, _SNIPPET, "header")
        elif seg.kind is SegmentKind.PINNED:
            out += _split(seg.text, _PIN, "pin")
        elif seg.kind is SegmentKind.USER:
            out += _split(seg.text, _USER_FILE, "cursor")
    return out


def _def_line(kind: str, name: str) -> re.Pattern[str]:
    word = "class" if kind == "class" else "def"
    return re.compile(rf"^\s*(?:async\s+)?{word}\s+{re.escape(name)}\b", re.M)


def placements(asm: Assembly, task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per changed definition of ``task``: ``file``, ``name`` (its qualified name when the
    task has one), ``shown`` (the first of ``PLACES`` whose part for its file has its
    ``def``/``class`` line; None: not located) and ``body`` (its ``body_line`` is in the prompt
    as a whole line; None: it has none to look for)."""
    parts = parts_of(asm)
    whole_lines = {ln.strip() for ln in asm.text.split("\n")}
    out: list[dict[str, Any]] = []
    for d in task["gt_defs"]:
        pattern = _def_line(d["kind"], d["name"])
        places = {p.place for p in parts if p.path == d["file"] and pattern.search(p.text)}
        line = d.get("body_line")
        body = line.strip() in whole_lines if isinstance(line, str) and line.strip() else None
        out.append({"file": d["file"], "name": d.get("qualname") or d["name"],
                    "shown": next((p for p in PLACES if p in places), None), "body": body})
    return out


def score(asm: Assembly, task: Mapping[str, Any],
          placed: Sequence[Mapping[str, Any]] | None = None) -> dict[str, float | None]:
    """The three measures of one assembled prompt for one task (each 0..1; ``body_present``
    is None when no changed definition has a body line to look for). ``placed``:
    ``placements(asm, task)`` when the caller has it already."""
    text = asm.text
    files = list(task["gt_files"])
    recall = sum(1 for f in files if f in text) / len(files) if files else 0.0
    if placed is None:
        placed = placements(asm, task)
    located = sum(1 for d in placed if d["shown"] is not None)
    bodies = [d["body"] for d in placed if d["body"] is not None]
    return {"file_recall": recall, "def_located": located / (len(placed) or 1),
            "body_present": sum(bodies) / len(bodies) if bodies else None}


def placement_shares(placed: Iterable[Sequence[Mapping[str, Any]]]) -> dict[str, float]:
    """Of each task's ``placements`` in ``placed``: per place (``PLACES``, then ``"none"``:
    not located) the share of the changed definitions shown there, best place only, each
    task weighing one (its definitions share it), as ``def_located`` weighs them."""
    shares = dict.fromkeys((*PLACES, "none"), 0.0)
    tasks = 0
    for defs in placed:
        if not defs:
            continue
        tasks += 1
        for d in defs:
            shares[d["shown"] or "none"] += 1 / len(defs)
    return {k: v / tasks if tasks else 0.0 for k, v in shares.items()}


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
