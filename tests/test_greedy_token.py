"""Greedy decoding reads the largest logit in place (``engine.llama.sampler.greedy_token``)
instead of running llama.cpp's greedy sampler, which first copies the whole vocabulary into a
candidate array: it must pick the same token, ties included."""

from __future__ import annotations

import ctypes
import sysconfig
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from engine.llama.sampler import greedy_token


def _llama_greedy(logits: list[float]) -> int:
    """What llama.cpp's greedy sampler picks from ``logits``."""
    n = len(logits)
    data = (llama_cpp.llama_token_data * n)(
        *(llama_cpp.llama_token_data(i, x, 0.0) for i, x in enumerate(logits)))
    cur = llama_cpp.llama_token_data_array(data, n, -1, False)
    sampler = llama_cpp.llama_sampler_init_greedy()
    try:
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(cur))
    finally:
        llama_cpp.llama_sampler_free(sampler)
    return int(data[cur.selected].id)


@pytest.mark.parametrize("logits", [
    [0.0, 3.5, -1.0, 2.0],
    [1.0, 4.0, 4.0, 2.0, 4.0],  # equal maxima: the first
    [-3.0, -3.0, -5.0],
    [7.0],
])
def test_the_largest_logit_is_the_greedy_samplers_choice(
        logits: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    row = (ctypes.c_float * len(logits))(*logits)
    monkeypatch.setattr(llama_cpp, "llama_get_logits_ith",
                        lambda _ctx, _i: ctypes.cast(row, ctypes.POINTER(ctypes.c_float)))
    assert greedy_token(None, -1, len(logits)) == _llama_greedy(logits)


def test_on_the_model_it_is_the_greedy_samplers_token(llama_session: Any) -> None:
    s = llama_session
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")
    toks = s.tokenize(text)[:240]
    sampler = llama_cpp.llama_sampler_init_greedy()
    try:
        for n in (40, 120, 240):
            s.prefill(toks[:n])
            assert greedy_token(s._ctx, -1, s.n_vocab) == int(
                llama_cpp.llama_sampler_sample(sampler, s._ctx, -1))
    finally:
        llama_cpp.llama_sampler_free(sampler)
