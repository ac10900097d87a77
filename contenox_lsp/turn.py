"""One turn pipeline: workspace state + user turn → ``contextasm`` inputs → assembled prompt.

Both doors build their prompts here: the language server (open buffers, pins, cursor) and the
command line (the folder on disk, ``--file``/``--line``). The same workspace, file, line and
question therefore give byte-identical segments and the same token ids through either door,
so a stable-prefix snapshot one of them saved is found by the other.

The question never influences the segments before the user turn (the repo map is focused on
open and pinned files only), so the prefix pre-prefilled in idle time is the prefix of the
next ask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from contenox_lsp import workspace_reads as W
from contenox_lsp.code_segment import CodeBudget, CodeRequest, code_inputs
from contenox_lsp.context_budget import ContextBudget, beside_question
from contenox_lsp.frames import workspace_places
from contenox_lsp.paths import relative_to_roots, root_of
from contextasm import (
    Assembly,
    CodeSnippet,
    ContextInputs,
    OutputEntry,
    RepoMap,
    UserTurn,
    assemble,
)
from contextasm.defaults import DEFAULT_SYSTEM_PROMPT, DEFAULT_TASK_POLICY, default_tool_schemas
from contextasm.tokens import default_token_counter
from repo_index.safe_read import read_regular_file

if TYPE_CHECKING:
    from engine import Session
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

#: Attempts to fit the code segments into what the budget leaves (each one narrows the room by
#: what the last one overran); after them the turn goes without code rather than over.
FIT_TRIES = 3

#: Lines of code on each side of the cursor line sent as the cursor context.
CURSOR_CONTEXT_LINES = 8

#: Files larger than this are not read from disk for prompts.
MAX_FILE_BYTES = 1_000_000
#: Lines of the cursor context and of a selection are cut at this many characters.
MAX_CONTEXT_LINE_CHARS = 500


@dataclass(frozen=True)
class PinState:
    """A pinned file or line range, with the buffer text when the file is open."""

    path: Path
    start_line: int | None  # 0-based inclusive, None = whole file
    end_line: int | None
    text: str | None  # buffer text when the file is open; None → read from disk


@dataclass(frozen=True)
class WorkspaceState:
    """What the context is built from, besides the repo index: folders, open buffers, pins.

    The server captures it from the editor on the event loop; the CLI describes the folder on
    disk with the question's file as the focus (an editor would have that file open)."""

    roots: tuple[Path, ...]
    open_buffers: Mapping[Path, str] = field(default_factory=dict)
    pins: tuple[PinState, ...] = ()
    focus_files: tuple[Path, ...] = ()
    """Files the repo map is focused on: the open and pinned ones."""


@dataclass(frozen=True)
class TurnSpec:
    """The user turn (segment I) and request-specific output (segment H)."""

    question: str = ""
    path: Path | None = None  # workspace-relative
    selection: str | None = None
    cursor_context: str | None = None
    line: int | None = None  # 1-based
    outputs: tuple[tuple[str, str, str], ...] = ()  # (kind, source, text)


def read_disk(path: Path) -> str | None:
    """A text file's content for a prompt; None when unreadable, too large or binary."""
    try:
        data = read_regular_file(path, max_bytes=MAX_FILE_BYTES).data
    except OSError:  # gone, too large, a FIFO or device, ...
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def line_span(text: str, start_line: int, end_line: int) -> str:
    """Lines ``start_line..end_line`` (0-based, inclusive) of ``text``, clamped."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return ""
    s = max(0, min(start_line, len(lines) - 1))
    e = max(s, min(end_line, len(lines) - 1))
    return "".join(lines[s : e + 1])


def cursor_context(text: str, line: int) -> str:
    """The code around 0-based ``line`` that goes into the user turn."""
    return line_span(text, max(0, line - CURSOR_CONTEXT_LINES), line + CURSOR_CONTEXT_LINES)


def clip_long_lines(text: str, max_chars: int = MAX_CONTEXT_LINE_CHARS) -> str:
    """``text`` with every line longer than ``max_chars`` cut, saying how much was cut: one
    huge line (a minified file, a data fixture, a paste) must not crowd the repository map
    out of the prompt; the budget can cut a code block only by whole lines."""
    out = []
    for ln in text.split("\n"):
        if len(ln) > max_chars:
            ln = f"{ln[:max_chars]} … ({len(ln) - max_chars} more characters on this line)"
        out.append(ln)
    return "\n".join(out)


def turn_at(
    roots: Sequence[Path],
    path: Path | None,
    question: str,
    *,
    text: str | None = None,
    line: int | None = None,
    selection: str | None = None,
    outputs: tuple[tuple[str, str, str], ...] = (),
) -> TurnSpec:
    """The user turn for ``question`` about ``path`` (absolute, resolved) at 0-based ``line``.

    ``text`` is the file as the developer sees it (the buffer); None reads it from disk. A
    selection replaces the cursor context."""
    if path is None:
        return TurnSpec(question=question, outputs=outputs)
    if text is None:
        text = read_disk(path)
    cursor = None
    if line is not None and not selection and text is not None:
        cursor = cursor_context(text, line)
    return TurnSpec(
        question=question,
        path=Path(relative_to_roots(path, roots)),
        selection=clip_long_lines(selection) if selection else None,
        cursor_context=clip_long_lines(cursor) if cursor else None,
        line=None if line is None else line + 1,
        outputs=outputs,
    )


def repo_map(
    index: RepoIndex | None, session: Session, map_tokens: int, state: WorkspaceState
) -> RepoMap | None:
    """Segment E from the index, focused on the open and pinned files."""
    if index is None:
        return None
    return W.repo_map_from_index(index, session, map_tokens,
                                 [str(p) for p in state.focus_files])


def read_disk_text(path: str) -> str | None:
    return read_disk(Path(path))


def code_request(state: WorkspaceState, turn: TurnSpec,
                 rmap: RepoMap | None = None) -> CodeRequest:
    """Where the turn is, for segment J: the same for every fit of one assembly (the frames
    of its outputs are read once); ``rmap``, the map beside it."""
    return CodeRequest(
        roots=state.roots,
        buffers={str(p): t for p, t in state.open_buffers.items()},
        pins=[(str(p.path), p.start_line, p.end_line) for p in state.pins],
        path=turn.path, line=turn.line, question=turn.question,
        frames=workspace_places(turn.outputs, state.roots),
        mapped=frozenset(rmap.files) if rmap is not None else frozenset(),
    )


def code(
    finder: CodeFinder, session: Session, req: CodeRequest, budget: CodeBudget,
) -> tuple[tuple[CodeSnippet, ...], tuple[CodeSnippet, ...]]:
    """Segment J's snippets: the cursor's (known before the question), the question's."""
    counter = default_token_counter()

    def count(text: str) -> int:
        return counter.count(session, text)

    return code_inputs(finder, req, count, budget, read_disk_text)


