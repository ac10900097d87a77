"""Loading a GGUF model and creating llama.cpp contexts from a profile (low-level API)."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp

from engine.errors import ModelLoadError, ProfileMismatchError, UnsupportedCapabilityError
from engine.fim import FimTokens
from engine.llama import logbridge
from engine.llama.abort_flag import AbortFlag
from engine.model_files import cached_file_facts, resolve_model_path, sha256_file
from engine.profile import Profile

log = logging.getLogger(__name__)

_GGML_TYPES = {
    "f32": llama_cpp.GGML_TYPE_F32,
    "f16": llama_cpp.GGML_TYPE_F16,
    "bf16": 30,  # GGML_TYPE_BF16
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
}
_FLASH_ATTN = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
_ROPE_SCALING = {
    "unspecified": llama_cpp.LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
    "none": llama_cpp.LLAMA_ROPE_SCALING_TYPE_NONE,
    "linear": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LINEAR,
    "yarn": llama_cpp.LLAMA_ROPE_SCALING_TYPE_YARN,
    "longrope": llama_cpp.LLAMA_ROPE_SCALING_TYPE_LONGROPE,
}

_backend_lock = threading.Lock()
_backend_ready = False


def system_info() -> str:
    """The llama.cpp build's system info: the CPU features its kernels were compiled for."""
    return str(llama_cpp.llama_print_system_info().decode("utf-8", errors="replace").strip())


def amx_kernels() -> bool:
    """Whether this llama.cpp build has Intel AMX kernels. With them, repacked weights
    (``use_extra_bufts``) go to the AMX buffer type first, and its matmul crashed the process
    (SIGSEGV in ``ggml_backend_amx_mul_mat``) on every batch of more than one token of Gemma
    3 270M on an Intel Xeon with AMX (llama-cpp-python 0.3.36): repacking is never turned on
    there (``AMX_REFUSAL``)."""
    return "AMX_INT8 = 1" in system_info()


AMX_REFUSAL = ("repacked weights would run on llama.cpp's AMX kernels on this CPU, which "
               "crashed the process in this build (SIGSEGV in ggml_backend_amx_mul_mat); "
               "set context.repack_weights = false (the default)")


def backend_version() -> str:
    """llama-cpp-python version plus the llama.cpp build's system info (features compiled in)."""
    info = system_info()
    digest = hashlib.sha256(info.encode()).hexdigest()[:12]
    return f"llama-cpp-python {llama_cpp.__version__}; llama.cpp {digest}"


def _ensure_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            logbridge.install()
            llama_cpp.llama_backend_init()
            _backend_ready = True


@dataclass
class LoadedModel:
    """A model and its identity facts; contexts are created (and rebuilt) from it."""

    path: Path
    model: Any  # llama_model_p
    vocab: Any  # llama_vocab_p
    n_vocab: int
    n_ctx_train: int
    n_swa: int
    bos_id: int | None
    model_digest: str
    tokenizer_digest: str
    chat_template: str | None
    chat_template_digest: str
    description: str
    fim: FimTokens | None = None
    adds_bos: bool = True  # the vocabulary's own BOS policy (tokenizer.ggml.add_bos_token)

    def close(self) -> None:
        if self.model is not None:
            llama_cpp.llama_model_free(self.model)
            self.model = None


def _vocab_digest(vocab: Any, n_vocab: int) -> str:
    """sha256 over every token's text, score and attributes plus the special-token ids."""
    h = hashlib.sha256()
    for tok in range(n_vocab):
        text = llama_cpp.llama_vocab_get_text(vocab, tok) or b""
        score = llama_cpp.llama_vocab_get_score(vocab, tok)
        attr = llama_cpp.llama_vocab_get_attr(vocab, tok)
        h.update(text + b"\0" + repr(score).encode() + b"\0" + str(attr).encode() + b"\n")
    specials = [
        llama_cpp.llama_vocab_type(vocab),
        llama_cpp.llama_vocab_bos(vocab),
        llama_cpp.llama_vocab_eos(vocab),
        llama_cpp.llama_vocab_eot(vocab),
        llama_cpp.llama_vocab_nl(vocab),
        llama_cpp.llama_vocab_pad(vocab),
        int(llama_cpp.llama_vocab_get_add_bos(vocab)),
        int(llama_cpp.llama_vocab_get_add_eos(vocab)),
    ]
    h.update(repr(specials).encode())
    return h.hexdigest()


def fim_of(vocab: Any) -> FimTokens | None:
    """The FIM tokens llama.cpp found in the vocabulary (GGUF metadata or the token texts of
    the known families); None unless prefix, suffix and middle all exist."""
    pre = llama_cpp.llama_vocab_fim_pre(vocab)
    suf = llama_cpp.llama_vocab_fim_suf(vocab)
    mid = llama_cpp.llama_vocab_fim_mid(vocab)
    if min(pre, suf, mid) < 0:
        return None
    rep = llama_cpp.llama_vocab_fim_rep(vocab)
    sep = llama_cpp.llama_vocab_fim_sep(vocab)
    return FimTokens(pre, suf, mid, rep if rep >= 0 else None, sep if sep >= 0 else None)


@contextlib.contextmanager
def _vocab_only(path: Path) -> Iterator[Any]:
    """The vocabulary of a GGUF file, without its weights."""
    _ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadError(f"llama.cpp could not read the vocabulary of {path}",
                             path=str(path))
    try:
        yield llama_cpp.llama_model_get_vocab(model)
    finally:
        llama_cpp.llama_model_free(model)


