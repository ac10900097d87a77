"""Rendering of segment contents: inputs → text pieces, with stable, canonical formatting.

A rendering is a tuple of ``(text, special)`` pieces: marker pieces are tokenized with special
tokens on, content pieces with them off. Formatting is fixed (headers, fences, canonical JSON,
LF line ends) so identical inputs always give identical bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextasm.errors import InvalidInputError
from contextasm.formats import PromptFormat
from contextasm.inputs import CodeSnippet, OutputEntry, Pin, RepoInstructions, UserTurn

Pieces = tuple[tuple[str, bool], ...]

OUTPUT_TITLES: Mapping[str, str] = {
    "diagnostics": "diagnostics",
    "test": "test output",
    "terminal": "terminal output",
    "snippet": "snippet",
    "turn": "earlier turn",
}

_BACKTICKS = re.compile(r"`{3,}")


def normalize(text: str) -> str:
    """LF line ends, no trailing whitespace at the end (edits that only add CRs don't count)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip()


def block(text: str) -> str:
    """A content block: normalized, ending in one blank line; empty input stays empty."""
    body = normalize(text)
    return body + "\n\n" if body else ""


def fenced(text: str, lang: str = "") -> str:
    """``text`` in a code fence longer than any backtick run inside it."""
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text.replace("\r\n", "\n").replace("\r", "\n")
    if body and not body.endswith("\n"):
        body += "\n"
    return f"{fence}{lang}\n{body}{fence}\n"


def canonical_json(value: Any) -> str:
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"tool schema is not canonical JSON: {exc}") from exc


def content(text: str) -> Pieces:
    return ((text, False),) if text else ()


def system(fmt: PromptFormat, prompt: str) -> Pieces:
    pieces: list[tuple[str, bool]] = []
    if fmt.open:
        pieces.append((fmt.open, True))
    pieces.extend(content(block(prompt)))
    return tuple(pieces)


def tools(schemas: Sequence[Mapping[str, Any]]) -> Pieces:
    if not schemas:
        return ()
    lines = sorted(
        (str(s.get("name", "")), canonical_json(s)) for s in schemas
    )  # sorted: the caller's list order must not change the prompt
    body = "\n".join(line for _, line in lines)
    return content(
        "# Tools\n\nActions the editor can run for you, one JSON schema per line:\n\n"
        + body
        + "\n\n"
    )


def policy(text: str) -> Pieces:
    body = block(text)
    return content("# Task policy\n\n" + body) if body else ()


def instructions(instr: RepoInstructions | None) -> Pieces:
    if instr is None or not normalize(instr.text):
        return ()
    return content(f"# Repository instructions ({instr.source})\n\n" + block(instr.text))


def repo_map(text: str) -> Pieces:
    body = block(text)
    return content("# Repository map\n\n" + body) if body else ()


def pin(p: Pin, keep_lines: int | None = None) -> Pieces:
    """A pinned range; ``keep_lines`` keeps only the first lines and says so."""
    lines = normalize(p.text).split("\n") if normalize(p.text) else []
    shown = lines if keep_lines is None else lines[:keep_lines]
    head = f"# Pinned: {p.path} lines {p.start_line}-{p.end_line}\n\n"
    text = head + fenced("\n".join(shown))
    if keep_lines is not None and keep_lines < len(lines):
        last = p.start_line + keep_lines - 1
        text += f"(truncated: showing lines {p.start_line}-{last} of {p.start_line}-{p.end_line})\n"
    return content(text + "\n")


def diff(text: str, note: str = "") -> Pieces:
    if not normalize(text):
        return ()
    out = "# Current changes (diff)\n\n" + fenced(normalize(text) + "\n", "diff")
    if note:
        out += note + "\n"
    return content(out + "\n")


def output(entry: OutputEntry, keep_tail: int | None = None) -> Pieces:
    """A diagnostics/output block; ``keep_tail`` keeps only its last lines (the summary)."""
    body = normalize(entry.text)
    lines = body.split("\n") if body else []
    title = OUTPUT_TITLES[entry.kind]
    stale = " (stale)" if entry.stale else ""
    text = f"# {title[0].upper()}{title[1:]}: {entry.source}{stale}\n\n"
    if keep_tail is not None and keep_tail < len(lines):
        text += f"({len(lines) - keep_tail} earlier lines omitted)\n"
        lines = lines[len(lines) - keep_tail :] if keep_tail else []
    return content(text + fenced("\n".join(lines)) + "\n")


#: Above the header-only snippets of a code segment.
HEADERS_HEADING = "Headers of more definitions (bodies left out):\n\n"
#: Before the file-only snippets of a code segment, on one line.
FILES_HEADING = "Related files: "
#: Between two files of that line.
FILES_SEPARATOR = ", "


def code(heading: str, snippets: Sequence[CodeSnippet], omitted: int = 0) -> Pieces:
    """Code segment J: each snippet under a ``path:line`` header, in the given order, those
    shown whole in a fence; then the header-only ones as one list; then the files of the
    file-only ones on one line."""
    if not snippets:
        return ()
    parts = [f"# {heading}\n\n"]
    for s in snippets:
        if not s.header_only and not s.file_only:
            parts.append(f"{s.path}:{s.line} {s.title}\n" + fenced(normalize(s.text)) + "\n")
    headers = [s for s in snippets if s.header_only and not s.file_only]
    if headers:
        parts.append(HEADERS_HEADING)
        parts.extend(f"{s.path}:{s.line} {s.title}\n{normalize(s.text)}\n" for s in headers)
        parts.append("\n")
    files = [s.path for s in snippets if s.file_only]
    if files:
        parts.append(FILES_HEADING + FILES_SEPARATOR.join(files) + "\n\n")
    if omitted:
        parts.append(f"({omitted} more definitions left out for the budget)\n\n")
    return content("".join(parts))


