"""Systems c and d of the edit-trace replay, fed the prompts the server assembled.

c. A fresh llama.cpp context per request (an in-process server without cache management):
   context creation + full prefill + the first token, every ask.
d. llama-cpp-python's high-level ``Llama`` with its built-in longest-common-prefix reuse, fed
   the same text in the order common editor plugins use: the current file and cursor context
   first, then the other snippets (system prompt, tools, repo map, pins, diff), the question
   last.

Both are llama.cpp. On another backend (``profile.backend``, e.g. OpenVINO) they would compare
the server with another runtime, so they run on that backend's own engine session instead
(``run_session_cold``, ``run_session_prefix_reuse``): c is a request with nothing cached, d the
backend's prefix reuse fed the editor-plugin order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from contenox_bench.bare import _FLASH, _KV_TYPES, BareContext, BareModel
from contenox_bench.corpus import cold_reset
from contextasm.budget import padding_for
from contextasm.segments import STABLE_KINDS
from engine.llama.model import amx_kernels

Tokenize = Callable[[str, bool], list[int]]
Segments = Sequence[dict[str, Any]]


def tokenize_with(model: BareModel) -> Tokenize:
    import llama_cpp

    def tokenize(text: str, special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        while True:
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(model.vocab, data, len(data), buf, cap, False, special)
            if n >= 0:
                return list(buf[:n])
            cap = -n

    return tokenize


def _split_marker(text: str, marker: str, at_start: bool) -> tuple[str, str]:
    if not marker:
        return ("", text) if at_start else (text, "")
    if at_start and text.startswith(marker):
        return marker, text[len(marker):]
    if not at_start and text.endswith(marker):
        return text[: -len(marker)], marker
    return ("", text) if at_start else (text, "")


def contenox_order(segments: Segments, tok: Tokenize, bos: int | None, fmt_open: str,
                   fmt_close: str, block_size: int = 1) -> list[int]:
    """The server's prompt: segments in order, markers special, content plain; with
    ``block_size`` > 1 each region the assembler pads (``contextasm.budget.region``: the
    stable A–F, the diff and outputs, the cursor's code) ends with newline tokens on a whole
    number of blocks (the padding is in no segment's text)."""
    out: list[int] = [] if bos is None else [bos]
    stable = {k.value for k in STABLE_KINDS}

    def region(seg: dict[str, Any]) -> int:
        kind = seg.get("kind")
        if kind in stable:
            return 0
        if kind == "user" or seg.get("label") == "code (question)":
            return 3
        return 2 if kind == "code" else 1

    last = {r: max((i for i, seg in enumerate(segments) if region(seg) == r), default=-1)
            for r in (0, 1, 2)}
    last_stable = last[0]
    pads = {i for i in last.values() if i >= 0}
    for i, seg in enumerate(segments):
        text = seg["text"]
        if i == 0:
            marker, text = _split_marker(text, fmt_open, at_start=True)
            out += tok(marker, True) if marker else []
        if i == len(segments) - 1:
            body, marker = _split_marker(text, fmt_close, at_start=False)
            out += tok(body, False) + (tok(marker, True) if marker else [])
        else:
            out += tok(text, False)
        if i in pads or i == last_stable:
            out += tok("\n", False) * padding_for(len(out), block_size)
    return out


def editor_order(segments: Segments, question: str, tok: Tokenize, bos: int | None,
                 fmt_open: str, fmt_close: str) -> list[int]:
    """The same text, current file and cursor context first, then the other snippets."""
    middle = segments[1:-1]
    first = segments[0]["text"]
    rest = [s["text"] for s in middle if s.get("label") != "cursor context"]
    cursor = "".join(s["text"] for s in middle if s.get("label") == "cursor context")
    marker, system_text = _split_marker(first, fmt_open, at_start=True)
    user_body, close = _split_marker(segments[-1]["text"], fmt_close, at_start=False)
    cut = user_body.find("Question: " + question.splitlines()[0])
    current, ask = (user_body[:cut], user_body[cut:]) if cut >= 0 else ("", user_body)
    current += cursor
    out: list[int] = [] if bos is None else [bos]
    out += tok(marker, True) if marker else []
    for text in [current, system_text, *rest, ask]:
        out += tok(text, False) if text else []
    out += tok(close, True) if close else []
    return out


def run_fresh_context(model: BareModel, prompts: Sequence[list[int]],
                      on_step: Callable[[str], None]) -> list[dict[str, Any]]:
    """System c: a new context for every ask."""
    rows = []
    for i, tokens in enumerate(prompts):
        t0 = time.perf_counter()
        ctx = BareContext(model)
        try:
            prefill_ms = ctx.prefill(tokens)
            ctx.greedy()
            ttft = (time.perf_counter() - t0) * 1000.0
        finally:
            ctx.close()
        rows.append({"ttft_ms": ttft, "prefill_ms": prefill_ms, "context_ms": ctx.create_ms,
                     "prompt_tokens": len(tokens), "reused_tokens": 0,
                     "new_tokens": len(tokens)})
        on_step(f"trace c: ask {i + 1}/{len(prompts)}")
    return rows


def session_tokenize(session: Any) -> Tokenize:
    """The session's own tokenizer, in the shape the prompt rebuilders take."""

    def tokenize(text: str, special: bool) -> list[int]:
        return list(session.tokenize(text, special=special))

    return tokenize


def session_bos(session: Any, profile: Any) -> int | None:
    """The BOS the server's assembler puts first (bos_policy "add" as the session resolved
    ``prompt.bos``), or None."""
    bos = session.bos_token_id
    policy = getattr(session, "profile", profile).bos_policy
    return int(bos) if bos is not None and bos >= 0 and policy == "add" else None


def run_session_cold(session: Any, primer: Sequence[int], prompts: Sequence[list[int]],
                     on_step: Callable[[str], None]) -> list[dict[str, Any]]:
    """System c on an engine session: every ask with nothing cached (``cold_reset`` first, not
    timed: on OpenVINO ``reset()`` rebuilds the pipeline, which is loading, not a context), then
    the prefill and the first token (TTFT as the engine measures it: prefill start to the first
    token)."""
    rows = []
    for i, tokens in enumerate(prompts):
        t0 = time.perf_counter()
        cold_reset(session, primer)
        reset_ms = (time.perf_counter() - t0) * 1000.0
        r = session.prefill(tokens)
        g = session.generate(1)
        rows.append({"ttft_ms": g.ttft_ms, "prefill_ms": r.prefill_ms, "context_ms": None,
                     "reset_ms": reset_ms, "prompt_tokens": len(tokens),
                     "reused_tokens": r.reused_tokens, "new_tokens": r.new_tokens})
        on_step(f"trace c: ask {i + 1}/{len(prompts)}")
    return rows


def run_session_prefix_reuse(session: Any, primer: Sequence[int], prompts: Sequence[list[int]],
                             max_tokens: int, on_step: Callable[[str], None]
                             ) -> list[dict[str, Any]]:
    """System d on an engine session: one session for the whole trace, its own prefix reuse
    (on OpenVINO the pipeline's prefix cache, whole KV blocks), ``max_tokens`` per ask."""
    cold_reset(session, primer)  # nothing of system c stays cached
    rows = []
    for i, tokens in enumerate(prompts):
        r = session.prefill(tokens)
        g = session.generate(max_tokens)
        rows.append({"ttft_ms": g.ttft_ms, "prompt_tokens": len(tokens),
                     "reused_tokens": r.reused_tokens, "new_tokens": r.new_tokens})
        on_step(f"trace d: ask {i + 1}/{len(prompts)}")
    return rows


def run_llama_high_level(model_path: str, profile: Any, prompts: Sequence[list[int]],
                         max_tokens: int, on_step: Callable[[str], None]) -> list[dict[str, Any]]:
    """System d: one persistent ``Llama``, its generate() reusing the longest common prefix."""
    import os

    from llama_cpp import Llama

    cores = os.cpu_count() or 1
    with _without_amx():
        llm = Llama(
            model_path=model_path,
            n_gpu_layers=int(profile.get("context.n_gpu_layers")),
            n_ctx=profile.n_ctx,
            n_batch=profile.n_batch,
            n_ubatch=int(profile.get("context.n_ubatch")),
            n_threads=int(profile.get("context.n_threads")) or cores,
            n_threads_batch=int(profile.get("context.n_threads_batch")) or cores,
            flash_attn=_FLASH[str(profile.get("context.flash_attn"))] == 1,
            swa_full=bool(profile.get("context.swa_full")),
            type_k=_KV_TYPES[str(profile.get("context.type_k"))],
            type_v=_KV_TYPES[str(profile.get("context.type_v"))],
            seed=int(profile.get("context.seed")),
            verbose=False,
        )
    rows = []
    try:
        for i, tokens in enumerate(prompts):
            cached = list(llm.input_ids[: llm.n_tokens])
            lcp = 0
            for a, b in zip(cached, tokens, strict=False):
                if a != b:
                    break
                lcp += 1
            reused = min(lcp, len(tokens) - 1)
            t0 = time.perf_counter()
            gen = llm.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0)
            ttft = 0.0
            for n, _tok in enumerate(gen):
                if n == 0:
                    ttft = (time.perf_counter() - t0) * 1000.0
                if n + 1 >= max_tokens:
                    break
            gen.close()
            rows.append({"ttft_ms": ttft, "prompt_tokens": len(tokens),
                         "reused_tokens": reused, "new_tokens": len(tokens) - reused})
            on_step(f"trace d: ask {i + 1}/{len(prompts)}")
    finally:
        llm.close()
    return rows


@contextlib.contextmanager
def _without_amx() -> Iterator[None]:
    """On a llama.cpp build with AMX kernels (``amx_kernels``), ``Llama`` loads its weights
    without repacking (its default repacks into the AMX buffer type, whose matmul crashes):
    it has no switch for it, so the default model parameters it starts from are wrapped for
    the load."""
    import llama_cpp.llama_cpp as raw

    if not amx_kernels():
        yield
        return
    default = raw.llama_model_default_params

    def params() -> Any:
        p = default()
        p.use_extra_bufts = False
        return p

    raw.llama_model_default_params = params
    try:
        yield
    finally:
        raw.llama_model_default_params = default
