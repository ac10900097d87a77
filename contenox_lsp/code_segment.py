"""Segment J's inputs for a turn: the definitions the cursor's code uses and those that match
the question, chosen within their token budgets and rendered for the prompt.

The cursor part never looks at the question, so the idle prefill (which has no question)
builds exactly what the ask will: it stays warm. The question part leaves out what the
cursor part and the pins already show, and does not search for the names of the function the
cursor is in and of what the cursor part shows whole (their parts would find look-alikes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from contextasm import CodeSnippet
from contextasm.render import FILES_HEADING, FILES_SEPARATOR, HEADERS_HEADING
from repo_index.chunks import Chunk
from repo_index.code_search import (
    QUESTION_REASON,
    CodeFinder,
    FileHit,
    Snippet,
    is_test_path,
    texts_reader,
)
from repo_index.lexical import terms

#: A pinned range: absolute path, 0-based first and last line (None: the whole file).
PinnedRange = tuple[str, int | None, int | None]

#: Lines of one definition shown at most (its head and focus lines) ...
MAX_SNIPPET_LINES = 60
#: ... or one per this many tokens of the part's room, when that is more: where the room
#: holds more code, a long definition shows more of itself (~90–95 lines at 4k beside the
#: question; 60 at 2k).
TOKENS_PER_SNIPPET_LINE = 40
#: Lines longer than this are cut (minified code, data literals).
MAX_LINE_CHARS = 300
#: The search favours the files of this many of the cursor's best definitions.
NEAR_FILES_FROM = 20
#: Whole definitions are taken by score / tokens ** COST_POWER: of two equally likely ones the
#: shorter goes first, so one long definition does not push out several short ones.
COST_POWER = 0.25
#: Share of a code budget kept for the headers of definitions that did not fit whole ...
SIGNATURE_SHARE = 0.125
#: ... and at most this many tokens of it: a dozen headers locate what did not fit, and a
#: larger part's room goes to whole definitions.
MAX_HEADER_TOKENS = 256
#: A header is read up to its colon over at most this many lines ...
MAX_SIGNATURE_LINES = 8
#: ... and shown on one line of about this many characters at most (a one-line signature,
#: unindented, mostly fits; a longer one keeps its first parameters).
HEADER_WIDTH = 64
_TRAILING_COMMA = re.compile(r",\s*([)\]}])")
#: The question's search offers this many definitions, shown whole or by their header.
QUESTION_CANDIDATES = 30
#: After the question's definitions, up to this many more files are named on one line (a file
#: a fix touches is often one whose code did not fit): the search's files ...
MORE_FILES = 8
#: ... each with a candidate scoring at least this share of the best hit's (a file with a
#: stray word of the question is not worth its path).
MORE_FILES_MIN_SCORE = 0.01
#: That line names first the files the code of this many of the question's best definitions
#: imports the names it uses from (``CodeFinder.imported_files``).
IMPORTS_FROM = 2
#: A definition an output's traceback ran through is shown before every search hit: its score
#: is this many times the best hit's.
TRACED_PRIORITY = 100.0
#: Why a traced definition is shown: its title says it (the heading names only the search).
FRAME_REASON = "in the output's traceback"
#: A long definition keeps its first lines (signature, docstring) ...
HEAD_LINES = 8
#: ... and the lines with most focus terms, with this many lines around each.
FOCUS_CONTEXT = 2


#: The cursor part takes what the question part's time bound leaves unused.
ABSORB_BOUNDED_ROOM = True


@dataclass(frozen=True)
class CodeBudget:
    """Tokens for segment J: ``cursor_share`` of ``tokens`` at most for the cursor part, the
    rest (and what the cursor part left) for the question part — at most ``question_max``
    when set.

    The question part is prefilled at every ask (it depends on the question), the cursor part
    in idle time: ``question_max`` bounds what an ask costs (``question_cap``), and what
    the bound keeps from the question part goes to the cursor part (``absorb``), which costs
    the ask nothing. The bound moves only when the measured rate leaves its band
    (``SteadyRate``), so the idle prompt does not follow every prefill's noise."""

    tokens: int = 1536
    cursor_share: float = 0.35
    question_max: int | None = None
    absorb: bool = ABSORB_BOUNDED_ROOM
    question_trim: int = 0
    """Taken off the question part only (its framing overran the budget): the cursor part,
    which the idle prompt holds too, keeps its size."""

    @property
    def cursor_tokens(self) -> int:
        share = int(self.tokens * self.cursor_share)
        if self.question_max is None or not self.absorb:
            return share
        return max(share, self.tokens - self.question_max)

    def question_room(self, cursor_used: int) -> int:
        """Tokens for the question part when the cursor part used ``cursor_used``."""
        room = self.tokens - cursor_used
        if self.question_max is not None:
            room = min(self.question_max, room)
        return max(0, room - self.question_trim)


