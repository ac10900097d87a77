"""Budget fitting on the real tokenizer: low → medium → high shrink order, never highest,
the nearest diff hunks, test-output tails, the repo-map callable, and context overflow."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from test_contextasm_support import (
    LlamaVocabTokenizer,
    load_tokenizer,
    make_identity,
    sample_inputs,
)

from contextasm import (
    Assembly,
    CacheClass,
    ContextAsmError,
    ContextOverflowError,
    OutputEntry,
    Pin,
    RepoMap,
    SegmentKind,
    TokenCache,
    UserTurn,
    assemble,
)

MAX_NEW = 100
HIGHEST = {SegmentKind.SYSTEM, SegmentKind.TOOLS, SegmentKind.POLICY, SegmentKind.INSTRUCTIONS}


@pytest.fixture(scope="session")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


MAP_LINES = [f"pkg/mod{i:03d}.py:\n  def handler_{i}(request, *, timeout=30)" for i in range(120)]


class MapRenderer:
    """Stands in for ``repo_index``: the first lines of the ranked map within a budget."""

    def __init__(self) -> None:
        self.budgets: list[int] = []

    def __call__(self, budget_tokens: int) -> tuple[str, str]:
        self.budgets.append(budget_tokens)
        n = max(0, budget_tokens // 16)
        return "\n".join(MAP_LINES[:n]), f"map-digest-b{n}"


def big_inputs(renderer: MapRenderer | None = None, **overrides: Any) -> Any:
    pin_a = "\n".join(f"value_{i} = compute({i})" for i in range(80))
    pin_b = "\n".join(f"    step_{i}(state)" for i in range(80))
    values: dict[str, Any] = {
        "repo_map": RepoMap("\n".join(MAP_LINES), "map-digest-full", render=renderer),
        "pins": (Pin("pkg/a.py", 1, 80, pin_a), Pin("pkg/b.py", 101, 180, pin_b)),
        "outputs": (
            OutputEntry(
                "terminal",
                "make build",
                "\n".join(f"[{i}] compiling unit {i}" for i in range(150)),
                stale=True,
            ),
            OutputEntry(
                "test",
                "pytest",
                "\n".join(f"tests/test_{i}.py::test_case PASSED" for i in range(80))
                + "\nFAILED tests/test_parse.py::test_strip - AssertionError",
            ),
        ),
        "user": UserTurn(
            question="Why does main() pass verbose=True to run?",
            selection="\n".join(f"    selected_line_{i}()" for i in range(30)),
            cursor_context="\n".join(f"    context_line_{i}()" for i in range(40)),
            file_path="pkg/parse.py",
            line=402,
        ),
    }
    values.update(overrides)
    return sample_inputs(**values)


def fit_to(tok: Any, inputs: Any, limit: int, **ident: Any) -> Assembly:
    identity = make_identity(tok, n_ctx=limit + MAX_NEW, **ident)
    return assemble(
        inputs, tok, identity, max_new_tokens=MAX_NEW, margin=0, token_cache=TokenCache()
    )


def state(asm: Assembly) -> dict[str, str]:
    """label → "full" / "truncated" / "dropped"."""
    out = {s.label: ("truncated" if s.truncated else "full") for s in asm.segments}
    out.update({d.label: "dropped" for d in asm.dropped})
    return out


def labelled(asm: Assembly, kinds_or_class: Any) -> list[tuple[str, str]]:
    states = state(asm)
    labels = [(s.label, s.kind, s.cache_class) for s in asm.segments] + [
        (d.label, d.kind, d.cache_class) for d in asm.dropped
    ]
    return [(lbl, states[lbl]) for lbl, kind, cls in labels if kinds_or_class(kind, cls)]


def group(asm: Assembly, kinds_or_class: Any) -> list[str]:
    return [x for _, x in labelled(asm, kinds_or_class)]


def is_low(kind: SegmentKind, cls: CacheClass) -> bool:
    return kind in (SegmentKind.DIAGNOSTICS, SegmentKind.CODE) and cls is CacheClass.LOW


def is_user(label: str) -> bool:
    """The user turn and the code around the cursor: the last stage."""
    return label in ("user", "cursor context")


def shares() -> dict[SegmentKind, float]:
    """The most of the limit one segment of a kind may take (``assembly``'s policy)."""
    from contextasm import assembly

    return {SegmentKind.DIFF: assembly._DIFF_SHARE, SegmentKind.USER: assembly._USER_SHARE,
            SegmentKind.DIAGNOSTICS: assembly._OUTPUT_SHARE}


def over_share(full: Assembly, limit: int) -> set[str]:
    """Labels of segments larger than their share of ``limit``: the budget cuts those to
    their share first, whatever their class."""
    out = set()
    for seg in full.segments:
        share = shares().get(seg.kind)
        low_output = seg.kind is SegmentKind.DIAGNOSTICS and seg.cache_class is CacheClass.LOW
        if share is not None and not low_output and seg.n_tokens > int(limit * share):
            out.add(seg.label)
    return out


def is_medium(kind: SegmentKind, cls: CacheClass) -> bool:
    return kind in (SegmentKind.DIFF, SegmentKind.DIAGNOSTICS) and cls is CacheClass.MEDIUM


def is_high(kind: SegmentKind, cls: CacheClass) -> bool:
    return kind in (SegmentKind.REPO_MAP, SegmentKind.PINNED)


def test_under_budget_nothing_is_cut(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(), 100_000)
    assert not full.dropped and not any(s.truncated for s in full.segments)
    exact = fit_to(gemma, big_inputs(), full.n_tokens)
    assert exact.tokens == full.tokens


def test_shrink_order_low_then_medium_then_high_never_highest(gemma: LlamaVocabTokenizer):
    renderer = MapRenderer()
    full = fit_to(gemma, big_inputs(renderer), 100_000)
    highest = [s.token_hash for s in full.segments if s.kind in HIGHEST]
    floor = sum(s.n_tokens for s in full.segments if s.kind in HIGHEST) + 40
    seen: set[str] = set()
    prev_total = full.n_tokens
    for limit in range(full.n_tokens, floor, -max(1, (full.n_tokens - floor) // 40)):
        asm = fit_to(gemma, big_inputs(renderer), limit)
        assert asm.n_tokens <= limit
        assert [s.token_hash for s in asm.segments if s.kind in HIGHEST] == highest
        capped = over_share(full, limit)  # cut to their share first, whatever their class
        low = [x for lbl, x in labelled(asm, is_low) if not is_user(lbl)]
        medium, high = group(asm, is_medium), group(asm, is_high)
        medium_in_share = [x for lbl, x in labelled(asm, is_medium) if lbl not in capped]
        users = {lbl: x for lbl, x in state(asm).items() if is_user(lbl)}
        user = "full" if all(x == "full" for x in users.values()) else "cut"
        if any(x != "full" for x in medium_in_share):
            assert all(x == "dropped" for x in low), limit
            seen.add("medium")
        if any(x != "full" for x in high):
            assert all(x == "dropped" for x in low + medium), limit
            seen.add("high")
        if user != "full":
            if not capped & set(users):  # within its share it is the last to give
                assert all(x == "dropped" for x in low + medium + high), limit
            seen.add("user")
        if any(x != "full" for x in low):
            seen.add("low")
        assert asm.n_tokens <= prev_total
        prev_total = asm.n_tokens
    assert seen == {"low", "medium", "high", "user"}  # the sweep crossed every stage


def test_low_goes_first_and_alone(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(), 100_000)
    stale = next(
        s
        for s in full.segments
        if s.cache_class is CacheClass.LOW and s.kind is SegmentKind.DIAGNOSTICS
    )
    asm = fit_to(gemma, big_inputs(), full.n_tokens - 1)
    assert [d.label for d in asm.dropped] == [stale.label]
    assert not any(s.truncated for s in asm.segments)
    assert asm.tokens[: stale.token_start] == full.tokens[: stale.token_start]


def test_test_output_keeps_its_tail(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(), 100_000)
    low = sum(
        s.n_tokens
        for s in full.segments
        if s.cache_class is CacheClass.LOW and s.kind in (SegmentKind.DIAGNOSTICS, SegmentKind.CODE)
    )
    asm = fit_to(gemma, big_inputs(), full.n_tokens - low - 50)
    test = next(s for s in asm.segments if s.label == "test output pytest")
    assert test.truncated
    assert "FAILED tests/test_parse.py::test_strip" in test.text
    assert "earlier lines omitted" in test.text
    assert "tests/test_0.py" not in test.text
    assert asm.segment(SegmentKind.DIFF) is not None and not asm.segment(SegmentKind.DIFF).truncated


def test_diff_keeps_the_hunks_nearest_the_cursor(gemma: LlamaVocabTokenizer):
    # Cursor at pkg/parse.py:402 → hunk @400 first, then @200, then @10, then pkg/util.py.
    markers = ["run(args, verbose=True)", 'out.append("header")', "t.strip()", "+import sys"]
    # Only the cursor's place: a selection or cursor context would take their own share.
    user = UserTurn(question="Why does main() pass verbose=True to run?",
                    file_path="pkg/parse.py", line=402)
    inputs = big_inputs(outputs=(), repo_map=None, pins=(), user=user)
    full = fit_to(gemma, inputs, 100_000)
    diff_full = full.segment(SegmentKind.DIFF)
    assert diff_full is not None and all(m in diff_full.text for m in markers)
    seen_prefixes = set()
    for cut in range(5, diff_full.n_tokens, 5):
        asm = fit_to(gemma, inputs, full.n_tokens - cut)
        diff = asm.segment(SegmentKind.DIFF)
        if diff is None or not diff.truncated:
            continue
        kept = [m in diff.text for m in markers]
        n = sum(kept)
        assert kept == [True] * n + [False] * (len(markers) - n), kept  # a prefix of the order
        assert "hunks shown, nearest the cursor/question" in diff.text
        seen_prefixes.add(n)
    assert 1 in seen_prefixes


def test_repo_map_shrinks_through_the_callable(gemma: LlamaVocabTokenizer):
    renderer = MapRenderer()
    inputs = big_inputs(renderer, outputs=(), diff="")
    full = fit_to(gemma, inputs, 100_000)
    repo = full.segment(SegmentKind.REPO_MAP)
    assert repo is not None and renderer.budgets == []
    asm = fit_to(gemma, inputs, full.n_tokens - repo.n_tokens // 2)
    smaller = asm.segment(SegmentKind.REPO_MAP)
    assert smaller is not None and smaller.truncated
    assert renderer.budgets and max(renderer.budgets) < repo.n_tokens
    assert "map-digest-b" in smaller.invalidation
    assert smaller.n_tokens < repo.n_tokens
    # Pins were not needed: the map gave enough.
    assert all(not p.truncated for p in asm.segments_of(SegmentKind.PINNED))


def test_repo_map_without_callable_keeps_its_first_lines(gemma: LlamaVocabTokenizer):
    inputs = big_inputs(None, outputs=(), diff="")
    full = fit_to(gemma, inputs, 100_000)
    repo = full.segment(SegmentKind.REPO_MAP)
    assert repo is not None
    asm = fit_to(gemma, inputs, full.n_tokens - repo.n_tokens // 2)
    smaller = asm.segment(SegmentKind.REPO_MAP)
    assert smaller is not None and smaller.truncated
    assert "pkg/mod000.py" in smaller.text and "pkg/mod119.py" not in smaller.text
    assert "more repo-map lines omitted" in smaller.text


def test_pins_are_cut_from_the_last_one(gemma: LlamaVocabTokenizer):
    inputs = big_inputs(None, outputs=(), diff="", repo_map=None)
    full = fit_to(gemma, inputs, 100_000)
    last = full.segments_of(SegmentKind.PINNED)[-1]
    asm = fit_to(gemma, inputs, full.n_tokens - last.n_tokens // 3)
    first_pin, last_pin = asm.segments_of(SegmentKind.PINNED)
    assert not first_pin.truncated and last_pin.truncated
    assert "(truncated: showing lines 101-" in last_pin.text
    # The first pin, and everything before it, is unchanged (n_ctx differs, so compare tokens).
    assert asm.tokens[: first_pin.token_end] == full.tokens[: first_pin.token_end]
    assert [s.token_hash for s in asm.segments[: first_pin.index + 1]] == [
        s.token_hash for s in full.segments[: first_pin.index + 1]
    ]


def test_user_turn_is_trimmed_last_and_keeps_the_question(gemma: LlamaVocabTokenizer):
    inputs = big_inputs()
    full = fit_to(gemma, inputs, 100_000)
    highest = sum(s.n_tokens for s in full.segments if s.kind in HIGHEST)
    asm = fit_to(gemma, inputs, highest + 60)
    user = asm.segment(SegmentKind.USER)
    assert user is not None and user.truncated
    assert "Question: Why does main() pass verbose=True to run?" in user.text
    assert {d.kind for d in asm.dropped} >= {SegmentKind.DIFF, SegmentKind.REPO_MAP}


def test_overflow_when_highest_and_question_do_not_fit(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(), 100_000)
    highest = sum(s.n_tokens for s in full.segments if s.kind in HIGHEST)
    with pytest.raises(ContextOverflowError) as err:
        fit_to(gemma, big_inputs(), highest - 1)
    e = err.value
    assert isinstance(e, ContextAsmError) and e.code == "context_overflow"
    assert e.data["limit"] == highest - 1
    assert e.data["requested"] > e.data["limit"]
    assert e.data["max_new_tokens"] == MAX_NEW and e.data["margin"] == 0
    assert e.to_dict()["code"] == "context_overflow"
    # The limit is n_ctx - max_new_tokens - margin.
    identity = make_identity(gemma, n_ctx=full.n_tokens + 10)
    with pytest.raises(ContextOverflowError) as err2:
        assemble(big_inputs(), gemma, identity, max_new_tokens=full.n_tokens, margin=10)
    assert err2.value.data["limit"] == 0


def test_shrinking_is_deterministic(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(MapRenderer()), 100_000)
    limit = full.n_tokens * 2 // 3
    a = fit_to(gemma, big_inputs(MapRenderer()), limit)
    b = fit_to(gemma, big_inputs(MapRenderer()), limit)
    assert a.tokens == b.tokens and a.manifest == b.manifest
    assert [d.label for d in a.dropped] == [d.label for d in b.dropped]


def test_block_padding_counts_against_the_budget(gemma: LlamaVocabTokenizer):
    full = fit_to(gemma, big_inputs(), 100_000, block_size=256)
    assert full.stable_end % 256 == 0
    asm = fit_to(gemma, big_inputs(), full.n_tokens - 300, block_size=256)
    assert asm.n_tokens <= full.n_tokens - 300 and asm.stable_end % 256 == 0


def test_inputs_validate_ranges():
    with pytest.raises(ContextAsmError):
        Pin("a.py", 5, 4, "x")
    with pytest.raises(ContextAsmError):
        OutputEntry("weird", "x", "y")
    with pytest.raises(ContextAsmError):
        UserTurn(question="q", line=0)
    assert (
        dataclasses.replace(OutputEntry("test", "t", "x"), stale=True).cache_class is CacheClass.LOW
    )


def test_over_budget_the_oldest_conversation_turn_goes_first(gemma: LlamaVocabTokenizer):
    """Conversation turns (contenox_lsp.runtime.conversations, kind ``turn``) are low-class outputs:
    the oldest is shrunk and dropped first; the repo map, the pins and the newer turns stay."""
    from contenox_lsp.runtime.conversations import Turn, prompt_outputs

    answer = "\n".join(f"line {i} of a long answer" for i in range(60))
    turns = [Turn(f"question {i}?", answer) for i in range(3)]
    outputs = tuple(OutputEntry(k, s, t) for k, s, t in prompt_outputs(turns))
    inputs = big_inputs(outputs=outputs)
    full = fit_to(gemma, inputs, 100_000)
    oldest = next(s for s in full.segments if s.label == "earlier turn 1")
    asm = fit_to(gemma, inputs, full.n_tokens - oldest.n_tokens // 2)
    shown = state(asm)
    assert shown["earlier turn 1"] in ("truncated", "dropped")
    assert shown["earlier turn 2"] == shown["earlier turn 3"] == "full"
    assert all(v == "full" for lbl, v in shown.items() if not lbl.startswith("earlier turn"))
    tight = fit_to(gemma, inputs, full.n_tokens - 2 * oldest.n_tokens)
    shown = state(tight)
    assert shown["earlier turn 1"] == "dropped"
    assert shown["earlier turn 3"] in ("full", "truncated")
    stable = [s for s in tight.segments if s.kind in (SegmentKind.REPO_MAP, SegmentKind.PINNED)]
    assert stable and not any(s.truncated for s in stable)


def test_a_huge_line_at_the_cursor_is_clipped_and_never_evicts_the_repo_map(
    gemma: LlamaVocabTokenizer,
):
    """Issue 15's case: a 20 KB single-line file open with the cursor on it. The budget can
    cut a code block only by whole lines, so the raw line took the repo map's room. Two fixes,
    each enough: the turn pipeline clips long lines (``contenox_lsp.turn.clip_long_lines``),
    and the user turn may take only its share of the budget before other segments shrink."""
    from contenox_lsp.turn import MAX_CONTEXT_LINE_CHARS, clip_long_lines

    line = ",".join(f'"k{i}": {i}' for i in range(2500))[:20_000]
    raw = UserTurn(question="What is in this fixture?", cursor_context=line,
                   file_path="tests/fixture.json", line=1)
    clipped = dataclasses.replace(raw, cursor_context=clip_long_lines(line))
    assert len(clipped.cursor_context or "") < MAX_CONTEXT_LINE_CHARS + 60
    # Room for everything with the clipped line: the prompt a developer would get.
    limit = fit_to(gemma, big_inputs(user=clipped), 100_000).n_tokens
    before = fit_to(gemma, big_inputs(user=raw), limit)
    after = fit_to(gemma, big_inputs(user=clipped), limit)
    # The raw line is over its share of the budget: the cursor context gives up its line, not
    # the repo map (the issue measured the map evicted and the line cut anyway).
    assert state(before)["repo map"] == "full" and state(before)["cursor context"] == "dropped"
    assert state(after)["repo map"] == "full" and state(after)["cursor context"] == "full"
    cursor = next(s for s in after.segments if s.label == "cursor context")
    assert "more characters on this line" in cursor.text
