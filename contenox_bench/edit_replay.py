"""Real commits replayed as an editor's edit stream, with a next-edit request after each hunk.

A task (``data/next_edit_tasks.json``, or a user's file of the same shape) is one file before
and after a commit. Its hunks (line spans that differ) are typed in order, top to bottom, as
an editor sends them: the hunk's old lines deleted at once (a selection and Delete), then its
new text typed a character at a time, one ``didChange`` each. After each hunk, a pause (the
edit settles) and one ``contenox/nextEdit`` at the cursor. The answer is scored against the
next hunk: an exact match is a suggestion that turns the document into the one with that hunk
applied. Task fields: ``id``, ``path`` (where the file goes in the workspace), ``before``,
``after``; others (``commit``, ``subject``, ``repo``) are carried along.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contenox_bench.lspclient import EditorClient

#: The tasks shipped with the bench: real commits of this repository.
BUILTIN_TASKS = Path(__file__).parent / "data" / "next_edit_tasks.json"


@dataclass(frozen=True)
class Hunk:
    start: int  # 0-based first line, in the text as it is when this hunk is typed
    old: tuple[str, ...]
    new: tuple[str, ...]


def load_tasks(path: Path | None) -> list[dict[str, Any]]:
    """The tasks of a file (``{"tasks": [...]}`` or a list); ValueError says what is wrong."""
    src = path or BUILTIN_TASKS
    try:
        doc = json.loads(src.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{src}: cannot read the tasks: {e}") from e
    tasks = doc.get("tasks") if isinstance(doc, dict) else doc
    if not isinstance(tasks, list) or not tasks:
        raise ValueError(f"{src}: expected {{\"tasks\": [...]}} with at least one task")
    for i, t in enumerate(tasks):
        missing = [k for k in ("id", "path", "before", "after")
                   if not isinstance(t, dict) or not isinstance(t.get(k), str)]
        if missing:
            raise ValueError(f"{src}: task {i} lacks the string field(s) {', '.join(missing)}")
        rel = Path(t["path"])
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"{src}: task {t['id']}: path must be relative, inside the workspace")
    return tasks


def hunks(before: str, after: str) -> list[Hunk]:
    """The line spans where ``after`` differs from ``before``, top to bottom; each ``start`` is
    where the hunk is in the text once the hunks above it are applied."""
    a, b = before.split("\n"), after.split("\n")
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append(Hunk(j1, tuple(a[i1:i2]), tuple(b[j1:j2])))
    return out


def apply_hunk(text: str, hunk: Hunk) -> str:
    lines = text.split("\n")
    return "\n".join([*lines[:hunk.start], *hunk.new, *lines[hunk.start + len(hunk.old):]])


def apply_edit(text: str, edit: dict[str, Any]) -> str:
    """``text`` with an LSP edit ``{range, text}`` applied (positions as str indices: the
    tasks' texts are what the bench typed; ASCII code keeps UTF-16 units the same)."""
    lines = text.split("\n")

    def offset(pos: dict[str, int]) -> int:
        return sum(len(x) + 1 for x in lines[:pos["line"]]) + pos["character"]

    r = edit["range"]
    return text[:offset(r["start"])] + edit["text"] + text[offset(r["end"]):]


Request = Callable[[int, str, tuple[int, int], Hunk | None], Awaitable[None]]


async def type_hunk(client: EditorClient, path: Path, text: str,
                    hunk: Hunk) -> tuple[str, int, int]:
    """Send ``hunk`` as an editor would: its old lines selected and deleted, a new line opened,
    its new text typed a character at a time (Enter between lines); (the new text, the
    cursor's line and column)."""
    lines = text.split("\n")
    row = hunk.start
    if row + len(hunk.old) >= len(lines):
        raise ValueError("a hunk that takes the file's last line is not replayed")
    if hunk.old:
        client.did_replace(path, (row, 0), (row + len(hunk.old), 0), "")
        del lines[row:row + len(hunk.old)]
    col = 0
    if hunk.new:
        client.did_change(path, row, 0, "\n")
        lines.insert(row, "")
    for k, new_line in enumerate(hunk.new):
        if k:  # Enter at the end of the line just typed
            client.did_change(path, row, col, "\n")
            lines.insert(row + 1, "")
            row, col = row + 1, 0
        for ch in new_line:
            client.did_change(path, row, col, ch)
            lines[row] += ch
            col += 1
        await asyncio.sleep(0)  # let the transport breathe between lines
    return "\n".join(lines), row, col


async def replay(client: EditorClient, root: Path, task: dict[str, Any], pause_s: float,
                 request: Request) -> str:
    """Open the task's file, type its hunks, call ``request(index, text, cursor, next_hunk)``
    after each; the final text (== ``after`` when the replay typed it faithfully)."""
    path = root / task["path"]
    text = task["before"]
    client.did_open(path, text)
    todo = hunks(task["before"], task["after"])
    for i, h in enumerate(todo):
        text, row, col = await type_hunk(client, path, text, h)
        await asyncio.sleep(pause_s)
        await request(i, text, (row, col), todo[i + 1] if i + 1 < len(todo) else None)
    return text


def write_workspace(root: Path, tasks: list[dict[str, Any]]) -> None:
    """Each task's file at its path (the ``before`` text), in a git-marked workspace."""
    (root / ".git").mkdir(parents=True, exist_ok=True)
    for t in tasks:
        p = root / t["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(t["before"], "utf-8")