def vocab_fim_tokens(path: Path) -> FimTokens | None:
    """The FIM tokens of a GGUF file's vocabulary (weights are not loaded)."""
    with _vocab_only(path) as vocab:
        return fim_of(vocab)


def vocab_chat_template(path: Path) -> str | None:
    """The chat template in a GGUF file's metadata (weights are not loaded); None if none."""
    _ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadError(f"llama.cpp could not read {path}", path=str(path))
    try:
        ptr = llama_cpp.llama_model_chat_template(model, None)
        return ptr.decode("utf-8", errors="replace") if ptr else None
    finally:
        llama_cpp.llama_model_free(model)


def vocab_token_texts(path: Path, ids: list[int]) -> list[str]:
    with _vocab_only(path) as vocab:
        return [(llama_cpp.llama_vocab_get_text(vocab, i) or b"").decode("utf-8", "replace")
                for i in ids]


def meta_str(model: Any, key: str) -> str | None:
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    return buf.value.decode("utf-8", errors="replace")


def load_model(profile: Profile) -> LoadedModel:
    _ensure_backend()
    path = resolve_model_path(profile)
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = int(profile.get("context.n_gpu_layers"))
    repack = bool(profile.get("context.repack_weights"))
    if repack and amx_kernels():
        # Refused before the load: the crash would take the whole process (the server) down.
        raise UnsupportedCapabilityError(AMX_REFUSAL, capability="repack_weights",
                                         setting="context.repack_weights")
    params.use_extra_bufts = repack
    split = profile.get("context.tensor_split")
    if split:
        arr = (ctypes.c_float * len(split))(*split)
        params.tensor_split = ctypes.cast(arr, ctypes.POINTER(ctypes.c_float))
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelLoadError(
            f"llama.cpp could not load {path} (see the log for why)", path=str(path)
        )
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    desc_buf = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(model, desc_buf, len(desc_buf))
    template_ptr = llama_cpp.llama_model_chat_template(model, None)
    template = template_ptr.decode("utf-8", errors="replace") if template_ptr else None

    facts = cached_file_facts(
        path,
        lambda: {
            "model_digest": sha256_file(path),
            "tokenizer_digest": _vocab_digest(vocab, n_vocab),
        },
        kind="gguf-v1",
    )
    template_digest = hashlib.sha256((template or "").encode()).hexdigest()
    pinned = str(profile.get("prompt.template_digest"))
    if pinned and pinned != template_digest:
        llama_cpp.llama_model_free(model)
        raise ProfileMismatchError(
            f"the model's chat template digest {template_digest} differs from the profile's "
            f"prompt.template_digest {pinned}",
            field="prompt.template_digest",
            expected=pinned,
            actual=template_digest,
        )
    bos = llama_cpp.llama_vocab_bos(vocab)
    return LoadedModel(
        path=path,
        model=model,
        vocab=vocab,
        n_vocab=n_vocab,
        n_ctx_train=llama_cpp.llama_model_n_ctx_train(model),
        n_swa=llama_cpp.llama_model_n_swa(model),
        bos_id=bos if bos >= 0 else None,
        adds_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        model_digest=facts["model_digest"],
        tokenizer_digest=facts["tokenizer_digest"],
        chat_template=template,
        chat_template_digest=template_digest,
        description=desc_buf.value.decode("utf-8", errors="replace"),
        fim=fim_of(vocab),
    )


def context_params(profile: Profile, abort: AbortFlag, n_ubatch: int | None = None) -> Any:
    """The context parameters of ``profile``; ``n_ubatch`` overrides its micro-batch (the
    chunked exact-reuse schedule runs at ``cache.exact_chunk``); llama.cpp reads ``abort``
    after each graph node."""
    p = llama_cpp.llama_context_default_params()
    threads = int(profile.get("context.n_threads")) or (os.cpu_count() or 1)
    threads_batch = int(profile.get("context.n_threads_batch")) or (os.cpu_count() or 1)
    n_seq_max = int(profile.get("context.n_seq_max"))
    # Exact reuse: one KV stream of n_ctx cells per sequence, so the live sequence always sits at
    # cells 0..n-1 in position order (the layout a cold prefill gets). Otherwise one pool of
    # n_ctx cells that parked branches share with the live sequence.
    p.kv_unified = not profile.exact_reuse
    p.n_ctx = profile.n_ctx * (n_seq_max if profile.exact_reuse else 1)
    p.n_batch = profile.n_batch
    p.n_ubatch = n_ubatch or int(profile.get("context.n_ubatch"))
    p.n_seq_max = n_seq_max
    p.n_threads = threads
    p.n_threads_batch = threads_batch
    p.flash_attn_type = _FLASH_ATTN[str(profile.get("context.flash_attn"))]
    p.type_k = _GGML_TYPES[str(profile.get("context.type_k"))]
    p.type_v = _GGML_TYPES[str(profile.get("context.type_v"))]
    p.rope_scaling_type = _ROPE_SCALING[str(profile.get("context.rope_scaling_type"))]
    p.rope_freq_base = float(profile.get("context.rope_freq_base"))
    p.rope_freq_scale = float(profile.get("context.rope_freq_scale"))
    p.swa_full = profile.swa_full
    p.no_perf = True
    p.abort_callback = abort.callback
    p.abort_callback_data = abort.data
    return p
