"""contextasm assembly on the real Gemma 3 270M tokenizer: formats, ranges, invalidation,
block alignment, determinism (in and across processes) and the token cache."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_contextasm_support import (
    LlamaVocabTokenizer,
    gguf_path,
    load_tokenizer,
    make_identity,
    sample_inputs,
)

from contextasm import (
    PROMPT_FORMATS,
    Assembly,
    ContextAsmError,
    InvalidInputError,
    OutputEntry,
    Pin,
    RepoMap,
    SegmentKind,
    TokenCache,
    Tokenizer,
    TokenizerMismatchError,
    UnknownPromptFormatError,
    UserTurn,
    assemble,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


def build(tok: Any, identity: Any, inputs: Any = None, **kw: Any) -> Assembly:
    kw.setdefault("max_new_tokens", 256)
    kw.setdefault("token_cache", TokenCache())
    return assemble(inputs or sample_inputs(), tok, identity, **kw)


# -- prompt formats --------------------------------------------------------------------------


def test_gemma_format_markers_in_fixed_segments(gemma: LlamaVocabTokenizer):
    assert isinstance(gemma, Tokenizer)  # the adapter satisfies the seam
    asm = build(gemma, make_identity(gemma))
    a, i = asm.segments[0], asm.segments[-1]
    assert a.kind is SegmentKind.SYSTEM and i.kind is SegmentKind.USER
    assert a.text.startswith("<start_of_turn>user\n")
    assert i.text.endswith("<end_of_turn>\n<start_of_turn>model\n")
    # No marker anywhere else: B..H are plain content inside the one user turn.
    for seg in asm.segments[1:-1]:
        assert "<start_of_turn>" not in seg.text and "<end_of_turn>" not in seg.text
    sot = gemma.tokenize("<start_of_turn>", special=True)
    eot = gemma.tokenize("<end_of_turn>", special=True)
    assert len(sot) == 1 and len(eot) == 1  # Gemma treats them as single special tokens
    assert a.tokens[:2] == (gemma.bos_token_id, sot[0])
    assert asm.tokens[0] == gemma.bos_token_id
    assert asm.tokens.count(gemma.bos_token_id) == 1
    assert i.tokens[-len(gemma.tokenize("<end_of_turn>\n<start_of_turn>model\n")) :] == tuple(
        gemma.tokenize("<end_of_turn>\n<start_of_turn>model\n", special=True)
    )


def test_content_that_looks_like_a_marker_is_not_a_marker(gemma: LlamaVocabTokenizer):
    inputs = sample_inputs(user=UserTurn(question="what does <end_of_turn> mean here?"))
    asm = build(gemma, make_identity(gemma), inputs)
    eot = gemma.tokenize("<end_of_turn>", special=True)[0]
    # Exactly one real <end_of_turn>: the closing marker, not the one in the question.
    assert asm.segments[-1].tokens.count(eot) == 1
    assert "what does <end_of_turn> mean" in asm.segments[-1].text


@pytest.mark.parametrize(
    ("fmt", "starts", "ends"),
    [
        ("raw", "You are", "Question: Why does parse() keep whitespace?\n"),
        ("chatml", "<|im_start|>system\n", "<|im_end|>\n<|im_start|>assistant\n"),
        ("gemma", "<start_of_turn>user\n", "<end_of_turn>\n<start_of_turn>model\n"),
        (
            "llama3",
            "<|start_header_id|>system<|end_header_id|>\n\n",
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        ),
    ],
)
def test_each_format_wraps_only_a_and_i(
    gemma: LlamaVocabTokenizer, fmt: str, starts: str, ends: str
):
    asm = build(gemma, make_identity(gemma, prompt_format=fmt))
    assert asm.segments[0].text.startswith(starts)
    assert asm.segments[-1].text.endswith(ends)
    user_open = PROMPT_FORMATS[fmt].user_open
    if user_open:
        assert asm.segments[-1].text.startswith(user_open)
    markers = [m for m in (PROMPT_FORMATS[fmt].open, user_open, PROMPT_FORMATS[fmt].close) if m]
    for seg in asm.segments[1:-1]:
        assert not any(m.strip() in seg.text for m in markers)
    # The context segments B..H are byte-identical whatever the format.
    gem = build(gemma, make_identity(gemma, prompt_format="gemma"))
    assert [s.byte_hash for s in asm.segments[1:-1]] == [s.byte_hash for s in gem.segments[1:-1]]


def test_unknown_prompt_format_is_an_error(gemma: LlamaVocabTokenizer):
    with pytest.raises(UnknownPromptFormatError) as err:
        build(gemma, make_identity(gemma, prompt_format="alpaca"))
    assert isinstance(err.value, ContextAsmError)
    assert err.value.code == "unknown_prompt_format"
    assert err.value.data["prompt_format"] == "alpaca"
    assert "gemma" in err.value.data["known"]


def test_bos_policy(gemma: LlamaVocabTokenizer):
    none = build(gemma, make_identity(gemma, bos_policy="none"))
    add = build(gemma, make_identity(gemma, bos_policy="add"))
    assert add.tokens[0] == gemma.bos_token_id and add.tokens[1:] == none.tokens
    with pytest.raises(InvalidInputError) as err:
        build(gemma, make_identity(gemma, bos_policy="maybe"))
    assert err.value.code == "invalid_input"


def test_tokenizer_must_match_identity(gemma: LlamaVocabTokenizer):
    with pytest.raises(TokenizerMismatchError) as err:
        build(gemma, make_identity(gemma, tokenizer_digest="another-tokenizer"))
    assert err.value.code == "tokenizer_mismatch"


# -- token ranges ----------------------------------------------------------------------------


def test_ranges_are_contiguous_and_equal_per_segment_tokenization(gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    asm = build(gemma, ident)
    fmt = PROMPT_FORMATS[ident.prompt_format]
    kinds = [s.kind for s in asm.segments]
    assert kinds == sorted(kinds, key=lambda k: k.order)
    assert set(kinds) == set(SegmentKind)  # the sample has every kind
    pos = 0
    for seg in asm.segments:
        assert seg.token_start == pos
        assert asm.tokens[seg.token_start : seg.token_end] == list(seg.tokens)
        pos = seg.token_end
    assert pos == len(asm.tokens) == asm.manifest.n_tokens
    # Independent tokenization, segment by segment: markers special, content plain.
    expected: list[int] = []
    for seg in asm.segments:
        text, toks = seg.text, []
        if seg.kind is SegmentKind.SYSTEM:
            toks += [gemma.bos_token_id, *gemma.tokenize(fmt.open, special=True)]
            text = text[len(fmt.open) :]
        if seg.kind is SegmentKind.USER:
            assert text.endswith(fmt.close)
            text = text[: -len(fmt.close)]
            toks += gemma.tokenize(text, special=False) + gemma.tokenize(fmt.close, special=True)
        else:
            toks += gemma.tokenize(text, special=False)
        assert list(seg.tokens) == toks, seg.label
        expected += toks
    assert asm.tokens == expected


def test_user_start_is_the_start_of_segment_i(gemma: LlamaVocabTokenizer):
    asm = build(gemma, make_identity(gemma))
    user = asm.segment(SegmentKind.USER)
    assert user is not None and asm.user_start == user.token_start == asm.manifest.user_start
    last_f = asm.segments_of(SegmentKind.PINNED)[-1]
    assert asm.stable_end == last_f.token_end


# -- invalidation ----------------------------------------------------------------------------

INVALIDATIONS = [
    ("system prompt edit", {"system_prompt": "You are a terse coding assistant."}, "system"),
    ("tool schema change", {"tool_schemas": [{"name": "explain", "parameters": {}}]}, "tools"),
    ("task policy edit", {"task_policy": "Answer at length."}, "policy"),
    ("repo instructions edit", {"repo_instructions": None}, "instructions"),
    (
        "repo map digest change",
        {"repo_map": RepoMap("pkg/parse.py:\n  def parse(text, strict)\n", "map-digest-2")},
        "repo map",
    ),
    (
        "pin edit",
        {
            "pins": (
                Pin("pkg/util.py", 1, 3, 'import os\nimport sys\nHOME = os.environ["HOME"]\n'),
                Pin("pkg/parse.py", 10, 12, "    tokens = text.split(' ')\n    return tokens\n"),
            )
        },
        "pinned pkg/parse.py:10-12",
    ),
    (
        "diff change",
        {"diff": "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"},
        "diff",
    ),
    (
        "diagnostics change",
        {
            "outputs": (
                OutputEntry("terminal", "make build", "building...\nok\n", stale=True),
                OutputEntry("test", "pytest", "tests/test_parse.py .\n1 passed\n"),
            )
        },
        "test output pytest",
    ),
    (
        "question change",
        {"user": UserTurn(question="What does render() return?", selection="return tokens",
                          cursor_context="def parse(text):\n    tokens = text.split()\n"
                          "    return tokens\n", file_path="pkg/parse.py", line=11)},
        "user",
    ),
]


@pytest.mark.parametrize(
    ("change", "label"),
    [(c, lbl) for _, c, lbl in INVALIDATIONS],
    ids=[i for i, _, _ in INVALIDATIONS],
)
def test_each_change_invalidates_its_segment_and_later_never_earlier(
    gemma: LlamaVocabTokenizer, change: dict[str, Any], label: str
):
    ident = make_identity(gemma)
    before = build(gemma, ident)
    after = build(gemma, ident, sample_inputs(**change))
    first = next(
        i
        for i, (x, y) in enumerate(zip(before.segments, after.segments, strict=False))
        if x.prefix_hash != y.prefix_hash
    )
    changed = after.segments[first]
    assert changed.label == label or before.segments[first].label == label
    # Everything earlier is byte-, token- and prefix-identical.
    for x, y in zip(before.segments[:first], after.segments[:first], strict=True):
        assert (x.byte_hash, x.token_hash, x.prefix_hash) == (
            y.byte_hash,
            y.token_hash,
            y.prefix_hash,
        )
        assert (x.token_start, x.token_end) == (y.token_start, y.token_end)
    assert before.tokens[: changed.token_start] == after.tokens[: changed.token_start]
    # Everything from the changed segment on has a new prefix hash (the prefix chain).
    later = {s.prefix_hash for s in after.segments[first:]}
    assert later.isdisjoint({s.prefix_hash for s in before.segments})
    # Later segments whose own input did not change keep their bytes.
    untouched = [
        s.byte_hash for s in before.segments[first + 1 :] if s.kind is not SegmentKind.USER
    ]
    assert set(untouched) <= {s.byte_hash for s in after.segments}
    n, reason = after.manifest.reusable_prefix(before.manifest)
    assert n == changed.token_start
    assert label in reason


def test_editing_the_second_pin_keeps_the_first(gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    before = build(gemma, ident)
    pins = sample_inputs().pins
    edited = (pins[0], dataclasses.replace(pins[1], text="    return []\n"))
    after = build(gemma, ident, sample_inputs(pins=edited))
    n, reason = after.manifest.reusable_prefix(before.manifest)
    assert n == before.segments_of(SegmentKind.PINNED)[0].token_end
    assert reason == "segment pinned pkg/parse.py:10-12 changed"


def test_selection_change_only_touches_the_user_turn(gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    before = build(gemma, ident)
    user = dataclasses.replace(sample_inputs().user, selection="tokens = text.split()")
    after = build(gemma, ident, sample_inputs(user=user))
    assert after.tokens[: after.user_start] == before.tokens[: before.user_start]
    assert after.manifest.reusable_prefix(before.manifest) == (
        after.user_start,
        "segment user changed",
    )


def test_crlf_and_trailing_whitespace_do_not_invalidate(gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma)
    before = build(gemma, ident)
    after = build(
        gemma, ident, sample_inputs(system_prompt="You are a careful coding assistant.\r\n\n  ")
    )
    assert after.tokens == before.tokens


# -- block alignment -------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [16, 64, 256])
def test_stable_end_is_block_aligned_with_newline_padding(
    gemma: LlamaVocabTokenizer, block_size: int
):
    plain = build(gemma, make_identity(gemma))
    ident = make_identity(gemma, block_size=block_size)
    asm = build(gemma, ident)
    assert asm.stable_end % block_size == 0
    assert asm.manifest.stable_end == asm.stable_end
    assert asm.manifest.identity.block_size == block_size
    last_stable = asm.segments_of(SegmentKind.PINNED)[-1]
    pad = last_stable.padding
    assert 0 <= pad < block_size
    assert asm.stable_end - pad == plain.stable_end
    newline = gemma.tokenize("\n", special=False)
    assert list(last_stable.tokens[len(last_stable.tokens) - pad :]) == newline * pad
    assert asm.tokens[: plain.stable_end] == plain.tokens[: plain.stable_end]
    # The volatile segments (diff, outputs) and then the cursor's code are padded too, each
    # group on its own: the idle pre-prefill ends on a block boundary, and so does the diff
    # whether or not cursor code follows it.
    last_output = asm.segments_of(SegmentKind.DIAGNOSTICS)[-1]
    first_code = asm.segments[last_output.index + 1]
    assert first_code.label == "code (cursor)" and first_code.token_start % block_size == 0
    keyed = asm.question_keyed_start
    assert keyed is not None and keyed % block_size == 0
    after = next(seg for seg in asm.segments if seg.token_start == keyed)
    assert after.label == "code (question)"
    before = asm.segments[after.index - 1]
    assert before.label == "cursor context"
    pads = [last_output.padding, before.padding]
    for seg, n in zip((last_output, before), pads, strict=True):
        assert 0 <= n < block_size
        assert list(seg.tokens[len(seg.tokens) - n :]) == newline * n
    unpadded = [t for seg in asm.segments for t in seg.tokens[: len(seg.tokens) - seg.padding]]
    assert unpadded == plain.tokens
    assert sum(s.padding for s in asm.segments) == pad + sum(pads)
    # An explicit argument overrides the identity's block size.
    assert build(gemma, ident, block_size=1).tokens == plain.tokens


# -- determinism -----------------------------------------------------------------------------


def _fingerprint(asm: Assembly) -> dict[str, Any]:
    return {
        "tokens": asm.tokens,
        "text": asm.text,
        "manifest": asm.manifest.to_dict(),
    }


def test_identical_inputs_identical_output(gemma: LlamaVocabTokenizer):
    ident = make_identity(gemma, block_size=32)
    a = build(gemma, ident)
    b = build(gemma, ident, sample_inputs())  # fresh inputs, fresh token cache
    assert _fingerprint(a) == _fingerprint(b)
    # Tool schema order and key order do not matter (canonical JSON, sorted by name).
    schemas = [dict(reversed(list(s.items()))) for s in reversed(sample_inputs().tool_schemas)]
    c = build(gemma, ident, sample_inputs(tool_schemas=schemas))
    assert _fingerprint(a) == _fingerprint(c)


_SCRIPT = """
import json, sys
sys.path[:0] = [{root!r}, {tests!r}]
from test_contextasm_support import load_tokenizer, make_identity, sample_inputs
from contextasm import TokenCache, assemble
tok = load_tokenizer({model!r})
asm = assemble(sample_inputs(), tok, make_identity(tok, block_size=32), max_new_tokens=256,
               token_cache=TokenCache())