def question_cap(tokens_per_s: float | None, question_ms: int) -> int | None:
    """The question part's bound: what the engine prefills in ``question_ms`` at
    ``tokens_per_s`` (at least ``QUESTION_MIN_TOKENS``); None when the rate is not known yet or
    ``question_ms`` is 0."""
    if tokens_per_s is None or question_ms <= 0:
        return None
    return max(QUESTION_MIN_TOKENS, int(tokens_per_s * question_ms / 1000.0))


#: The question part's floor under a latency bound (a definition or two).
QUESTION_MIN_TOKENS = 128


class SteadyRate:
    """A measured rate that moves only when a new measurement leaves a band around it, so the
    bound it sets (and the prompt) does not change with every prefill's noise: an explain
    right after an ask shows the ask's prompt.

    ``value`` may start from a remembered rate (``source`` "remembered": a restarted server
    builds the prompt the last one did); ``on_change`` hears each move (to remember it)."""

    BAND = 1.5

    def __init__(self, value: float | None = None,
                 on_change: Callable[[float], None] | None = None) -> None:
        self.value = value
        self.source = "none" if value is None else "remembered"
        self._on_change = on_change

    def update(self, measured: float | None) -> float | None:
        if measured is not None and (
            self.value is None or not self.value / self.BAND <= measured <= self.value * self.BAND
        ):
            self.value = measured
            self.source = "measured"
            if self._on_change is not None:
                self._on_change(measured)
        return self.value



def _focus_lines(lines: Sequence[tuple[int, str]], focus: set[str],
                 cap: int) -> list[tuple[int, str]]:
    """At most ``cap`` of a long definition's lines: its head, then the lines with the most
    focus terms, each with a little context, in source order."""
    keep = set(range(min(HEAD_LINES, len(lines))))
    scored = sorted(
        ((-len(focus.intersection(terms(text))), i) for i, (_, text) in enumerate(lines)),
    )
    for neg, i in scored:
        if neg == 0 or len(keep) >= cap:
            break
        keep.update(j for j in range(i - FOCUS_CONTEXT, i + FOCUS_CONTEXT + 1)
                    if 0 <= j < len(lines))
    return [lines[i] for i in sorted(keep)[:cap]]


_DOCSTRING_OPEN = re.compile(r"^\s*[rRuU]?(\"{3}|'{3})")


def _without_comment(text: str) -> str:
    """``text`` without its trailing ``#`` comment; a ``#`` inside a string stays."""
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif quote:
            if ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return text[:i].rstrip()
    return text.rstrip()


def _header_end(lines: Sequence[tuple[int, str]], def_line: int,
                max_lines: int | None = None) -> int | None:
    """Index in ``lines`` of the line that ends the definition's header (its ``:``, a
    trailing comment aside), within ``max_lines`` of the ``def``/``class`` line when given;
    None when there is none."""
    seen = 0
    for i, (no, text) in enumerate(lines):
        if no < def_line:
            continue
        if _without_comment(text).endswith(":"):
            return i
        seen += 1
        if max_lines is not None and seen >= max_lines:
            return None
    return None


def docstring_summary(lines: Sequence[tuple[int, str]],
                      def_line: int) -> list[tuple[int, str]]:
    """``lines`` (a definition's, numbered) with its docstring cut to its first line of text
    and its closing line: the lines between are left out (the gap shows as ``...``). The
    code is what a question's answer reads; each line of prose kept out makes room for
    another definition (on the ctxeval tasks, body present +.03 to +.06 at the same split)."""
    header_end = _header_end(lines, def_line)
    if header_end is None:
        return list(lines)
    start = next((i for i in range(header_end + 1, len(lines)) if lines[i][1].strip()), None)
    if start is None:
        return list(lines)
    m = _DOCSTRING_OPEN.match(lines[start][1])
    if m is None or m.group(1) in lines[start][1][m.end():]:
        return list(lines)  # no docstring, or one on one line
    quote = m.group(1)
    end = next((i for i in range(start + 1, len(lines)) if quote in lines[i][1]), None)
    if end is None:
        return list(lines)
    # The first line of text: on the opening line, or the one after a bare opening quote.
    summary = start if lines[start][1][m.end():].strip() else start + 1
    return [*lines[:summary + 1], *lines[max(end, summary + 1):]]