def gather(
    state: WorkspaceState,
    turn: TurnSpec,
    repo_map: RepoMap | None,
    code: tuple[tuple[CodeSnippet, ...], tuple[CodeSnippet, ...]] = ((), ()),
) -> ContextInputs:
    """Every input of a turn: system, tools, policy, instructions, map, pins, diff, output,
    code, user turn."""
    roots = state.roots
    primary = roots[0] if roots else None
    buffers = {str(p): t for p, t in state.open_buffers.items()}
    pins = []
    for pin in state.pins:
        root = root_of(pin.path, roots)
        if root is None:
            continue
        pin_buffers = dict(buffers)
        if pin.text is not None:
            pin_buffers[str(pin.path)] = pin.text
        loaded = W.load_pin(
            root, str(pin.path),
            None if pin.start_line is None else pin.start_line + 1,
            None if pin.end_line is None else pin.end_line + 1,
            pin_buffers,
        )
        if loaded is not None:
            pins.append(loaded)
    diff = "".join(
        W.current_diff(root, {k: v for k, v in buffers.items() if root_of(Path(k), [root])})
        for root in roots
    )
    return ContextInputs(
        system_prompt=W.load_system_prompt(primary) if primary else DEFAULT_SYSTEM_PROMPT,
        tool_schemas=default_tool_schemas(),
        task_policy=DEFAULT_TASK_POLICY,
        repo_instructions=W.load_repo_instructions(primary) if primary else None,
        repo_map=repo_map,
        pins=pins,
        diff=diff,
        outputs=[OutputEntry(kind=k, source=s, text=t) for k, s, t in turn.outputs],
        cursor_code=code[0],
        question_code=code[1],
        user=UserTurn(
            question=turn.question,
            selection=turn.selection,
            cursor_context=turn.cursor_context,
            file_path=None if turn.path is None else turn.path.as_posix(),
            line=turn.line,
        ),
    )


def assemble_within(
    state: WorkspaceState,
    turn: TurnSpec,
    index: RepoIndex | None,
    session: Session,
    budget: ContextBudget,
    *,
    answer_tokens: int,
    finder: CodeFinder | None = None,
) -> Assembly:
    """The prompt of one turn with its context beside the question within ``budget``: the map
    at its share, the code segments in what the map, pins, diff, outputs and cursor context
    leave. Measured by assembling (segment tokenizations are cached): first without code, then
    with the cursor's code alone — what the idle prompt holds, so it is fitted exactly as the
    idle assembly fits it and an ask keeps the prefilled part — then with the question's code
    in what is left. A part whose framing overran the budget is chosen again in less room."""
    rmap = repo_map(index, session, budget.map_tokens, state)

    def build(cursor: tuple[CodeSnippet, ...] = (),
              question: tuple[CodeSnippet, ...] = ()) -> Assembly:
        return assemble(gather(state, turn, rmap, (cursor, question)), session,
                        session.identity, max_new_tokens=answer_tokens)

    without_code = build()
    if finder is None:
        return without_code
    used = beside_question(without_code)
    req = code_request(state, turn, rmap)
    for _ in range(FIT_TRIES):  # the cursor's code
        code_budget = budget.code(used)
        if code_budget.tokens <= 0:
            return without_code
        cursor_code, question_code = code(finder, session, req, code_budget)
        with_cursor = build(cursor_code)
        over = beside_question(with_cursor) - budget.tokens
        if over <= 0:
            break
        used += over
    else:
        return without_code
    for _ in range(FIT_TRIES):  # the question's code, in what the cursor's left
        if not question_code:
            return with_cursor
        asm = build(cursor_code, question_code)
        over = beside_question(asm) - budget.tokens
        if over <= 0:
            return asm
        code_budget = replace(code_budget, question_trim=code_budget.question_trim + over)
        question_code = code(finder, session, req, code_budget)[1]
    return with_cursor
