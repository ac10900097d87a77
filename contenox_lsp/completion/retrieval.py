"""The repository part of a completion prompt: code from elsewhere in the repository.

Two kinds of code, chosen from the cursor's place alone (the same place gives the same
context whatever was opened before):

- **definitions** the code around the cursor uses (the symbol graph's hops from the function
  at the cursor, ``CodeFinder.around_cursor``), their signature lines: what the line being
  typed calls;
- **similar code**: the chunks of other files whose words most resemble the lines above the
  cursor (BM25, as CrossCodeEval's retrieval baseline and llama.vscode's ring do): how the
  rest of the repository writes the same thing, often the very line to type. A chunk longer
  than what is shown shows the stretch that resembles those lines most and what follows it
  (RepoCoder's window and continuation), not only its head.

Both are shown as code (each under its path), never as a repo map: measured on real
repositories, map text made completions worse than the window alone (issue 32). The query
is the window's whole lines above the cursor line, so the context stays put while a line is
typed and a keystroke prefills only what it typed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from repo_index.code_search import CodeFinder, Snippet
from repo_index.lexical import terms

#: Lines above the cursor line the similar-code query holds.
QUERY_LINES = 12
#: At most this many definitions and similar chunks.
MAX_DEFINITIONS = 3
MAX_SIMILAR = 4
#: Lines shown of one definition (its signature and the start of its docstring: how to call
#: it; bodies measured worse) and of one similar chunk.
DEFINITION_LINES = 5
SIMILAR_LINES = 24
#: The whole repository part, in characters (about 900 tokens of code).
BUDGET_CHARS = 3200


@dataclass(frozen=True)
class Place:
    """Where a completion context is for: the file (absolute), the cursor's 0-based line and
    the window's whole lines above it (the query)."""

    path: str
    line: int
    above: str


def place_of(path: str, line: int, before: str) -> Place:
    """The place of a cursor window (``CursorWindow.before``: the current line comes last)."""
    whole = before.split("\n")[:-1]
    return Place(path, line, "\n".join(whole[-QUERY_LINES:]))


def _shown(snippet: Snippet, max_lines: int) -> str:
    return "".join(text + "\n" for _, text in snippet.lines[:max_lines])


def _shown_similar(snippet: Snippet, query: frozenset[str], max_lines: int) -> str:
    """``max_lines`` lines of a similar chunk from where a stretch of ``QUERY_LINES`` lines
    holds the most distinct ``query`` terms (the first of equals): the code that resembles
    the cursor's and the lines after it, where the line being typed has its like."""
    lines = snippet.lines
    if len(lines) <= max_lines:
        return _shown(snippet, max_lines)
    found = [frozenset(terms(text)) & query for _, text in lines]
    best, start = -1, 0
    for i in range(len(lines) - QUERY_LINES + 1):
        got = len(frozenset().union(*found[i:i + QUERY_LINES]))
        if got > best:
            best, start = got, i
    start = min(start, len(lines) - max_lines)
    return "".join(text + "\n" for _, text in lines[start:start + max_lines])


def retrieve(finder: CodeFinder, place: Place) -> tuple[tuple[str, str], ...]:
    """``(path, code)`` files for the prompt: the similar code, then the definitions nearest
    the cursor (what the line being typed calls), each kind's best last; the pieces of one
    file make one entry, in the file's order, where its best piece would be. Definitions take
    the budget first."""
    seen: set[tuple[str, int]] = set()
    used = 0

    query = frozenset(terms(place.above))

    def take(snippets: Sequence[Snippet], limit: int,
             show: Callable[[Snippet], str]) -> list[_Piece]:
        nonlocal used
        out: list[_Piece] = []
        for s in snippets:
            if len(out) >= limit:
                break
            if s.key in seen or s.path == place.path:
                continue
            text = show(s)
            if used + len(text) > BUDGET_CHARS:
                continue
            seen.add(s.key)
            out.append((s.display, s.chunk.start_line, text))
            used += len(text)
        return out[::-1]

    definitions = take(finder.around_cursor(place.path, place.line, limit=MAX_DEFINITIONS * 3),
                       MAX_DEFINITIONS, lambda s: _shown(s, DEFINITION_LINES))
    similar = take(finder.similar(place.above, skip_path=place.path, limit=MAX_SIMILAR * 2),
                   MAX_SIMILAR, lambda s: _shown_similar(s, query, SIMILAR_LINES))
    return _by_file([*similar, *definitions])


_Piece = tuple[str, int, str]  # (path, first line, code)


def _by_file(pieces: Sequence[_Piece]) -> tuple[tuple[str, str], ...]:
    """One ``(path, code)`` per file, at its last piece's place, its pieces in line order."""
    last = {path: i for i, (path, _, _) in enumerate(pieces)}
    out = []
    for i, (path, _, _) in enumerate(pieces):
        if last[path] == i:
            own = sorted((line, code) for p, line, code in pieces if p == path)
            out.append((path, "\n".join(code for _, code in own)))
    return tuple(out)