def snippet_lines(tokens: int) -> int:
    """Lines of one definition shown at most in a part of ``tokens``."""
    return max(MAX_SNIPPET_LINES, tokens // TOKENS_PER_SNIPPET_LINE)


def render_snippet(snippet: Snippet, focus: Collection[str] = (),
                   max_lines: int = MAX_SNIPPET_LINES) -> str:
    """The snippet's lines as shown: its docstring by its first line (``docstring_summary``),
    at most ``max_lines`` lines (a long one shows its head and the lines with most ``focus``
    terms), gaps marked ``...``."""
    lines = docstring_summary(snippet.lines, snippet.chunk.def_line)
    omitted = 0
    if len(lines) > max_lines:
        chosen = (_focus_lines(lines, set(focus), max_lines) if focus
                  else lines[:max_lines])
        omitted = len(lines) - len(chosen)
        lines = chosen
    out: list[str] = []
    prev = None
    for line_no, text in lines:
        if prev is not None and line_no > prev + 1 and out:
            out.append(_indent_of(text, out[-1]) + "...")
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]} … ({len(text) - MAX_LINE_CHARS} more characters)"
        out.append(text.rstrip())
        prev = line_no
    if omitted and lines[-1][0] < snippet.chunk.end_line:
        out.append(_indent_of("", out[-1]) + f"... ({omitted} more lines)")
    return "\n".join(out)


def _indent_of(following: str, previous: str) -> str:
    """Indentation for a gap marker: the deeper of the lines around it."""
    a = following[: len(following) - len(following.lstrip())] if following.strip() else ""
    b = previous[: len(previous) - len(previous.lstrip())]
    return a if len(a) >= len(b) else b


def _pinned(snippet: Snippet, pins: Sequence[PinnedRange]) -> bool:
    """Whether a pin already shows the whole definition."""
    for path, start, end in pins:
        if path != snippet.path:
            continue
        if start is None:
            return True
        last = end if end is not None else start
        if start <= snippet.chunk.start_line and snippet.chunk.end_line <= last:
            return True
    return False


def header_line(snippet: Snippet) -> str:
    """The definition's header on one line, its body elided (``def f(a, b) -> int: ...``):
    what a candidate that did not fit whole still shows: where it is and how it is called,
    in one line. Decorators and comments are left out; a signature over
    several lines is joined; one longer than ``HEADER_WIDTH`` keeps its first parameters."""
    lines = [(no, text) for no, text in snippet.lines if no >= snippet.chunk.def_line]
    if not lines:
        return ""
    end = _header_end(lines, snippet.chunk.def_line, MAX_SIGNATURE_LINES)
    complete = end is not None
    shown = lines[: (end if end is not None else MAX_SIGNATURE_LINES - 1) + 1]
    joined = ""
    for _, text in shown:
        part = _without_comment(text).strip()
        glue = not joined or joined.endswith(("(", "[", "{")) or part.startswith((")", "]", "}"))
        joined += part if glue else " " + part
    joined = _TRAILING_COMMA.sub(r"\1", joined)
    if len(joined) > HEADER_WIDTH:
        cut = joined.rfind(",", 0, HEADER_WIDTH)
        joined = (joined[:cut] if cut > 0 else joined[:HEADER_WIDTH]) + ", ...)"
        joined += ":" if complete else ""
    elif not complete:
        return joined + " ..."
    return joined + (" ..." if len(lines) > len(shown) else "")


def _files_line(files: Sequence[FileHit]) -> str:
    return FILES_HEADING + FILES_SEPARATOR.join(f.display for f in files) + "\n\n"


