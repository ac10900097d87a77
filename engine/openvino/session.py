"""The OpenVINO GenAI backend of the engine seam (``engine.session.Session``).

One ``openvino_genai.ContinuousBatchingPipeline`` with prefix caching lives for the whole
session. The engine feeds it token ids (never text), so the assembler's tokens are exactly what
the model sees, and drives it with ``add_request`` + ``step`` so that a cancel lands between two
scheduler steps (one ``max_num_batched_tokens`` chunk of prefill, or one decoded token):
``GenerationHandle.cancel()`` is the same cancel status a streamer returning
``StreamingStatus.CANCEL`` produces.

How prefix reuse maps onto OpenVINO:

- OpenVINO's prefix cache is content addressed by whole KV blocks and is shared by every request
  of the pipeline; there is no "live sequence" to trim. ``prefill`` runs the prompt as a request
  with ``max_new_tokens = 1`` (the idle-time pre-prefill: the first token is kept, not returned
  to anyone) and the blocks stay cached after the request finishes.
- ``generate``/``stream`` return that first token at once, then continue with a second request
  (prompt + first token) that hits the cache for every whole block of the prompt.
- OpenVINO does not report per-request cache hits. ``reused_tokens`` is therefore the engine's
  account: the common prefix with the last prefilled prompt of the same identity, rounded down
  to whole KV blocks (a partial block is recomputed). ``metrics.extra`` says so
  (``reuse_accounting``) and carries the pipeline's own figures (cache usage, per-request TTFT).
- A prompt under another identity rebuilds the pipeline (the cache is dropped, never reused).

Not available here, raised as ``UnsupportedCapabilityError`` and reported as ``False`` in
``capabilities``: sequence snapshots (save/load) and parked branches.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

from contextasm.formats import resolve_prompt_format
from contextasm.identity import ContextIdentity
from contextasm.manifest import common_prefix_length
from engine.errors import (
    CancelledError,
    DecodeFailedError,
    InvalidBatchError,
    InvalidSessionStateError,
    ModelLoadError,
    ModelNotFoundError,
    UnsupportedCapabilityError,
)
from engine.fim import KNOWN_FIM_TEXTS, FimTokens
from engine.profile import EMBEDDED_MODEL, Profile
from engine.results import (
    GenerateResult,
    PrefillResult,
    SessionMetrics,
    decode_rate,
    ms_since,
)
from engine.session_base import SessionBase, WithoutSequenceState, check_prompt

log = logging.getLogger(__name__)

MANIFEST_NAME = "contenox_conversion.json"
#: KV block size of OpenVINO's paged attention per device (prefix caching shares whole blocks).
KV_BLOCK_SIZE = {"CPU": 32, "GPU": 16, "NPU": 32}



def _import_genai() -> Any:
    try:
        return importlib.import_module("openvino_genai")
    except ImportError as exc:
        raise UnsupportedCapabilityError(
            "backend 'openvino' needs the 'openvino' extra "
            "(pip install openvino openvino-genai openvino-tokenizers)",
            backend="openvino",
            missing=exc.name,
        ) from None


def resolve_model_dir(profile: Profile) -> Path:
    """The IR folder of a profile: ``openvino.model_dir``, or (empty) the cached conversion of
    ``model.path`` made by ``engine.openvino.convert.cached_convert`` (int8)."""
    value = str(profile.get("openvino.model_dir"))
    if value:
        path = profile.resolve_path(value)
    else:
        from engine.model_files import cached_file_facts, resolve_model_path, sha256_file
        from engine.openvino.convert import cache_entry

        gguf = resolve_model_path(profile)
        digest = cached_file_facts(gguf, lambda: {"sha256": sha256_file(gguf)}, "sha256")["sha256"]
        path = cache_entry(digest, "int8")
        if not (path / "openvino_model.xml").is_file():
            src = "embedded:gemma3-270m" if profile.model == EMBEDDED_MODEL else str(gguf)
            raise ModelNotFoundError(
                f"no OpenVINO conversion of {src} (looked in {path}); run "
                f"'contenox-lsp model convert --to openvino {src}' (needs the 'convert' "
                "extra) or set openvino.model_dir",
                model=profile.model,
                path=str(path),
            )
    if not (path / "openvino_model.xml").is_file():
        raise ModelNotFoundError(
            f"not an OpenVINO model folder (no openvino_model.xml): {path}", path=str(path)
        )
    for name in ("openvino_tokenizer.xml", "openvino_detokenizer.xml"):
        if not (path / name).is_file():
            raise ModelNotFoundError(f"{path} has no {name}", path=str(path))
    return path


def _folder_facts(model_dir: Path) -> dict[str, str]:
    from engine.model_files import cached_file_facts, sha256_file

    def compute() -> dict[str, str]:
        tok = "".join(
            sha256_file(model_dir / n)
            for n in (
                "openvino_tokenizer.xml",
                "openvino_tokenizer.bin",
                "openvino_detokenizer.xml",
                "openvino_detokenizer.bin",
            )
            if (model_dir / n).is_file()
        )
        import hashlib

        return {
            "model_digest": sha256_file(model_dir / "openvino_model.bin"),
            "tokenizer_digest": hashlib.sha256(tok.encode()).hexdigest(),
        }

    return cached_file_facts(model_dir / "openvino_model.bin", compute, "openvino")


def _control_tokens(model_dir: Path) -> frozenset[str]:
    """Texts of the special (control) tokens, from the HF ``tokenizer.json`` the conversion
    stores next to the IR (the OpenVINO tokenizer does not expose token types)."""
    import json

    try:
        doc = json.loads((model_dir / "tokenizer.json").read_text("utf-8"))
    except (OSError, ValueError):
        log.info(
            "%s has no readable tokenizer.json: special=False cannot avoid control tokens",
            model_dir,
        )
        return frozenset()
    return frozenset(
        str(t["content"]) for t in doc.get("added_tokens", []) if t.get("special") and t["content"]
    )


class OpenVinoSession(WithoutSequenceState, SessionBase):
    """OpenVINO GenAI implementation of the engine session seam."""

    backend = "openvino"
    why_no_sequence_state = (
        "OpenVINO GenAI exposes no per-sequence KV state; the prefix cache keeps prefixes "
        "warm instead"
    )

    def __init__(self, profile: Profile, model_dir: Path) -> None:
        super().__init__()
        profile = profile.resolve_bos(None)  # the policy "add" stands for when unknown
        self.profile = profile
        self._genai = _import_genai()
        self._model_dir = model_dir
        self._cancel = threading.Event()
        self._device = str(profile.get("openvino.device"))
        self._block = KV_BLOCK_SIZE.get(self._device, 32)
        self._tokens: list[int] = []
        self._resident_identity: ContextIdentity | None = None
        self._first_token: int | None = None
        self._prefill_started = 0.0
        self._request_id = 0
        self.metrics = SessionMetrics()
        self.metrics.extra["reuse_accounting"] = (
            "engine-side: common prefix with the last prefilled prompt, whole KV blocks; "
            "OpenVINO does not report per-request prefix-cache hits"
        )
        self.metrics.extra["kv_block_size"] = self._block
        self._pipe: Any = None
        self._build_pipeline()
        pipe: Any = self._pipe  # set by _build_pipeline (mypy narrows the attribute to None)
        self._tokenizer: Any = pipe.get_tokenizer()
        self._bos = int(self._tokenizer.get_bos_token_id())
        self._eos = int(self._tokenizer.get_eos_token_id())
        vocab = list(self._tokenizer.get_vocab_vector())
        self._vocab_size = len(vocab)
        # Once, here on the engine's thread: status views read it from any thread.
        self._fim = _fim_from_vocab(vocab)
        self._control = _control_tokens(model_dir)
        facts = _folder_facts(model_dir)
        self._tokenizer_digest = facts["tokenizer_digest"]
        kv = str(profile.get("openvino.kv_cache_precision"))
        # The assembler pads the stable region to identity.block_size. Left at the default (1)
        # it follows the KV block, so that the stable prefix ends on a block that is reused.
        block_size = profile.block_size if profile.block_size > 1 else self._block
        if block_size % self._block:
            log.warning(
                "cache.block_size = %d is not a multiple of OpenVINO's KV block (%d on %s): "
                "the stable prefix's last partial block is recomputed at every request",
                block_size, self._block, self._device,
            )
        self.identity = ContextIdentity(
            profile_id=profile.profile_id,
            backend=self.backend,
            backend_version=str(self._genai.__version__),
            model_digest=facts["model_digest"],
            tokenizer_digest=self._tokenizer_digest,
            chat_template_digest="",
            prompt_format=resolve_prompt_format(profile.prompt_format,
                                                _chat_template(self._tokenizer)),
            bos_policy=profile.bos_policy,
            n_ctx=profile.n_ctx,
            rope_freq_base=0.0,
            rope_freq_scale=0.0,
            rope_scaling_type="unspecified",
            type_k=kv,
            type_v=kv,
            flash_attn="n/a",
            swa_full=True,
            block_size=block_size,
        )

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, profile: Profile) -> OpenVinoSession:
        _import_genai()
        return cls(profile, resolve_model_dir(profile))

    def _properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {}
        kv = str(self.profile.get("openvino.kv_cache_precision"))
        if kv != "auto":
            props["KV_CACHE_PRECISION"] = kv
        hint = str(self.profile.get("openvino.inference_precision_hint"))
        if hint != "auto":
            props["INFERENCE_PRECISION_HINT"] = hint
        threads = int(self.profile.get("context.n_threads"))
        if threads > 0:
            props["INFERENCE_NUM_THREADS"] = threads
        return props

    def _sparse_config(self, mode: str) -> Any:
        g, get = self._genai, self.profile.get
        cfg = g.SparseAttentionConfig()
        cfg.mode = getattr(g.SparseAttentionMode, mode.upper())
        cfg.num_last_dense_tokens_in_prefill = int(get("openvino.sparse_last_dense_tokens"))
        cfg.num_retained_start_tokens_in_cache = int(get("openvino.sparse_start_tokens"))
        cfg.num_retained_recent_tokens_in_cache = int(get("openvino.sparse_recent_tokens"))
        cfg.xattention_threshold = float(get("openvino.xattention_threshold"))
        cfg.xattention_block_size = int(get("openvino.xattention_block_size"))
        cfg.xattention_stride = int(get("openvino.xattention_stride"))
        return cfg

    def _build_pipeline(self) -> None:
        g = self._genai
        sc = g.SchedulerConfig()
        sc.enable_prefix_caching = True
        sc.cache_size = int(self.profile.get("openvino.cache_size_gb"))
        sc.dynamic_split_fuse = bool(self.profile.get("openvino.dynamic_split_fuse"))
        sc.max_num_batched_tokens = int(self.profile.get("openvino.max_num_batched_tokens"))
        sc.max_num_seqs = 2
        mode = str(self.profile.get("openvino.sparse_attention"))
        if mode != "off":
            sc.use_sparse_attention = True
            sc.sparse_attention_config = self._sparse_config(mode)
        self._pipe = None
        try:
            self._pipe = g.ContinuousBatchingPipeline(
                str(self._model_dir), sc, self._device, self._properties()
            )
        except Exception as exc:  # OpenVINO raises RuntimeError with its own message
            raise ModelLoadError(
                f"OpenVINO could not load {self._model_dir} on {self._device}: {exc}",
                path=str(self._model_dir),
                device=self._device,
            ) from exc
        self._tokens = []
        self._resident_identity = None
        self._first_token = None

    def close(self) -> None:
        self._pipe = None
        self._tokenizer = None


    # ----------------------------------------------------------------- facts

    @property
    def n_ctx(self) -> int:
        return self.profile.n_ctx

    @property
    def n_vocab(self) -> int:
        return self._vocab_size

    @property
    def bos_token_id(self) -> int | None:
        return self._bos

    @property
    def tokenizer_digest(self) -> str:
        return self._tokenizer_digest

    @property
    def model_path(self) -> str:
        return str(self._model_dir)

    @property
    def model_description(self) -> str:
        return f"OpenVINO IR {self._model_dir.name} on {self._device}"

    @property
    def kv_block_size(self) -> int:
        return self._block

    @property
    def reuse_granularity(self) -> int:
        return self._block  # prefix caching shares whole KV blocks

    @property
    def capabilities(self) -> dict[str, bool]:
        return {"snapshots": False, "branches": False, "cancel": True, "prefix_reuse": True}

    @property
    def exact_reuse(self) -> dict[str, Any]:
        """OpenVINO's prefix cache is not warm == cold on every path (docs/openvino.md): a
        prompt that ends inside cached content has its last token computed in a step of its
        own (another kernel than the cold prefill's) and that KV is kept in the shared block,
        so later prompts over it can decode differently. Said here, never silently."""
        sparse = str(self.profile.get("openvino.sparse_attention"))
        return {
            "kind": "inexact",
            "chunk": self._block,
            "minBatch": 1,
            "description": (
                "not exact: a prompt that ends inside OpenVINO's cached blocks is recomputed "
                "from its last token alone, and that KV stays cached; a prompt that extends "
                "the cached one by new blocks decodes like a cold prefill"
                + ("" if sparse == "off" else f"; {sparse} sparse attention is profile-tested")
            ),
            "snapshotsPastWindow": None,
        }

    def pipeline_metrics(self) -> dict[str, float]:
        """The pipeline's own figures (``ContinuousBatchingPipeline.get_metrics()``)."""
        m = self._pipe.get_metrics()
        return {
            "cache_usage": float(m.cache_usage),
            "max_cache_usage": float(m.max_cache_usage),
            "avg_cache_usage": float(m.avg_cache_usage),
            "kv_cache_size_in_bytes": float(getattr(m, "kv_cache_size_in_bytes", 0)),
            "requests": float(m.requests),
        }

    # ----------------------------------------------------------------- tokens

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        """Tokenize with the OpenVINO tokenizer; no implicit BOS (``add_bos`` adds it).

        The OpenVINO tokenizer always matches control tokens. With ``special=False`` text that
        literally contains one is split around it so the control token is not produced (an
        approximation of llama.cpp's plain-text tokenization for such text only).
        """
        if special or not any(c in text for c in self._control):
            out = self._encode(text)
        else:
            out = []
            for part in self._split_control(text):
                out.extend(self._encode(part))
        if add_bos:
            out.insert(0, self._bos)
        return out

    def _encode(self, text: str) -> list[int]:
        if not text:
            return []
        enc = self._tokenizer.encode(text, add_special_tokens=False)
        return [int(t) for t in enc.input_ids.data.reshape(-1)]

    def _split_control(self, text: str) -> Iterator[str]:
        hits = sorted(c for c in self._control if c in text)
        rest = text
        for c in hits:
            rest = rest.replace(c, c[:1] + "\u0000" + c[1:])
        yield from rest.split("\u0000")

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        if not tokens:
            return ""
        return str(
            self._tokenizer.decode([int(t) for t in tokens], skip_special_tokens=not special)
        )

    # ----------------------------------------------------------------- cancellation

    def cancel(self) -> None:
        """Thread-safe: stop the running prefill or decode at the next scheduler step."""
        self._cancel.set()

    # ----------------------------------------------------------------- requests

    def _config(self, max_new_tokens: int) -> Any:
        g = self._genai
        cfg = g.GenerationConfig()
        cfg.max_new_tokens = max_new_tokens
        cfg.eos_token_id = self._eos
        cfg.stop_token_ids = {self._eos}
        temp = float(self.profile.get("sampler.temperature"))
        if temp > 0:
            cfg.do_sample = True
            cfg.temperature = temp
            cfg.top_k = int(self.profile.get("sampler.top_k"))
            cfg.top_p = float(self.profile.get("sampler.top_p"))
            cfg.min_p = float(self.profile.get("sampler.min_p"))
            cfg.rng_seed = int(self.profile.get("context.seed"))
        else:
            cfg.do_sample = False
        rp = float(self.profile.get("sampler.repeat_penalty"))
        if rp != 1.0:
            cfg.repetition_penalty = rp
        return cfg

    def _run(self, tokens: Sequence[int], max_new_tokens: int, stage: str) -> Iterator[int]:
        """Submit one request and yield its tokens as the scheduler produces them."""
        import numpy as np
        import openvino as ov

        self._request_id += 1
        ids = ov.Tensor(np.asarray([list(tokens)], dtype=np.int64))
        handle = self._pipe.add_request(self._request_id, ids, self._config(max_new_tokens))
        g = self._genai
        done = False
        produced = 0
        try:
            while True:
                if self._cancel.is_set():
                    handle.cancel()
                    raise CancelledError(f"{stage} cancelled", stage=stage, decoded_tokens=produced)
                self._pipe.step()
                while handle.can_read():
                    for out in handle.read().values():
                        for t in out.generated_ids:
                            produced += 1
                            yield int(t)
                status = handle.get_status()
                if status in (g.GenerationStatus.FINISHED, g.GenerationStatus.STOP):
                    done = True
                    self.metrics.extra["last_request_perf"] = _perf(handle)
                    return
                if status in (g.GenerationStatus.IGNORED, g.GenerationStatus.CANCEL):
                    raise DecodeFailedError(
                        f"OpenVINO {stage} request ended with status {status.name}",
                        stage=stage,
                        status=status.name,
                    )
                if not self._pipe.has_non_finished_requests():
                    done = True
                    return
        finally:
            if not done:
                try:
                    handle.cancel()
                    while self._pipe.has_non_finished_requests():
                        self._pipe.step()
                except Exception:  # the pipeline may already have dropped the request
                    log.debug("draining a cancelled request failed", exc_info=True)

    # ----------------------------------------------------------------- prefill

    def prefill(
        self, tokens: Sequence[int], identity: ContextIdentity | None = None
    ) -> PrefillResult:
        """Run the prompt through the pipeline (filling its prefix cache) and keep the first
        token for the next ``generate``; nothing is returned to anyone (pre-prefill)."""
        with self._exclusive("prefill"):
            self._cancel.clear()
            t0 = time.perf_counter()
            self._prefill_started = t0
            # reserve=1: the prefill request itself generates one token inside n_ctx.
            toks = check_prompt(tokens, self._vocab_size, self.n_ctx, reserve=1)
            ident = identity or self.identity
            self._first_token = None
            reason: str | None = None
            if self._resident_identity is not None:
                field = self._resident_identity.first_mismatch(ident)
                if field is not None:
                    reason = f"identity field '{field}' changed: pipeline and KV cache rebuilt"
                    self._build_pipeline()
            common = common_prefix_length(self._tokens, toks)
            reused = min(common, len(toks) - 1) // self._block * self._block
            self._resident_identity = ident
            try:
                first = next(iter(self._run(toks, 1, "prefill")), None)
            except CancelledError as exc:
                # Blocks of the kept prefix are still cached; what the cancelled request
                # computed may be too, but OpenVINO does not say: account only the sure part.
                del self._tokens[reused:]
                exc.data["committed_tokens"] = len(self._tokens)
                raise
            except Exception:
                del self._tokens[reused:]
                raise
            self._tokens = toks
            self._first_token = first
            result = PrefillResult(
                reused_tokens=reused,
                new_tokens=len(toks) - reused,
                prefill_ms=ms_since(t0),
                total_tokens=len(toks),
                miss_reason=reason,
            )
            self.metrics.extra["pipeline"] = self.pipeline_metrics()
            return self.metrics.record_prefill(result)

    def reset(self) -> None:
        """A cold session: rebuild the pipeline (drops OpenVINO's prefix cache)."""
        with self._exclusive("reset"):
            self._build_pipeline()
            self._tokenizer = self._pipe.get_tokenizer()

    # ----------------------------------------------------------------- generation

    def stream(self, max_tokens: int = 256, *,
               lookup: int = 0) -> Generator[str, bool | None, GenerateResult]:
        """Yield text pieces; returns the ``GenerateResult``. ``generate`` runs this loop."""
        with self._exclusive("stream"):
            if self._pipe is None or not self._tokens or self._first_token is None:
                raise InvalidSessionStateError(
                    "generate/stream needs a successful prefill() first", resident=len(self._tokens)
                )
            if max_tokens < 1:
                raise InvalidBatchError("max_tokens must be >= 1", max_tokens=max_tokens)
            first = self._first_token
            self._first_token = None  # consumed by this generation
            out_tokens: list[int] = []
            emitted = ""
            t_first = time.perf_counter()
            ttft_ms = (t_first - self._prefill_started) * 1000.0
            finish = "length"
            stopped = False  # the consumer saw a stop sequence (engine.results.drain)

            def pieces(tok: int) -> Generator[str, bool | None, None]:
                nonlocal emitted, stopped
                out_tokens.append(tok)
                text = self.detokenize(out_tokens)
                stable = text.rstrip("\ufffd")
                if len(stable) > len(emitted) and stable.startswith(emitted):
                    piece = stable[len(emitted) :]
                    emitted = stable
                    if (yield piece):
                        stopped = True

            if first == self._eos:
                finish = "stop"
            else:
                yield from pieces(first)
                room = self.n_ctx - len(self._tokens) - 1
                more = min(max_tokens - 1, room)
                if stopped:
                    finish = "stop"
                elif max_tokens > 1 and room <= 0:
                    finish = "context_full"
                elif more > 0:
                    prompt = [*self._tokens, first]
                    for tok in self._run(prompt, more, "decode"):
                        if tok == self._eos:
                            finish = "stop"
                            break
                        yield from pieces(tok)
                        if stopped:
                            finish = "stop"
                            break
                    if finish != "stop" and more < max_tokens - 1:
                        finish = "context_full"
            text = self.detokenize(out_tokens)
            if len(text) > len(emitted) and text.startswith(emitted):
                yield text[len(emitted) :]
            decode_ms = (time.perf_counter() - t_first) * 1000.0
            n = len(out_tokens)
            result = GenerateResult(
                tokens=out_tokens,
                text=text,
                ttft_ms=ttft_ms,
                decode_tokens=n,
                decode_ms=decode_ms,
                decode_tok_s=decode_rate(n, decode_ms),
                finish_reason=finish,
            )
            return self.metrics.record_generate(result)


    # ----------------------------------------------------------------- unsupported

    def warm_prefix(self, tokens: Sequence[int]) -> int:
        return self._live_warm_prefix(tokens, self.identity, self._block)

    @property
    def fim_tokens(self) -> FimTokens | None:
        return self._fim


def _fim_from_vocab(vocab: list[str]) -> FimTokens | None:
    """OpenVINO's tokenizer has no FIM API: a known family's three token texts must each be a
    token of the vocabulary."""
    index = {text: i for i, text in enumerate(vocab)}
    for texts in KNOWN_FIM_TEXTS:
        ids = [index.get(t) for t in texts]
        if all(i is not None for i in ids):
            pre, suf, mid = (int(i) for i in ids if i is not None)
            return FimTokens(pre, suf, mid)
    return None


def _perf(handle: Any) -> dict[str, float]:
    """TTFT and token counts OpenVINO measured for one request (empty if unavailable)."""
    try:
        pm = handle.get_perf_metrics()
        return {
            "ttft_ms": float(pm.get_ttft().mean),
            "input_tokens": float(pm.get_num_input_tokens()),
            "generated_tokens": float(pm.get_num_generated_tokens()),
        }
    except Exception:
        return {}


__all__ = ["KV_BLOCK_SIZE", "OpenVinoSession", "resolve_model_dir"]


def _chat_template(tokenizer: Any) -> str | None:
    """The IR tokenizer's chat template, if it has one (an empty string when it has none)."""
    template = getattr(tokenizer, "chat_template", None)
    if template is None and hasattr(tokenizer, "get_chat_template"):
        template = tokenizer.get_chat_template()
    return template if isinstance(template, str) and template else None
