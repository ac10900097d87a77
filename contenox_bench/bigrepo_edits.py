"""The edits of the bigrepo section: a signature change and a body edit of one function, as
the single LSP change event an editor would send (found with ``ast``, checked to parse)."""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXTRA_PARAM = "bench_extra: int = 0"  # a type reference too: the graph changes
BODY_LINE = "_bench_edit = 1"
MAX_FILE_BYTES = 128 * 1024  # realistic editing targets; a huge file's parse is its own story
_DEF = re.compile(r"^\s*(async\s+)?def\s+\w+\s*\(")
_Fn = ast.FunctionDef | ast.AsyncFunctionDef
_SHOWN_DEF = re.compile(r"^\s+(?:async\s+)?def\s+(\w+)")


@dataclass(frozen=True)
class Edit:
    path: str
    kind: str  # "signature" or "body"
    function: str
    text: str  # the whole new buffer
    change: dict[str, Any]  # LSP TextDocumentContentChangeEvent (utf-16 positions)


def _utf16(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def _insert(source: str, line: int, col: int, new: str) -> tuple[str, dict[str, Any]]:
    """``source`` with ``new`` inserted at 0-based ``line``, character ``col``, and the event."""
    lines = source.splitlines(keepends=True)
    offset = sum(len(x) for x in lines[:line]) + col
    pos = {"line": line, "character": _utf16(lines[line][:col]) if line < len(lines) else 0}
    return source[:offset] + new + source[offset:], {"range": {"start": pos, "end": pos},
                                                     "text": new}


def _functions(tree: ast.Module) -> list[_Fn]:
    found = [n for n in ast.walk(tree) if isinstance(n, _Fn)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _params(line: str) -> tuple[int, int] | None:
    """Columns of the ``(`` and ``)`` of the parameter list that opens on this ``def`` line;
    None when it closes on a later line."""
    m = _DEF.match(line)
    if m is None:
        return None
    depth = 0
    for col in range(m.end() - 1, len(line)):
        ch = line[col]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return m.end() - 1, col
        elif ch in "\"'#":
            return None  # a string or comment in the signature: not worth parsing here
    return None


def _reparsed(source: str, name: str, line: int) -> _Fn | None:
    """The function ``name`` at ``line`` of the edited ``source`` (None: it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    return next((n for n in _functions(tree) if n.name == name and n.lineno == line), None)


def _n_args(n: _Fn) -> int:
    a = n.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)


def signature_edit(path: str, source: str, prefer: Collection[str] = ()) -> Edit | None:
    """One more parameter on the first function (named in ``prefer`` if any is) whose ``def``
    line holds its whole parameter list (the file's outline changes)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines(keepends=True)
    for fn in sorted(_functions(tree), key=lambda f: f.name not in prefer):  # stable
        text_line = lines[fn.lineno - 1]
        cols = _params(text_line)
        if cols is None:
            continue
        inside = text_line[cols[0] + 1 : cols[1]]
        if not inside.strip():
            add = EXTRA_PARAM
        elif inside.rstrip().endswith(","):
            add = " " + EXTRA_PARAM
        else:
            add = ", " + EXTRA_PARAM
        new, change = _insert(source, fn.lineno - 1, cols[1], add)
        after = _reparsed(new, fn.name, fn.lineno)
        if after is not None and _n_args(after) == _n_args(fn) + 1:
            return Edit(path, "signature", fn.name, new, change)
    return None


def body_edit(path: str, source: str) -> Edit | None:
    """One statement appended to the body of the first multi-line function: neither its
    outline nor its references change (the map must not)."""
    if not source.endswith("\n"):
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines(keepends=True)
    for fn in _functions(tree):
        last = fn.body[-1]
        if fn.body[0].lineno <= fn.lineno or last.end_lineno is None:
            continue
        stmt_line = lines[last.lineno - 1]
        indent = stmt_line[: len(stmt_line) - len(stmt_line.lstrip())]
        new, change = _insert(source, last.end_lineno, 0, f"{indent}{BODY_LINE}\n")
        after = _reparsed(new, fn.name, fn.lineno)
        if after is not None and len(after.body) == len(fn.body) + 1:
            return Edit(path, "body", fn.name, new, change)
    return None


def shown_functions(map_text: str, root: str) -> dict[str, set[str]]:
    """The functions a repo map shows, by absolute path (``root`` + the map's file headers)."""
    out: dict[str, set[str]] = {}
    names: set[str] | None = None
    for line in map_text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            names = out.setdefault(str(Path(root) / line[:-1]), set())
        elif names is not None and (m := _SHOWN_DEF.match(line)):
            names.add(m.group(1))
    return {path: found for path, found in out.items() if found}


def pick(paths: Sequence[str], n: int, seed: int, make: Callable[[str, str], Edit | None],
         exclude: Collection[str] = (), first: Sequence[str] = ()) -> list[Edit]:
    """Up to ``n`` edits made by ``make`` on different files: files of ``first`` before the
    others, each group in a seeded order."""
    rng = random.Random(seed)
    ahead = sorted(p for p in set(first) if p.endswith(".py") and p not in exclude)
    rng.shuffle(ahead)
    rest = sorted(p for p in paths if p.endswith(".py") and p not in exclude
                  and p not in set(ahead))
    rng.shuffle(rest)
    out: list[Edit] = []
    for path in ahead + rest:
        if len(out) >= n:
            break
        p = Path(path)
        try:
            if p.stat().st_size > MAX_FILE_BYTES:
                continue
            source = p.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        edit = make(path, source)
        if edit is not None:
            out.append(edit)
    return out