def _choose(
    snippets: Sequence[Snippet], tokens: int, count: Callable[[str], int], focus: Collection[str],
    *, implied_reason: str | None = None, files: Sequence[FileHit] = (),
) -> tuple[list[CodeSnippet], int, set[tuple[str, int]]]:
    """Whole, by score per token (``COST_POWER``), while they fit in what ``tokens`` leaves
    after the headers' share (``SIGNATURE_SHARE``, at most ``MAX_HEADER_TOKENS``); then,
    best first, the headers of the ones passed over while the rest lasts (``header_line``: a
    definition located is worth a line); then up to ``MORE_FILES`` of
    ``files`` (best first) that neither shows, named on one line: when the code leaves too
    little room for that line, the code is chosen again in what the line leaves. Returns those
    shown whole in rank order, then the headers in rank order, then the files (a smaller rung
    of the segment drops files, then headers first), the tokens they use and the keys of those
    shown whole. A title gives the snippet's reason unless it is ``implied_reason`` (the
    segment's heading says it)."""
    def cost(c: CodeSnippet) -> int:
        # The fence and the blank line around a whole one; a header is one line of a list.
        return count(f"{c.path}:{c.line} {c.title}\n{c.text}\n") + (2 if c.header_only else 8)

    def make(s: Snippet, text: str, header_only: bool = False) -> CodeSnippet:
        why = f" ({s.reason})" if s.reason != implied_reason and not header_only else ""
        return CodeSnippet(path=s.display, line=s.chunk.def_line + 1,
                           title=f"{s.chunk.qualname}{why}", text=text, header_only=header_only)

    max_lines = snippet_lines(tokens)
    rendered = [make(s, render_snippet(s, focus, max_lines)) for s in snippets]
    costs = [cost(c) for c in rendered]
    order = sorted(range(len(snippets)),
                   key=lambda i: (-snippets[i].score / costs[i] ** COST_POWER, i))

    def pick(room: int) -> tuple[dict[int, CodeSnippet], list[CodeSnippet], int]:
        whole_budget = room - min(int(room * SIGNATURE_SHARE), MAX_HEADER_TOKENS)
        whole_ones: dict[int, CodeSnippet] = {}
        used = 0
        for i in order:
            if used + costs[i] <= whole_budget:
                whole_ones[i] = rendered[i]
                used += costs[i]
        headers: list[CodeSnippet] = []
        for i, s in enumerate(snippets):
            if i in whole_ones:
                continue
            c = make(s, header_line(s), header_only=True)
            n = cost(c) + (0 if headers else count(HEADERS_HEADING) + 1)  # the list's heading
            if used + n <= room:
                headers.append(c)
                used += n
        return whole_ones, headers, used

    def unshown(whole_ones: Mapping[int, CodeSnippet],
                headers: Sequence[CodeSnippet]) -> list[FileHit]:
        shown_files = {c.path for c in whole_ones.values()} | {c.path for c in headers}
        return [f for f in files if f.display not in shown_files][:MORE_FILES]

    whole_ones, headers, used = pick(tokens)
    wanted = unshown(whole_ones, headers)
    line = count(_files_line(wanted)) if wanted else 0
    if used + line > tokens:
        whole_ones, headers, used = pick(tokens - line)
        wanted = unshown(whole_ones, headers)
    named: list[FileHit] = []
    for hit in wanted:
        more = count(_files_line([*named, hit])) - (count(_files_line(named)) if named else 0)
        if used + more <= tokens:
            named.append(hit)
            used += more
    shown = [whole_ones[i] for i in sorted(whole_ones)] + headers
    shown += [CodeSnippet(path=f.display, line=f.def_line + 1, title="", text="",
                          file_only=True) for f in named]
    return shown, used, {snippets[i].key for i in whole_ones}


def absolute_path(roots: Sequence[Path], finder: CodeFinder, rel: Path) -> str | None:
    for root in roots:
        candidate = str(root / rel)
        if finder.index.version(candidate) is not None:
            return candidate
    return None


@dataclass(frozen=True)
class CodeRequest:
    """Where a turn is: the workspace folders, open buffers (absolute path → text), pins,
    the question's file (workspace-relative) and 1-based line, the question, and the places
    its outputs' tracebacks name."""

    roots: Sequence[Path]
    buffers: Mapping[str, str]
    pins: Sequence[PinnedRange]
    path: Path | None
    line: int | None
    question: str
    frames: Sequence[tuple[str, int]] = ()
    """Where the turn's test or terminal output points (``frames.workspace_places``:
    absolute path, 0-based line; innermost first)."""
    mapped: Collection[str] = ()
    """The files the repo map shows (absolute paths): the question part does not name them
    again."""


def unanswered_part(question: str, shown: Collection[str]) -> str:
    """The question without the identifiers it names that the context already shows whole:
    their parts ("decode" of ``_decode_uXXXX``) would only find look-alikes."""
    for name in sorted(shown, key=len, reverse=True):
        question = re.sub(rf"(?<![\w.]){re.escape(name)}(?!\w)", " ", question)
    return question


@dataclass(frozen=True)
class CursorReach:
    """What the code at the cursor says before any question: the chunk it is in (``here``),
    the names it references, the definitions its symbol graph reaches in the graph's order
    (pins left out), the files of the best ``NEAR_FILES_FROM`` of them and the source the
    open test module is named after. The question search's signals and the cursor part's
    order come from here, for the server and for the ranker's fit alike."""

    here: Chunk | None = None
    names: Sequence[str] = ()
    graph_order: Sequence[Snippet] = ()
    mirrors: Sequence[str] = ()

    @property
    def near(self) -> set[str]:
        return {s.path for s in self.graph_order[:NEAR_FILES_FROM]}

    @property
    def graph(self) -> dict[tuple[str, int], float]:
        return {s.key: s.score for s in self.graph_order}


