"""explain-context rows, statuses, totals and the plain-text table."""

from __future__ import annotations

import json
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
    ExplainRow,
    ExplainTotals,
    SegmentKind,
    TokenCache,
    assemble,
    explain,
    format_explain_table,
)


@pytest.fixture(scope="session")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


def build(tok: Any, inputs: Any = None, n_ctx: int = 8192) -> Assembly:
    ident = make_identity(tok, n_ctx=n_ctx)
    return assemble(
        inputs or sample_inputs(), tok, ident, max_new_tokens=256, token_cache=TokenCache()
    )


def _row(label: str, tokens: int, status: str) -> ExplainRow:
    return ExplainRow(
        kind=SegmentKind.SYSTEM, label=label, tokens=tokens, status=status, reused=0,
        full_tokens=tokens, token_start=0, token_end=tokens, byte_hash="", token_hash="",
        prefix_hash="", cache_class="highest", invalidation="",
    )  # fmt: skip


def test_table_matches_the_brief():
    rows = [
        _row("system", 900, "cached"),
        _row("tools", 4200, "cached"),
        _row("repo map", 12000, "cached"),
        _row("pinned", 18000, "cached"),
        _row("diff", 2200, "new"),
        _row("user", 180, "new"),
    ]
    assert format_explain_table(rows) == (
        "system:      900 tokens   cached\n"
        "tools:      4200 tokens   cached\n"
        "repo map:  12000 tokens   cached\n"
        "pinned:    18000 tokens   cached\n"
        "diff:       2200 tokens   new\n"
        "user:        180 tokens   new\n"
    )
    totals = ExplainTotals(total=37480, reused=35100, new=2380, estimated_prefill_ms=19040.0)
    assert format_explain_table(rows, totals).endswith(
        "total 37480 tokens: 35100 reused, 2380 new, ~19040 ms prefill\n"
    )
    assert format_explain_table([]) == ""


def test_statuses_follow_the_reused_prefix(gemma: LlamaVocabTokenizer):
    asm = build(gemma)
    ex = explain(asm, asm.stable_end, prefill_tokens_per_s=125.0)
    for row, seg in zip(ex.rows, asm.segments, strict=True):
        assert row.label == seg.label and row.tokens == seg.n_tokens
        assert row.status == ("cached" if seg.token_end <= asm.stable_end else "new")
        assert (row.token_start, row.token_end) == (seg.token_start, seg.token_end)
        assert row.prefix_hash == seg.prefix_hash and row.cache_class == seg.cache_class.value
    t = ex.totals
    assert (t.total, t.reused, t.new) == (
        asm.n_tokens,
        asm.stable_end,
        asm.n_tokens - asm.stable_end,
    )
    assert t.estimated_prefill_ms == pytest.approx(t.new / 125.0 * 1000.0, abs=0.1)
    assert explain(asm, asm.stable_end).totals.estimated_prefill_ms is None
    # JSON view is plain data.
    d = json.loads(json.dumps(ex.to_dict()))
    assert d["totals"]["reused"] == asm.stable_end
    keys = {"kind", "label", "tokens", "status", "token_start", "token_end", "byte_hash",
            "token_hash", "prefix_hash", "cache_class", "invalidation"}  # fmt: skip
    assert keys <= set(d["segments"][0])


def test_partially_reused_segment_is_new_with_its_reused_count(gemma: LlamaVocabTokenizer):
    asm = build(gemma)
    diff = asm.segment(SegmentKind.DIFF)
    assert diff is not None
    rows = {r.label: r for r in explain(asm, diff.token_start + 2).rows}
    assert rows["diff"].status == "new" and rows["diff"].reused == 2
    assert rows["system"].status == "cached"
    # Clamped: more reused than the prompt has is the whole prompt.
    assert explain(asm, 10**9).totals.reused == asm.n_tokens
    assert all(r.status == "cached" for r in explain(asm, asm.n_tokens).rows)


def test_truncated_and_dropped_segments(gemma: LlamaVocabTokenizer):
    full = build(gemma, n_ctx=100_000)
    stale = next(s for s in full.segments if s.kind is SegmentKind.DIAGNOSTICS)
    diff = full.segment(SegmentKind.DIFF)
    assert diff is not None
    # Room for everything except the stale log and half the diff.
    limit = full.n_tokens - stale.n_tokens - diff.n_tokens // 2
    asm = build(gemma, n_ctx=limit + 256 + 32)
    ex = explain(asm, 0)
    rows = {r.label: r for r in ex.rows}
    assert rows[stale.label].status == "evicted" and rows[stale.label].tokens == 0
    assert rows[stale.label].full_tokens == stale.n_tokens
    assert rows["diff"].status == "truncated" and rows["diff"].full_tokens == diff.n_tokens
    text = format_explain_table(ex.rows)
    assert f"(left out: {stale.n_tokens} tokens over budget)" in text
    assert f"truncated (from {diff.n_tokens})" in text
    # Rows stay in prompt order, dropped ones at their kind's place.
    assert [r.kind.order for r in ex.rows] == sorted(r.kind.order for r in ex.rows)
