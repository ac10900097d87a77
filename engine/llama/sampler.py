"""The sampler chain a profile describes (greedy when temperature is 0)."""

from __future__ import annotations

from typing import Any

import llama_cpp
import numpy as np

from engine.profile import Profile


def build_sampler(profile: Profile, vocab: Any) -> Any:
    """Penalties -> top-k -> top-p -> min-p -> temperature -> seeded draw; greedy at 0."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    temperature = float(profile.get("sampler.temperature"))
    repeat_penalty = float(profile.get("sampler.repeat_penalty"))
    if repeat_penalty != 1.0:
        llama_cpp.llama_sampler_chain_add(
            chain,
            llama_cpp.llama_sampler_init_penalties(
                llama_cpp.llama_vocab_n_tokens(vocab), 64, repeat_penalty, 0.0, 0.0
            ),
        )
    if temperature <= 0.0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    top_k = int(profile.get("sampler.top_k"))
    if top_k > 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(top_k))
    llama_cpp.llama_sampler_chain_add(
        chain, llama_cpp.llama_sampler_init_top_p(float(profile.get("sampler.top_p")), 1)
    )
    llama_cpp.llama_sampler_chain_add(
        chain, llama_cpp.llama_sampler_init_min_p(float(profile.get("sampler.min_p")), 1)
    )
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(temperature))
    llama_cpp.llama_sampler_chain_add(
        chain, llama_cpp.llama_sampler_init_dist(int(profile.get("context.seed")))
    )
    return chain


def greedy_token(ctx: Any, index: int, n_vocab: int) -> int:
    """The token of the largest logit at batch ``index`` — what the greedy sampler picks (the
    first of equal maxima), read in place: llama.cpp's sampler first copies the whole
    vocabulary into a candidate array, 0.3 ms a token for 262k entries, ~1 % of a decode step."""
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, index), shape=(n_vocab,))
    return int(logits.argmax())