def cursor_reach(finder: CodeFinder, path: str, line: int,
                 pins: Sequence[PinnedRange] = ()) -> CursorReach:
    """``CursorReach`` at 0-based ``line`` of ``path`` (absolute, indexed)."""
    here, names = finder.cursor_names(path, line)
    graph_order = [s for s in finder.around_cursor(path, line, at=(here, names))
                   if not _pinned(s, pins)]
    return CursorReach(here, names, graph_order, finder.mirrored_sources(path))


def code_inputs(
    finder: CodeFinder,
    req: CodeRequest,
    count: Callable[[str], int],
    budget: CodeBudget,
    read_disk: Callable[[str], str | None],
) -> tuple[tuple[CodeSnippet, ...], tuple[CodeSnippet, ...]]:
    """``(cursor_code, question_code)`` of a turn."""
    if budget.tokens <= 0:
        return (), ()
    finder.read_text = texts_reader(req.buffers, read_disk)
    path = absolute_path(req.roots, finder, req.path) if req.path is not None else None
    reach = (cursor_reach(finder, path, req.line - 1, req.pins)
             if path is not None and req.line is not None else CursorReach())
    cursor, names, at = reach.graph_order, reach.names, reach.here
    shown_first = finder.ranked_for_ask(cursor, near_files=reach.near,
                                        mirror_files=reach.mirrors)
    cursor_focus = set(terms(" ".join(names)))
    cursor_code, used, cursor_whole = _choose(shown_first, budget.cursor_tokens, count,
                                              cursor_focus)
    if not req.question.strip():
        return tuple(cursor_code), ()
    # A cursor definition shown only as a header (or passed over) may still be shown whole
    # here; the function the cursor is in is where the user is, not what to show again.
    exclude = set(cursor_whole)
    shown = {s.chunk.name for s in cursor if s.key in cursor_whole}
    if path is not None and at is not None:
        exclude.add((path, at.def_line))
        shown.add(at.name)
    # The definitions a traceback ran through come first, innermost first: where the
    # failure is, more surely than any word of the question.
    traced = [s for s in finder.definitions_at(req.frames, FRAME_REASON, len(req.frames))
              if s.key not in exclude and not _pinned(s, req.pins)]
    traced_keys = {s.key for s in traced}
    query = unanswered_part(req.question, shown)
    hits: list[Snippet] = []
    files: list[FileHit] = []
    if terms(query):
        found = finder.search_with_files(query, names, graph=reach.graph,
                                         near_files=reach.near, mirror_files=reach.mirrors,
                                         exclude=exclude | traced_keys,
                                         limit=QUESTION_CANDIDATES)
        hits = [s for s in found.snippets if not _pinned(s, req.pins)]
        # Named: first the files the best definitions' code imports what it uses from (a fix
        # reaches into the helpers it imports, whose files seldom share a word with the
        # question), then the search's; only source files the context does not show already
        # (the open file, the map's, the pins', the cursor part's); test files are where a
        # fix is checked, not made.
        shown_paths = {*req.mapped, *(p for p, _, _ in req.pins)}
        if path is not None:
            shown_paths.add(path)
        shown_displays = {c.path for c in cursor_code}
        least = MORE_FILES_MIN_SCORE * (found.files[0].score if found.files else 0.0)
        imported = finder.imported_files(hits[:IMPORTS_FROM])
        named: dict[str, FileHit] = {}
        for f in [*imported, *(f for f in found.files if f.score >= least)]:
            named.setdefault(f.path, f)
        files = [f for f in named.values() if f.path not in shown_paths
                 and f.display not in shown_displays and not is_test_path(f.display)]
    if not traced and not hits:
        return tuple(cursor_code), ()
    top = max((s.score for s in hits), default=1.0)
    first = [replace(s, score=top * TRACED_PRIORITY * s.score) for s in traced]
    question_focus = set(terms(req.question)) | cursor_focus | _frame_terms(traced, req.frames)
    question_code, _, _ = _choose(first + hits, budget.question_room(used), count,
                                  question_focus, implied_reason=QUESTION_REASON, files=files)
    return tuple(cursor_code), tuple(question_code)


def _frame_terms(traced: Sequence[Snippet], frames: Sequence[tuple[str, int]]) -> set[str]:
    """The search terms of the lines the frames point at: a long traced definition shows
    them (``render_snippet``'s focus)."""
    wanted = set(frames)
    return {t for s in traced for no, text in s.lines if (s.path, no) in wanted
            for t in terms(text)}
