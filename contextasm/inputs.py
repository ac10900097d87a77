"""Explicit inputs of one assembly: everything a segment is rendered from, nothing implicit.

Inputs are frozen values; sequences are normalized to tuples so an ``ContextInputs`` can be
compared and reused safely. Gathering them from a workspace lives in ``contextasm.workspace``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contextasm.errors import InvalidInputError
from contextasm.segments import CacheClass

#: ``render(budget_tokens) -> (text, digest)``: re-renders the repo map within a smaller budget.
RepoMapRenderer = Callable[[int], tuple[str, str]]

#: Kinds of diagnostics/output entries (segment H) and the class each gets when not stale.
OUTPUT_KINDS: Mapping[str, CacheClass] = {
    "diagnostics": CacheClass.MEDIUM,
    "test": CacheClass.MEDIUM,
    "terminal": CacheClass.MEDIUM,
    "snippet": CacheClass.LOW,  # exploratory snippets are cheap to lose
    "turn": CacheClass.LOW,  # an earlier question/answer pair
}
#: The kinds a tool's output has (what a request may send, and where a traceback is
#: evidence), as against an exploratory snippet or an earlier turn.
TOOL_OUTPUT_KINDS: tuple[str, ...] = ("test", "terminal", "diagnostics")


@dataclass(frozen=True)
class RepoInstructions:
    """Repository instructions (segment D) and the file they came from."""

    text: str
    source: str  # workspace-relative path, e.g. "AGENTS.md"


@dataclass(frozen=True)
class RepoMap:
    """An already rendered repo map (segment E).

    ``digest`` identifies the map's content (from ``repo_index``); ``render`` optionally
    re-renders it within a smaller token budget when the prompt is over budget; ``files``:
    the files it shows, as the caller names them (the server: absolute paths). Only ``text``
    and ``digest`` take part in equality: a callable does not change the segment.
    """

    text: str
    digest: str
    render: RepoMapRenderer | None = field(default=None, compare=False, repr=False)
    files: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class Pin:
    """A pinned file range (segment F): 1-based, inclusive lines, and the text of those lines."""

    path: str
    start_line: int
    end_line: int
    text: str

    def __post_init__(self) -> None:
        if self.start_line < 1 or self.end_line < self.start_line:
            raise InvalidInputError(
                f"pin {self.path}: invalid line range {self.start_line}-{self.end_line}",
                data={"path": self.path, "start_line": self.start_line, "end_line": self.end_line},
            )


@dataclass(frozen=True)
class OutputEntry:
    """One diagnostics / test / terminal output block (segment H).

    ``kind`` is one of ``OUTPUT_KINDS``; ``source`` names where it came from (a file path, a
    command). ``stale`` output (from before the latest edit) drops to the low cache class.
    """

    kind: str
    source: str
    text: str
    stale: bool = False

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_KINDS:
            raise InvalidInputError(
                f"unknown output kind {self.kind!r}",
                data={"kind": self.kind, "known": sorted(OUTPUT_KINDS)},
            )

    @property
    def cache_class(self) -> CacheClass:
        return CacheClass.LOW if self.stale else OUTPUT_KINDS[self.kind]


@dataclass(frozen=True)
class CodeSnippet:
    """A definition shown in the code segment (J): where it is, and the lines shown.

    ``path`` is workspace-relative; ``line`` the 1-based line of its ``def``/``class``;
    ``title`` names it (``Class.method``) and why it was chosen, unless the segment's
    heading says it. ``text`` is the code as shown (elided parts marked), one snippet per
    definition; ``header_only``: ``text`` is its header on one line (``def f(x): ...``),
    listed after the code shown whole; ``file_only``: only its file is named, in one line
    of more files after the headers (a pointer where a definition is not worth its lines;
    ``title`` and ``text`` are not shown)."""

    path: str
    line: int
    title: str
    text: str
    header_only: bool = False
    file_only: bool = False

    def __post_init__(self) -> None:
        if self.line < 1:
            raise InvalidInputError(f"snippet {self.path}: line must be >= 1, got {self.line}",
                                    data={"path": self.path, "line": self.line})


@dataclass(frozen=True)
class UserTurn:
    """The current request (segment I): the question plus where the user is in the code."""

    question: str
    selection: str | None = None
    cursor_context: str | None = None
    file_path: str | None = None
    line: int | None = None  # 1-based

    def __post_init__(self) -> None:
        if self.line is not None and self.line < 1:
            raise InvalidInputError(f"line must be >= 1, got {self.line}", data={"line": self.line})


@dataclass(frozen=True)
class ContextInputs:
    """Everything one prompt is assembled from (segments A–J).

    ``cursor_code`` depends only on the workspace and the cursor (known before the question:
    the idle prefill warms it); ``question_code`` depends on the question and sits just before
    it. Both are best first: the budget drops from the end."""

    system_prompt: str
    user: UserTurn
    tool_schemas: Sequence[Mapping[str, Any]] = ()
    task_policy: str = ""
    repo_instructions: RepoInstructions | None = None
    repo_map: RepoMap | None = None
    pins: Sequence[Pin] = ()
    diff: str = ""
    outputs: Sequence[OutputEntry] = ()
    cursor_code: Sequence[CodeSnippet] = ()
    question_code: Sequence[CodeSnippet] = ()

    def __post_init__(self) -> None:
        # Frozen, but callers pass lists: normalize so equality and hashing of fields work.
        object.__setattr__(self, "tool_schemas", tuple(self.tool_schemas))
        object.__setattr__(self, "pins", tuple(self.pins))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "cursor_code", tuple(self.cursor_code))
        object.__setattr__(self, "question_code", tuple(self.question_code))