def output_label(entry: OutputEntry) -> str:
    return f"{OUTPUT_TITLES[entry.kind]} {entry.source}"


_WHERE = re.compile(r"^\s*(where|in which|which (file|module|function|class|method))\b", re.I)


def answer_lead(fmt: PromptFormat, question: str) -> str:
    """The start of a base model's answer, given in the prompt after its answer cue: a
    question that asks where gets ``See ` `` so the model goes on with a path (a small base
    model left to itself rambles or copies the context). Empty for chat formats."""
    if not fmt.answer_cue:
        return ""
    return "See `" if _WHERE.match(question) else ""


def question_piece(pieces: Pieces) -> int:
    """The index of the question in ``user``'s pieces: the last one that is not a marker."""
    return max(i for i, (_, special) in enumerate(pieces) if not special)


def cursor(turn: UserTurn, keep_lines: int | None = None) -> Pieces:
    """The code around the cursor (part of segment J); ``keep_lines`` keeps that many lines
    around its middle (where the cursor is)."""
    if not turn.cursor_context or not normalize(turn.cursor_context):
        return ()
    ctx = normalize(turn.cursor_context).split("\n")
    if keep_lines is not None and keep_lines < len(ctx):
        start = max(0, (len(ctx) - keep_lines) // 2)
        ctx = ctx[start : start + keep_lines]
    if not ctx:
        return ()
    where = turn.file_path or "the open file"
    if turn.line is not None:
        where += f", line {turn.line}"
    return content(f"# Code around the cursor ({where})\n\n" + fenced("\n".join(ctx)) + "\n")


def user(
    fmt: PromptFormat,
    turn: UserTurn,
    *,
    selection_lines: int | None = None,
) -> Pieces:
    """The user turn between the format's user-open and close markers: where the user is (file,
    selection) then the question, as separate pieces (``question_piece``). The cursor context
    is not here: it is cursor-keyed code (``cursor``), in segment J before any question-keyed
    part.

    ``selection_lines`` keeps the selection's first lines.
    """
    parts: list[str] = []
    if turn.file_path:
        where = f"File: {turn.file_path}"
        if turn.line is not None:
            where += f", line {turn.line}"
        parts.append(where + "\n\n")
    if turn.selection and normalize(turn.selection):
        sel = normalize(turn.selection).split("\n")
        note = ""
        if selection_lines is not None and selection_lines < len(sel):
            note = f"(selection truncated: {len(sel) - selection_lines} more lines)\n"
            sel = sel[:selection_lines]
        if sel:
            parts.append("Selected code:\n" + fenced("\n".join(sel)) + note + "\n")
    question = "Question: " + normalize(turn.question) + "\n" + fmt.answer_cue
    lead = answer_lead(fmt, turn.question)
    if lead:
        question += " " + lead
    if fmt.close:
        question = question.rstrip("\n")  # the closing marker follows the text directly
    pieces: list[tuple[str, bool]] = []
    if fmt.user_open:
        pieces.append((fmt.user_open, True))
    # Where the user is and the question are tokenized apart: the first is known before the
    # question (the idle prefill warms it), and its tokens must not depend on the question.
    if parts:
        pieces.append(("".join(parts), False))
    pieces.append((question, False))
    if fmt.close:
        pieces.append((fmt.close, True))
    return tuple(pieces)


# -- reading the repository-level segments back as files --------------------------------------
# Completion prompts in a FIM model's repository layout need the repo map and the pins as
# (path, content) pairs. They are read off the segments this module rendered (the assembly
# the idle prefill keeps), so the completion shows exactly what the chat context holds.

_REPO_MAP_HEAD = "# Repository map\n\n"
_PIN_HEAD = re.compile(r"# Pinned: (?P<path>.+) lines \d+-\d+\n\n(?P<fence>`{3,})[^\n]*\n")


def repo_map_files(text: str) -> list[tuple[str, str]]:
    """``(path, signature lines)`` of each file the rendered repo map ``text`` shows with
    definitions (one indentation level taken off); files listed without any are left out."""
    body = text[len(_REPO_MAP_HEAD):] if text.startswith(_REPO_MAP_HEAD) else text
    files: list[tuple[str, list[str]]] = []
    for line in body.split("\n"):
        if line.startswith("  ") and files:
            files[-1][1].append(line[2:])
        elif line.endswith(":") and not line.startswith(" "):
            files.append((line[:-1], []))
    return [(path, "\n".join(lines) + "\n") for path, lines in files if lines]


def pin_file(text: str) -> tuple[str, str] | None:
    """``(path, code)`` of a rendered pin (``pin``), or None when ``text`` is not one."""
    m = _PIN_HEAD.match(text)
    if m is None:
        return None
    end = text.find("\n" + m.group("fence") + "\n", m.end() - 1)
    if end < 0:
        return None
    return m.group("path"), text[m.end():end + 1]
