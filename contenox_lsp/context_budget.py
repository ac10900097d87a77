"""The one number that bounds a turn's context beside the question.

Everything in a turn's prompt except the fixed segments A–D (system, tools, policy,
instructions) and the question with its turn markers is *beside the question*: the repo map,
pins, diff, outputs, the code segments J and where the user is (file, line, the code around
the cursor or the selection). ``ContextBudget.tokens`` bounds it. The repo map gets its share
first (a fixed size, so an edit elsewhere never moves the map); pins, diff, outputs and the
cursor context are the user's and are never dropped to fit; the code segments get what is
left. The language server (``contextTokens``), the command line (``--context-tokens``) and
``contenox-lsp eval context`` (its budgets) all split it here, so a figure the eval reports at
a budget is the context the server builds at that budget.

The repo map's and the code's own budgets (``repoMapTokens``, ``codeTokens``) stay as caps a
client may set; unset, the shares below decide.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contenox_lsp.code_segment import CodeBudget
    from contextasm import Assembly

#: The server's default bound beside the question (what its map and code budgets added up to).
DEFAULT_CONTEXT_TOKENS = 2560
#: The repo map's share of it by default (1,024 of 2,560 tokens, the map's size before).
DEFAULT_MAP_SHARE = 0.4
#: The cursor's part of the code segments by default (``CodeBudget``'s own default).
DEFAULT_CODE_CURSOR_SHARE = 0.35

#: Segments not beside the question (A–D), by ``SegmentKind`` value: this module stays light
#: to import (the CLI's options use it).
_FIXED_KINDS = frozenset({"system", "tools", "policy", "instructions"})


@dataclass(frozen=True)
class ContextBudget:
    """``tokens`` beside the question: the repo map gets ``map_share`` of it (or
    ``map_cap`` when set), the code segments the rest after everything else beside the question
    (at most ``code_cap`` when set), split between the cursor's part and the question's by
    ``code_cursor_share``; ``question_max`` bounds the question's part (the server's time
    bound, ``code_segment.question_cap``)."""

    tokens: int = DEFAULT_CONTEXT_TOKENS
    map_share: float = DEFAULT_MAP_SHARE
    code_cursor_share: float = DEFAULT_CODE_CURSOR_SHARE
    map_cap: int | None = None
    code_cap: int | None = None
    question_max: int | None = None

    @property
    def map_tokens(self) -> int:
        """The repo map's budget: its share, or the cap a client set, never above ``tokens``."""
        wanted = int(self.tokens * self.map_share) if self.map_cap is None else self.map_cap
        return max(0, min(wanted, self.tokens))

    def code(self, beside_without_code: int) -> CodeBudget:
        """The code segments' budget when the rest of the context beside the question (the map
        as rendered, pins, diff, outputs, the cursor context) takes ``beside_without_code``."""
        from contenox_lsp.code_segment import CodeBudget  # keeps the CLI's start-up light

        room = max(0, self.tokens - beside_without_code)
        if self.code_cap is not None:
            room = min(room, self.code_cap)
        return CodeBudget(room, cursor_share=self.code_cursor_share,
                          question_max=self.question_max)

    def with_question_max(self, question_max: int | None) -> ContextBudget:
        return replace(self, question_max=question_max)

    def describe(self, beside_used: int | None = None) -> dict[str, object]:
        """What ``contenox/explainContext`` and ``explain-context --json`` show as ``budget``."""
        return {"contextTokens": self.tokens, "mapTokens": self.map_tokens,
                "mapShare": self.map_share, "codeCursorShare": self.code_cursor_share,
                "codeTokensCap": self.code_cap, "besideQuestion": beside_used}


def fixed_tokens(asm: Assembly) -> int:
    """Tokens of the prompt that are not beside the question: A–D, the question itself and the
    user turn's markers after it."""
    fixed = sum(s.n_tokens for s in asm.segments if s.kind in _FIXED_KINDS)
    from contextasm.segments import SegmentKind

    user = asm.segment(SegmentKind.USER)
    if user is None:
        return fixed
    return fixed + user.n_tokens - asm.question_offset


def beside_question(asm: Assembly) -> int:
    """Tokens of ``asm`` beside the question (what ``ContextBudget.tokens`` bounds)."""
    return asm.n_tokens - fixed_tokens(asm)
