"""A bare llama-cpp-python low-level loop: the reference the engine's overhead is measured
against, and system c of the trace (a fresh context per request).

Nothing but llama.cpp calls: decode the prompt in ``n_batch`` chunks with logits for the last
token only, then take the argmax. Context parameters mirror the profile key for key.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np

from engine.llama.model import amx_kernels

_KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8,
             "bf16": 30}
_FLASH = {"auto": -1, "off": 0, "on": 1}
_ROPE = {"unspecified": -1, "none": 0, "linear": 1, "yarn": 2, "longrope": 3}


def context_params(profile: Any) -> Any:
    """llama_context_params with the profile's values (what the engine sets, minus callbacks)."""
    p = llama_cpp.llama_context_default_params()
    cores = os.cpu_count() or 1
    p.n_ctx = profile.n_ctx
    p.n_batch = profile.n_batch
    p.n_ubatch = int(profile.get("context.n_ubatch"))
    p.n_seq_max = int(profile.get("context.n_seq_max"))
    p.n_threads = int(profile.get("context.n_threads")) or cores
    p.n_threads_batch = int(profile.get("context.n_threads_batch")) or cores
    p.flash_attn_type = _FLASH[str(profile.get("context.flash_attn"))]
    p.type_k = _KV_TYPES[str(profile.get("context.type_k"))]
    p.type_v = _KV_TYPES[str(profile.get("context.type_v"))]
    p.rope_scaling_type = _ROPE[str(profile.get("context.rope_scaling_type"))]
    p.rope_freq_base = float(profile.get("context.rope_freq_base"))
    p.rope_freq_scale = float(profile.get("context.rope_freq_scale"))
    p.swa_full = bool(profile.get("context.swa_full"))
    p.kv_unified = True
    p.no_perf = True
    return p


class BareModel:
    def __init__(self, path: str, profile: Any) -> None:
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = int(profile.get("context.n_gpu_layers"))
        params.use_extra_bufts = not amx_kernels()  # llama.cpp's default, but AMX crashes
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.profile = profile

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None


class BareContext:
    """One llama.cpp context; ``prefill`` + ``greedy`` is the whole request path."""

    def __init__(self, model: BareModel) -> None:
        t0 = time.perf_counter()
        self.model = model
        self.n_batch = model.profile.n_batch
        self.ctx = llama_cpp.llama_init_from_model(model.model, context_params(model.profile))
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create a context")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.create_ms = (time.perf_counter() - t0) * 1000.0

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)

    def prefill(self, tokens: Sequence[int]) -> float:
        """Decode ``tokens`` from position 0; returns milliseconds."""
        t0 = time.perf_counter()
        b = self.batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            b.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = start + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 0
            b.logits[len(chunk) - 1] = int(start + len(chunk) >= len(tokens))
            status = int(llama_cpp.llama_decode(self.ctx, b))
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status}")
        return (time.perf_counter() - t0) * 1000.0

    def greedy(self) -> int:
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, -1)
        logits = np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(self.model.n_vocab,)
        )
        return int(logits.argmax())

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