json.dump({{"tokens": asm.tokens, "text": asm.text, "manifest": asm.manifest.to_dict()}},
          sys.stdout)
"""


def test_determinism_across_processes(gemma: LlamaVocabTokenizer):
    script = _SCRIPT.format(root=str(REPO_ROOT), tests=str(REPO_ROOT / "tests"), model=gguf_path())
    outputs = []
    for seed in ("1", "2"):  # different hash seeds: nothing may depend on hash()
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, env=env, check=True, timeout=120
        )
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1]
    here = _fingerprint(build(gemma, make_identity(gemma, block_size=32)))
    assert json.loads(json.dumps(here)) == outputs[0]


# -- token cache -----------------------------------------------------------------------------


class CountingTokenizer:
    """Wraps the real tokenizer and records what was tokenized."""

    def __init__(self, inner: LlamaVocabTokenizer) -> None:
        self.inner = inner
        self.texts: list[str] = []

    @property
    def tokenizer_digest(self) -> str:
        return self.inner.tokenizer_digest

    @property
    def bos_token_id(self) -> int | None:
        return self.inner.bos_token_id

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        self.texts.append(text)
        return self.inner.tokenize(text, add_bos=add_bos, special=special)


def test_token_cache_skips_unchanged_segments(gemma: LlamaVocabTokenizer):
    tok = CountingTokenizer(gemma)
    ident = make_identity(gemma)
    cache = TokenCache()
    first = assemble(sample_inputs(), tok, ident, max_new_tokens=256, token_cache=cache)
    n_first = len(tok.texts)
    assert n_first > 0
    tok.texts.clear()
    again = assemble(sample_inputs(), tok, ident, max_new_tokens=256, token_cache=cache)
    assert tok.texts == [] and again.tokens == first.tokens
    changed = assemble(
        sample_inputs(diff="diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"),
        tok,
        ident,
        max_new_tokens=256,
        token_cache=cache,
    )
    assert len(tok.texts) == 1 and "+b" in tok.texts[0]  # only the new diff was tokenized
    assert (
        changed.tokens[: changed.segment(SegmentKind.DIFF).token_start]
        == first.tokens[: first.segment(SegmentKind.DIFF).token_start]
    )


def test_token_cache_is_bounded(gemma: LlamaVocabTokenizer):
    cache = TokenCache(max_entries=3, max_tokens=1000)
    for i in range(10):
        cache.tokenize(gemma, f"line number {i}", special=False)
    assert len(cache) == 3
    small = TokenCache(max_entries=100, max_tokens=20)
    for i in range(10):
        small.tokenize(gemma, f"some text that has several tokens {i}", special=False)
    assert small.cached_tokens <= 20
    with pytest.raises(ValueError):
        TokenCache(max_entries=0)


def _big_diff(n: int) -> str:
    parts = ["diff --git a/pkg/big.py b/pkg/big.py\n--- a/pkg/big.py\n+++ b/pkg/big.py\n"]
    for i in range(n):
        parts.append(f"@@ -{i * 10 + 1},1 +{i * 10 + 1},1 @@\n-old_{i} = {i}\n+new_{i} = {i * 2}\n")
    return "".join(parts)


def test_budget_trials_never_push_out_the_stable_segments(gemma: LlamaVocabTokenizer):
    inputs = sample_inputs(diff=_big_diff(120))
    tok = CountingTokenizer(gemma)
    full = assemble(inputs, tok, make_identity(gemma), max_new_tokens=0, token_cache=TokenCache())
    ident = make_identity(gemma, n_ctx=full.n_tokens - full.segment(SegmentKind.DIFF).n_tokens // 2)
    stable_texts = {s.text for s in full.segments if s.token_end <= full.stable_end}
    # Main tier barely larger than the prompt; no trial tier at all.
    cache = TokenCache(max_tokens=full.n_tokens, trial_tokens=0)
    first = assemble(inputs, tok, ident, max_new_tokens=0, margin=0, token_cache=cache)
    assert first.segment(SegmentKind.DIFF).truncated
    tok.texts.clear()
    again = assemble(inputs, tok, ident, max_new_tokens=0, margin=0, token_cache=cache)
    assert again.tokens == first.tokens
    assert tok.texts and not (set(tok.texts) & stable_texts)  # only trials were redone
    # With a trial tier, a repeated over-budget assembly tokenizes nothing at all.
    cache = TokenCache()
    assemble(inputs, tok, ident, max_new_tokens=0, margin=0, token_cache=cache)
    tok.texts.clear()
    assert assemble(inputs, tok, ident, max_new_tokens=0, margin=0, token_cache=cache).tokens == (
        first.tokens
    )
    assert tok.texts == []


def test_raw_format_without_system_prompt_or_bos(gemma: LlamaVocabTokenizer):
    empty: dict[str, Any] = {
        "system_prompt": "",
        "tool_schemas": (),
        "task_policy": "",
        "repo_instructions": None,
        "repo_map": None,
        "pins": (),
        "diff": "",
        "outputs": (),
        "cursor_code": (),
        "question_code": (),
        "user": UserTurn(question="Why does parse() keep whitespace?", selection="return tokens"),
    }
    ident = make_identity(gemma, prompt_format="raw", bos_policy="none", block_size=8)
    asm = build(gemma, ident, sample_inputs(**empty))
    assert [s.kind for s in asm.segments] == [SegmentKind.SYSTEM, SegmentKind.USER]
    assert asm.segments[0].n_tokens == 0 and asm.stable_end == 0 and asm.user_start == 0
    assert asm.text.endswith("Question: Why does parse() keep whitespace?\n")
    assert asm.tokens == gemma.tokenize(asm.text, special=False)
