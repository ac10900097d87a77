"""The one budget beside the question: how it splits, and that a real turn stays inside it.

The arithmetic is checked alone; the rest runs the real pipeline (``turn.assemble_within``) on
the embedded model's tokenizer, a real repository index and a copy of the standard library's
``json`` package under git, so the diff segment is real too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_workspace_session import make_repo

from contenox_lsp.code_segment import CodeBudget
from contenox_lsp.context_budget import ContextBudget, beside_question
from contenox_lsp.turn import WorkspaceState, assemble_within, read_disk, turn_at
from contenox_lsp.turn import repo_map as turn_repo_map
from contextasm import Assembly, SegmentKind
from repo_index import RepoIndex
from repo_index.code_search import CodeFinder

LINE = 139  # 0-based, inside JSONObject in json/decoder.py
QUESTION = "What does JSONObject return when the object is empty?"


def test_the_map_gets_its_share_and_the_code_what_is_left() -> None:
    b = ContextBudget(2000, map_share=0.25, code_cursor_share=0.5)
    assert b.map_tokens == 500
    code = b.code(700)  # the map as rendered plus everything else beside the question
    assert (code.tokens, code.cursor_tokens) == (1300, 650)
    assert b.code(2500).tokens == 0  # pins or a diff larger than the budget: no code
    assert ContextBudget(2000, code_cap=300).code(700).tokens == 300
    assert ContextBudget(2000, map_cap=3000).map_tokens == 2000  # never above the bound
    assert ContextBudget(2000, map_cap=0).map_tokens == 0
    assert b.with_question_max(128).code(700).question_room(0) == 128


def test_what_the_time_bound_keeps_from_the_question_goes_to_the_cursor_part() -> None:
    """The question's code is prefilled at the ask, bounded by time; the cursor's in idle time.
    Room the bound leaves unused is the cursor part's: it costs the ask nothing."""
    unbounded = CodeBudget(1000, cursor_share=0.35)
    bounded = CodeBudget(1000, cursor_share=0.35, question_max=300)
    assert unbounded.cursor_tokens == 350 and unbounded.question_room(350) == 650
    assert bounded.cursor_tokens == 700 and bounded.question_room(700) == 300
    # A bound above what the share leaves changes nothing; the cursor part never shrinks.
    assert CodeBudget(1000, cursor_share=0.35, question_max=900).cursor_tokens == 350
    assert CodeBudget(1000, cursor_share=0.35, question_max=300, absorb=False).cursor_tokens \
        == 350


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RepoIndex, CodeFinder]:
    root = make_repo(tmp_path_factory.mktemp("budget") / "ws").resolve()
    index = RepoIndex([root], cache_dir=root.parent / "index")
    index.build()
    finder = CodeFinder(index, lambda p: read_disk(Path(p)))
    return root, index, finder


def _turn(workspace: tuple[Path, RepoIndex, CodeFinder], session: Any, budget: ContextBudget,
          buffers: dict[Path, str] | None = None) -> Assembly:
    root, index, finder = workspace
    path = root / "json" / "decoder.py"
    text = read_disk(path)
    assert text is not None
    buffers = buffers if buffers is not None else {path: text}
    state = WorkspaceState(roots=(root,), open_buffers=buffers, focus_files=(path,))
    turn = turn_at(state.roots, path, QUESTION, text=buffers.get(path, text), line=LINE)
    return assemble_within(state, turn, index, session, budget, answer_tokens=64, finder=finder)


def _tokens(asm: Assembly, kind: SegmentKind) -> int:
    return sum(s.n_tokens for s in asm.segments if s.kind == kind and s.label != "cursor context")


@pytest.mark.parametrize("tokens", [600, 1200, 2400])
def test_a_turn_stays_inside_its_budget(workspace: Any, llama_session: Any, tokens: int) -> None:
    asm = _turn(workspace, llama_session, ContextBudget(tokens))
    assert 0 < beside_question(asm) <= tokens
    repo_map = asm.segment(SegmentKind.REPO_MAP)
    assert repo_map is not None
    # The map's own text within its part (the segment adds its heading around it).
    root, index, _ = workspace
    state = WorkspaceState(roots=(root,), focus_files=(root / "json" / "decoder.py",))
    shown = turn_repo_map(index, llama_session, ContextBudget(tokens).map_tokens, state)
    assert shown is not None and shown.text in repo_map.text
    assert len(llama_session.tokenize(shown.text, add_bos=False, special=False)) \
        <= ContextBudget(tokens).map_tokens
    assert _tokens(asm, SegmentKind.CODE) > 0  # code got what the map and the cursor left


def test_more_budget_buys_more_code_and_a_diff_takes_from_the_code_not_the_map(
    workspace: Any, llama_session: Any
) -> None:
    small = _turn(workspace, llama_session, ContextBudget(1000))
    large = _turn(workspace, llama_session, ContextBudget(2400))
    assert _tokens(large, SegmentKind.CODE) > _tokens(small, SegmentKind.CODE)

    # An unsaved edit of another file: its diff counts against the budget. The map keeps its
    # size (an edit elsewhere must not move the stable prefix's map); the code shrinks.
    root = workspace[0]
    other = root / "json" / "encoder.py"
    edited = (read_disk(other) or "") + "".join(f"\n# local note {i}" for i in range(60))
    decoder = root / "json" / "decoder.py"
    buffers = {decoder: read_disk(decoder) or "", other: edited}
    with_diff = _turn(workspace, llama_session, ContextBudget(1400), buffers)
    without = _turn(workspace, llama_session, ContextBudget(1400))
    diff_tokens = _tokens(with_diff, SegmentKind.DIFF)
    assert diff_tokens > 200
    map_with, map_without = (a.segment(SegmentKind.REPO_MAP) for a in (with_diff, without))
    assert map_with is not None and map_without is not None
    assert map_with.text == map_without.text
    assert _tokens(with_diff, SegmentKind.CODE) < _tokens(without, SegmentKind.CODE)
    assert beside_question(with_diff) <= 1400


@pytest.mark.parametrize("tokens", range(600, 2600, 100))
@pytest.mark.parametrize("question_max", [None, 160])
def test_an_ask_keeps_the_cursor_code_the_idle_prompt_prefilled(
    workspace: Any, llama_session: Any, tokens: int, question_max: int | None
) -> None:
    """The idle prefill warms the prompt up to the question (no question, so no question code);
    the ask must hold the same cursor code, or its prefill starts there instead of at the
    question. Fitting the budget trims the question's code, never the cursor's."""
    root, index, finder = workspace
    path = root / "json" / "decoder.py"
    text = read_disk(path) or ""
    state = WorkspaceState(roots=(root,), open_buffers={path: text}, focus_files=(path,))
    budget = ContextBudget(tokens, question_max=question_max)

    def at(question: str) -> Assembly:
        turn = turn_at(state.roots, path, question, text=text, line=LINE)
        return assemble_within(state, turn, index, llama_session, budget, answer_tokens=64,
                               finder=finder)

    idle, ask = at(""), at(QUESTION)
    cursor = [s.text for s in idle.segments if s.kind == SegmentKind.CODE]
    assert cursor and cursor == [s.text for s in ask.segments if s.kind == SegmentKind.CODE
                                 and s.label != "code (question)"]
    assert any(s.label == "code (question)" for s in ask.segments)
    assert beside_question(ask) <= tokens and beside_question(idle) <= tokens
    assert ask.tokens[: idle.user_start] == idle.tokens[: idle.user_start]  # what idle warms
