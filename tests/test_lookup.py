"""Prompt-lookup decoding (``stream(lookup=N)``) on the real embedded model: drafts come from
the sequence's own n-grams, the output is warm == cold bitwise, the KV cache holds no rejected
draft afterwards (a longer prompt reused after it equals its cold run), and it starts as the
plain loop does. Later tokens may differ from the plain loop's: a token computed inside a batch
of several rounds differently from one computed alone, and a near tie can flip (measured on
this machine: the first difference on the copy text below comes at token 22 of 96)."""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Any

import pytest

from engine.lookup import NgramIndex

SOURCE = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")[:1400]
PROMPT = "A Python module:\n\n" + SOURCE + "\n\nThe same module, copied exactly:\n\n"


def test_drafts_follow_the_latest_earlier_occurrence_of_the_tail() -> None:
    ix = NgramIndex([1, 2, 3, 4, 5, 6, 9, 1, 2, 3])
    assert ix.draft(4) == [4, 5, 6, 9]
    assert ix.draft(2) == [4, 5]
    ix.append(7)  # 2, 3, 7 never occurred; 3, 7 neither: no draft
    assert ix.draft(4) == []
    assert NgramIndex([5, 5, 5]).draft(3) == [5]  # the tail's latest earlier match
    assert NgramIndex([1, 2]).draft(0) == []


@pytest.fixture()
def prompt(llama_session: Any) -> list[int]:
    tokens: list[int] = llama_session.tokenize(PROMPT, add_bos=True)
    return tokens


def test_lookup_decoding_is_warm_equals_cold(
        llama_session: Any, prompt: list[int]) -> None:
    s = llama_session
    s.reset()
    s.prefill(prompt)
    plain = s.generate(96).tokens
    s.reset()
    s.prefill(prompt)
    cold = s.generate(96, lookup=8).tokens
    stats = s.last_lookup
    assert stats is not None and stats.drafted > 0
    assert stats.accepted > 0  # the model's own next tokens were among the drafts
    # Warm: another suffix was decoded on the shared prefix first.
    s.reset()
    s.prefill(prompt[:-12] + s.tokenize(" something else entirely", add_bos=False))
    s.generate(8, lookup=8)
    s.prefill(prompt)
    assert s.generate(96, lookup=8).tokens == cold
    # The first token comes from the prefill's logits in both; the next ones from a batch.
    assert cold[0] == plain[0] and len(cold) == len(plain)


def test_a_stream_stopped_early_still_reports_its_lookup(
        llama_session: Any, prompt: list[int]) -> None:
    """A consumer that stops at a stop text closes the stream before its end: the drafted
    and accepted counts so far are still there."""
    s = llama_session
    s.reset()
    s.prefill(prompt)
    stream = s.stream(max_tokens=96, lookup=8)
    seen = ""
    for piece in stream:
        seen += piece
        if len(seen) > 200:
            break
    stream.close()
    assert s.last_lookup is not None and s.last_lookup.accepted > 0


def test_no_rejected_draft_stays_in_the_cache(llama_session: Any, prompt: list[int]) -> None:
    """After a lookup generation the live sequence is exactly prompt + kept tokens: a longer
    prompt that extends it is reused and gives its cold run's logits and tokens."""
    s = llama_session
    s.reset()
    s.prefill(prompt)
    out = s.generate(48, lookup=8).tokens
    longer = [*prompt, *out, *s.tokenize("\n\n# Done.\n", add_bos=False)]
    assert s.resident_tokens == [*prompt, *out[:-1]]  # the last token has no KV yet
    warm = s.prefill(longer)
    assert warm.reused_tokens >= len(prompt)
    warm_out = (s.next_token_logits().tobytes(), s.generate(8).tokens)
    s.reset()
    s.prefill(longer)
    assert (s.next_token_logits().tobytes(), s.generate(8).tokens) == warm_out


def test_lookup_is_ignored_when_sampling_is_not_greedy(llama_session: Any,
                                                       prompt: list[int]) -> None:
    from engine import load_profile, open_session

    hot = load_profile(None).with_overrides({"sampler.temperature": 0.7,
                                             "context.n_ctx": 1024}, source="test")
    with open_session(hot) as s:
        s.prefill(prompt[:600])
        s.generate(8, lookup=8)
        assert s.last_lookup is None
