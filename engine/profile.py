"""Profiles: explicit, strictly validated runtime configuration.

A profile is a TOML file of sections (``[model]``, ``[context]``, ``[sampler]``, ``[prompt]``,
``[cache]``). Every key is declared in ``FIELDS`` with its type, allowed values and default;
an unknown key or a bad value is a ``ProfileError`` naming the file, the key and what is allowed.
The built-in default serves the embedded Gemma 3 270M with no file at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextasm.formats import AUTO_FORMAT
from contextasm.formats import BOS_POLICIES as _ASSEMBLER_BOS_POLICIES
from contextasm.formats import PROMPT_FORMATS as _ASSEMBLER_FORMATS
from engine.errors import ProfileError

EMBEDDED_MODEL = "embedded:gemma3-270m"

#: The prompt formats and BOS policies are the assembler's (one list, in contextasm.formats).
#: ``auto`` picks the format from the model's chat template (``base`` when it has none).
PROMPT_FORMATS = (AUTO_FORMAT, *_ASSEMBLER_FORMATS)
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1")
FLASH_ATTN = ("auto", "on", "off")
ROPE_SCALING = ("unspecified", "none", "linear", "yarn", "longrope")
#: ``auto``: the vocabulary's own policy (llama.cpp's ``tokenizer.ggml.add_bos_token``: Gemma,
#: Llama and Phi add BOS, Qwen and StarCoder do not), ``add`` where the backend cannot say.
AUTO_BOS = "auto"
BOS_POLICIES = (AUTO_BOS, *_ASSEMBLER_BOS_POLICIES)
BACKENDS = ("llama", "openvino", "llama-server", "openai")
REMOTE_BACKENDS = ("llama-server", "openai")
COMPLETION_MODES = ("auto", "prefix", "fim")
NEXT_EDIT_FORMATS = ("auto", "sweep", "zeta", "base")
OV_DEVICES = ("CPU", "GPU", "NPU")
OV_KV_PRECISIONS = ("auto", "f32", "f16", "bf16", "u8", "u4")
OV_SPARSE_MODES = ("off", "trishape", "xattention")
OV_INFERENCE_PRECISIONS = ("auto", "f32", "f16", "bf16")


@dataclass(frozen=True)
class FieldSpec:
    section: str
    key: str
    default: Any
    check: Callable[[Any], bool]
    allowed: str
    doc: str

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


def _int_range(lo: int, hi: int | None = None) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return (
            isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)
        )

    return check


def _float_range(lo: float, hi: float | None = None) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        return (
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and v >= lo
            and (hi is None or v <= hi)
        )

    return check


def _one_of(*values: Any) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and v in values


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_http_url(v: Any) -> bool:
    return isinstance(v, str) and v.startswith(("http://", "https://")) and " " not in v


def _is_header_token(limit: int) -> Callable[[Any], bool]:
    """Text that travels in an HTTP header or a JSON field as it is: letters, digits, ``._:-``."""
    def check(v: Any) -> bool:
        return (isinstance(v, str) and len(v) <= limit
                and all(c.isascii() and (c.isalnum() or c in "._:-") for c in v))
    return check


def _float_list(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and x >= 0 for x in v
    )


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("profile", "name", "gemma3-270m-cpu", _is_str, "a string", "profile name"),
    FieldSpec(
        "profile", "backend", "llama", _one_of(*BACKENDS), " | ".join(BACKENDS), "engine backend"
    ),
    FieldSpec(
        "model",
        "path",
        EMBEDDED_MODEL,
        _is_str,
        f"a GGUF file path or '{EMBEDDED_MODEL}'",
        "model weights",
    ),
    FieldSpec("context", "n_ctx", 8192, _int_range(64), "an integer >= 64", "context positions"),
    FieldSpec(
        "context", "n_batch", 512, _int_range(1), "an integer >= 1", "logical batch (prefill chunk)"
    ),
    # Under exact reuse the kernels are batch-invariant at this size (engine/README.md), so
    # prefill runs at llama.cpp's speed: 128 is as fast as llama-server's 512 on the 2-core
    # machines here, with a compute buffer of 129 MiB at n_ctx 8192 instead of 515 MiB.
    # cache.exact_chunk is the micro-batch of the chunked schedule instead.
    FieldSpec("context", "n_ubatch", 128, _int_range(1), "an integer >= 1", "physical micro-batch"),
    # Off by default: llama.cpp's weight-repacking GEMM/GEMV kernels (llama_model_params.
    # use_extra_bufts) compute a token differently by its column in the micro-batch, which
    # breaks the batch invariance exact reuse relies on; at micro-batch 512 they are no faster.
    FieldSpec(
        "context",
        "repack_weights",
        False,
        _is_bool,
        "true | false",
        "repack weights for the CPU's GEMM tiles (llama.cpp extra buffer types)",
    ),
    FieldSpec(
        "context",
        "n_threads",
        0,
        _int_range(0),
        "an integer >= 0 (0 = all cores)",
        "decode threads",
    ),
    FieldSpec(
        "context",
        "n_threads_batch",
        0,
        _int_range(0),
        "an integer >= 0 (0 = all cores)",
        "prefill threads",
    ),
    FieldSpec(
        "context",
        "n_gpu_layers",
        0,
        _int_range(-1),
        "an integer >= -1 (-1 = all)",
        "offloaded layers",
    ),
    FieldSpec(
        "context", "tensor_split", [], _float_list, "a list of non-negative numbers", "GPU split"
    ),
    # Off by default (on: exact too, and faster at depth). llama.cpp's CPU flash-attention
    # kernel computes a query row one way in micro-batches of 64+ tokens (tiles) and another in
    # smaller ones, each batch-invariant, which exact reuse's two-regime schedule keeps apart
    # (engine/README.md); it skips the sliding-window layers' masked cells, so prefill at depth
    # and decode get faster. Not yet the default: the server's idle prefill leaves its last
    # 8-71 tokens to be computed again at the ask (a tile's regime), and its tests assume one.
    FieldSpec(
        "context",
        "flash_attn",
        "off",
        _one_of(*FLASH_ATTN),
        " | ".join(FLASH_ATTN),
        "flash attention",
    ),
    FieldSpec(
        "context", "type_k", "f16", _one_of(*KV_TYPES), " | ".join(KV_TYPES), "KV cache type of K"
    ),
    FieldSpec(
        "context", "type_v", "f16", _one_of(*KV_TYPES), " | ".join(KV_TYPES), "KV cache type of V"
    ),
    FieldSpec(
        "context",
        "rope_scaling_type",
        "unspecified",
        _one_of(*ROPE_SCALING),
        " | ".join(ROPE_SCALING),
        "RoPE scaling",
    ),
    FieldSpec(
        "context",
        "rope_freq_base",
        0.0,
        _float_range(0.0),
        "a number >= 0 (0 = from the model)",
        "RoPE base frequency",
    ),
    FieldSpec(
        "context",
        "rope_freq_scale",
        0.0,
        _float_range(0.0),
        "a number >= 0 (0 = from the model)",
        "RoPE frequency scale",
    ),
    FieldSpec(
        "context",
        "swa_full",
        True,
        _is_bool,
        "true | false",
        "full-size sliding-window cache: every position stays reusable (Gemma 3 needs it)",
    ),
    FieldSpec(
        "context",
        "n_seq_max",
        4,
        _int_range(1, 64),
        "an integer 1..64",
        "sequences: 1 live + (n_seq_max - 1) parked branches",
    ),
    FieldSpec(
        "context", "seed", 42, _int_range(0, 2**32 - 1), "an integer 0..4294967295", "sampler seed"
    ),
    FieldSpec(
        "sampler",
        "temperature",
        0.0,
        _float_range(0.0, 5.0),
        "a number 0..5 (0 = greedy)",
        "temperature",
    ),
    FieldSpec("sampler", "top_k", 40, _int_range(0), "an integer >= 0 (0 = off)", "top-k"),
    FieldSpec("sampler", "top_p", 0.95, _float_range(0.0, 1.0), "a number 0..1", "nucleus"),
    FieldSpec("sampler", "min_p", 0.05, _float_range(0.0, 1.0), "a number 0..1", "min-p"),
    FieldSpec(
        "sampler",
        "repeat_penalty",
        1.0,
        lambda v: _float_range(0.0, 10.0)(v) and v > 0,
        "a number > 0 and <= 10 (1 = off)",
        "repetition penalty",
    ),
    FieldSpec(
        "prompt",
        "format",
        "auto",
        _one_of(*PROMPT_FORMATS),
        " | ".join(PROMPT_FORMATS),
        "prompt format",
    ),
    FieldSpec(
        "prompt", "bos", AUTO_BOS, _one_of(*BOS_POLICIES), " | ".join(BOS_POLICIES), "BOS policy"
    ),
    FieldSpec(
        "prompt",
        "template_digest",
        "",
        _is_str,
        "empty, or the sha256 the model's chat template must have",
        "pinned chat template digest",
    ),
    FieldSpec(
        "cache", "block_size", 1, _int_range(1, 4096), "an integer 1..4096", "cache block size"
    ),
    # llama.cpp's CPU kernels are not batch-invariant: the kernel (and so the rounding) used for
    # a token depends on the size of the micro-batch it is in, its place in it and the KV cell
    # layout. Exact reuse makes every warm computation the cold one: prompts are decoded in
    # micro-batches aligned to multiples of n_ubatch, only whole aligned micro-batches are reused,
    # and every sequence has its own KV stream laid out position == cell (engine/README.md).
    FieldSpec(
        "cache",
        "exact_reuse",
        True,
        _is_bool,
        "true | false",
        "warm == cold bitwise: same micro-batches cold and warm, one KV stream per sequence",
    ),
    # How exact reuse gets there (engine/README.md): "auto" measures at load the smallest
    # micro-batch from which this CPU's kernels give a token the same bits whatever else is in
    # its batch, and reuses token by token with at least that many tokens recomputed; where
    # no size holds, and always with "chunked", round 2's schedule: micro-batches of
    # cache.exact_chunk aligned to its multiples, reuse in whole chunks and tail pieces.
    FieldSpec(
        "cache",
        "exact_schedule",
        "auto",
        _one_of("auto", "chunked"),
        "auto | chunked",
        "exact reuse schedule",
    ),
    FieldSpec(
        "cache",
        "exact_chunk",
        32,
        _int_range(1, 4096),
        "an integer 1..4096",
        "micro-batch and reuse unit of the chunked schedule",
    ),
    FieldSpec(
        "cache",
        "snapshot_dir",
        "",
        _is_str,
        "a directory path (empty = the user cache dir)",
        "stable-prefix snapshot directory",
    ),
    FieldSpec(
        "cache",
        "auto_snapshots",
        True,
        _is_bool,
        "true | false",
        "save the stable prefix automatically and restore it at start-up (language server)",
    ),
    FieldSpec(
        "cache",
        "snapshot_budget_bytes",
        1 << 30,
        _int_range(0),
        "an integer >= 0",
        "disk budget for snapshots",
    ),
    # [openvino]: read only by the OpenVINO GenAI backend (backend = "openvino").
    FieldSpec(
        "openvino",
        "model_dir",
        "",
        _is_str,
        "an OpenVINO IR folder (empty = the cached int8 conversion of model.path)",
        "OpenVINO model folder (openvino_model.xml + tokenizer/detokenizer)",
    ),
    FieldSpec(
        "openvino",
        "device",
        "CPU",
        _one_of(*OV_DEVICES),
        " | ".join(OV_DEVICES),
        "OpenVINO device",
    ),
    FieldSpec(
        "openvino",
        "kv_cache_precision",
        "auto",
        _one_of(*OV_KV_PRECISIONS),
        " | ".join(OV_KV_PRECISIONS),
        "KV_CACHE_PRECISION (auto = the plugin's default)",
    ),
    FieldSpec(
        "openvino",
        "inference_precision_hint",
        # Not the plugin's default: that is bf16 on CPUs with AVX512_BF16 or AMX and f32
        # elsewhere, so greedy tokens (and warm == cold) would depend on the machine.
        "f32",
        _one_of(*OV_INFERENCE_PRECISIONS),
        " | ".join(OV_INFERENCE_PRECISIONS),
        "INFERENCE_PRECISION_HINT (auto = the plugin's default, bf16 on CPUs that have it)",
    ),
    FieldSpec(
        "openvino",
        "cache_size_gb",
        1,
        _int_range(1, 1024),
        "an integer 1..1024",
        "KV cache size of the continuous-batching scheduler, GB",
    ),
    FieldSpec(
        "openvino",
        "max_num_batched_tokens",
        2048,
        _int_range(1),
        "an integer >= 1",
        "tokens per scheduler step (prefill chunk)",
    ),
    FieldSpec(
        "openvino",
        "dynamic_split_fuse",
        True,
        _is_bool,
        "true | false",
        "split long prompts across scheduler steps",
    ),
    # Sparse prefill attention. Profile-tested: it changes what the model computes, so a
    # profile that turns it on must be checked (tests/test_openvino.py runs each mode once
    # on the embedded model); "off" is exact.
    FieldSpec(
        "openvino",
        "sparse_attention",
        "off",
        _one_of(*OV_SPARSE_MODES),
        " | ".join(OV_SPARSE_MODES),
        "sparse prefill attention (SparseAttentionConfig.mode); profile-tested",
    ),
    FieldSpec(
        "openvino",
        "sparse_last_dense_tokens",
        100,
        _int_range(0),
        "an integer >= 0",
        "prompt tails this long are always prefilled densely (num_last_dense_tokens_in_prefill)",
    ),
    FieldSpec(
        "openvino",
        "sparse_start_tokens",
        128,
        _int_range(0),
        "an integer >= 0",
        "trishape: tokens at the start always attended (num_retained_start_tokens_in_cache)",
    ),
    FieldSpec(
        "openvino",
        "sparse_recent_tokens",
        1920,
        _int_range(0),
        "an integer >= 0",
        "trishape: most recent tokens always attended (num_retained_recent_tokens_in_cache)",
    ),
    FieldSpec(
        "openvino",
        "xattention_threshold",
        0.8,
        _float_range(0.0, 1.0),
        "a number in [0, 1]",
        "xattention: cumulative attention mass kept per block row",
    ),
    FieldSpec(
        "openvino",
        "xattention_block_size",
        64,
        _int_range(1),
        "an integer >= 1",
        "xattention: block size of the importance estimate",
    ),
    FieldSpec(
        "openvino",
        "xattention_stride",
        8,
        _int_range(1),
        "an integer >= 1",
        "xattention: stride of the importance estimate",
    ),
    # [remote]: the llama-server backend (engine/remote/, docs/remote.md). The URL is part of
    # the cache identity (another server holds other KV); the key and timeouts are not.
    FieldSpec("remote", "url", "http://127.0.0.1:8080", _is_http_url, "an http(s) URL",
              "llama-server base URL"),
    FieldSpec("remote", "slot", 0, _int_range(-1, 1023), "an integer -1..1023",
              "the server slot this session owns (one per developer); -1 = the slot the "
              "session key hashes to (shared servers and fleets: docs/fleet.md)"),
    # llama-server reuses any common prefix, computed from wherever it diverges; with a chunk
    # and the server's -ub equal to it, reuse stops at whole chunks: warm == cold, as
    # cache.exact_reuse does in process (docs/remote.md).
    FieldSpec("remote", "reuse_chunk", 0, _int_range(0, 4096), "an integer 0..4096",
              "reuse whole chunks of this many tokens (= the server's -ub); 0 = the server's "
              "own token-granular reuse"),
    FieldSpec("remote", "api_key_env", "", _is_str,
              "empty, or the name of an environment variable holding the server's API key",
              "API key variable"),
    FieldSpec("remote", "connect_timeout_s", 5.0, _float_range(0.1, 600.0), "a number 0.1..600",
              "connect timeout, seconds"),
    FieldSpec("remote", "timeout_s", 120.0, _float_range(1.0, 3600.0), "a number 1..3600",
              "read timeout per request, seconds (a busy slot makes a request wait)"),
    # A team fleet (docs/fleet.md): the key routers hash on to keep a developer on the replica
    # that holds their prefix, and the salt that keeps a shared prefix cache per developer.
    FieldSpec("remote", "session_key", "", _is_header_token(128),
              "empty, or up to 128 letters, digits and ._:-",
              "sent as X-Session-ID (and X-SMG-Routing-Key) on every request; empty = derived "
              "from the user and the workspace (a digest: no path in clear)"),
    FieldSpec("remote", "cache_salt", "", _is_header_token(256),
              "empty, or up to 256 letters, digits and ._:-",
              "sent as cache_salt (vLLM): prefixes cached under another salt are not reused"),
    FieldSpec("remote", "retry_s", 4.0, _float_range(0.0, 600.0), "a number 0..600",
              "how long a request is retried while the server cannot be reached or a router "
              "answers 502/503/504 (a replica restarting, failover), seconds; 0 = never"),
    # [completion]: inline completion at the cursor. Not part of the cache identity
    # (profile_id): they shape requests, not KV.
    FieldSpec(
        "completion",
        "mode",
        "auto",
        _one_of(*COMPLETION_MODES),
        " | ".join(COMPLETION_MODES),
        "prompt layout: auto = fill-in-the-middle when the vocabulary has FIM tokens, else "
        "prefix-only continuation",
    ),
    FieldSpec(
        "completion", "max_tokens", 32, _int_range(1, 512), "an integer 1..512",
        "tokens a completion may generate",
    ),
    FieldSpec(
        "completion", "timeout_ms", 1500, _int_range(50, 60_000), "an integer 50..60000",
        "decode time a completion may take (it returns what it has by then)",
    ),
    # [next_edit]: next-edit suggestions. Not part of the cache identity either.
    FieldSpec("next_edit", "enabled", True, _is_bool, "true | false",
              "answer contenox/nextEdit (false: always an empty list)"),
    FieldSpec(
        "next_edit", "format", "auto", _one_of(*NEXT_EDIT_FORMATS),
        " | ".join(NEXT_EDIT_FORMATS),
        "prompt layout: auto = from the model (sweep for Sweep Next-Edit, zeta for Zed's Zeta, "
        "else base)",
    ),
    FieldSpec(
        "next_edit", "max_tokens", 384, _int_range(16, 2048), "an integer 16..2048",
        "tokens a rewrite of the region may take",
    ),
    FieldSpec(
        "next_edit", "timeout_ms", 8000, _int_range(100, 120_000), "an integer 100..120000",
        "decode time a rewrite may take (past it, nothing is suggested)",
    ),
)

#: Sections that configure requests, not the KV state: left out of ``profile_id``.
NON_IDENTITY_SECTIONS = ("completion", "next_edit")
#: Single fields that change what the server does, not what any KV holds.
NON_IDENTITY_KEYS = frozenset({
    "cache.auto_snapshots", "remote.api_key_env", "remote.connect_timeout_s", "remote.timeout_s",
    # Routing and retries change which replica answers, not what a prefix means; a salt is a
    # cache namespace the server keeps, and reports as reuse like any other miss.
    "remote.session_key", "remote.cache_salt", "remote.retry_s",
    # The identity carries the BOS policy the engine resolved (``auto`` → add | none) itself:
    # ``auto`` and the policy it resolves to are the same cache.
    "prompt.bos",
})

_BY_SECTION: dict[str, dict[str, FieldSpec]] = {}
for _spec in FIELDS:
    _BY_SECTION.setdefault(_spec.section, {})[_spec.key] = _spec


@dataclass(frozen=True)
class Profile:
    """The effective profile: every value plus where it came from ("default", a file, "cli")."""

    values: Mapping[str, Any]
    sources: Mapping[str, str]
    path: str | None = None
    base_dir: str = field(default=".")

    def get(self, name: str) -> Any:
        return self.values[name]

    # Convenience accessors for the values code reads most.
    @property
    def name(self) -> str:
        return str(self.values["profile.name"])

    @property
    def backend(self) -> str:
        return str(self.values["profile.backend"])

    @property
    def model(self) -> str:
        return str(self.values["model.path"])

    @property
    def n_ctx(self) -> int:
        return int(self.values["context.n_ctx"])

    @property
    def n_batch(self) -> int:
        return int(self.values["context.n_batch"])

    @property
    def prompt_format(self) -> str:
        return str(self.values["prompt.format"])

    @property
    def bos_policy(self) -> str:
        return str(self.values["prompt.bos"])

    @property
    def completion_mode(self) -> str:
        return str(self.values["completion.mode"])

    @property
    def completion_max_tokens(self) -> int:
        return int(self.values["completion.max_tokens"])

    @property
    def completion_timeout_ms(self) -> int:
        return int(self.values["completion.timeout_ms"])

    @property
    def block_size(self) -> int:
        return int(self.values["cache.block_size"])

    @property
    def exact_reuse(self) -> bool:
        return bool(self.values["cache.exact_reuse"])

    @property
    def exact_schedule(self) -> str:
        return str(self.values["cache.exact_schedule"])

    @property
    def exact_chunk(self) -> int:
        return int(self.values["cache.exact_chunk"])

    @property
    def swa_full(self) -> bool:
        return bool(self.values["context.swa_full"])

    @property
    def profile_id(self) -> str:
        """Name plus a digest of every value: any profile change invalidates cache manifests."""
        # [remote] means something only to the remote backend: other profiles keep their ids.
        skip = (*NON_IDENTITY_SECTIONS, *(() if self.backend in REMOTE_BACKENDS else ("remote",)))
        keyed = {k: v for k, v in self.values.items()
                 if k.split(".", 1)[0] not in skip and k not in NON_IDENTITY_KEYS}
        blob = json.dumps(keyed, sort_keys=True, separators=(",", ":"))
        return f"{self.name}@{hashlib.sha256(blob.encode()).hexdigest()[:12]}"

    def resolve_path(self, value: str) -> Path:
        """Paths in a profile file are relative to that file's folder."""
        p = Path(os.path.expanduser(value))
        return p if p.is_absolute() else Path(self.base_dir) / p

    def resolve_bos(self, model_adds_bos: bool | None) -> Profile:
        """This profile with ``prompt.bos = "auto"`` resolved for a model (``None``: the
        backend cannot say, and ``add`` stands); every other value kept as it is."""
        if self.bos_policy != AUTO_BOS:
            return self
        policy = "none" if model_adds_bos is False else "add"
        return self.with_overrides({"prompt.bos": policy}, source="model")

    def with_overrides(self, overrides: Mapping[str, Any], source: str = "cli") -> Profile:
        """A copy with ``section.key`` values replaced, validated like file values."""
        values = dict(self.values)
        sources = dict(self.sources)
        for name, value in overrides.items():
            spec = _spec_for(name, where=source)
            _check(spec, value, where=source)
            values[name] = _normalize(spec, value)
            sources[name] = source
        _check_cross_field(values, where=source)
        return Profile(values=values, sources=sources, path=self.path, base_dir=self.base_dir)

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile_id": self.profile_id,
            "path": self.path,
            "values": {k: self.values[k] for k in sorted(self.values)},
            "sources": {k: self.sources[k] for k in sorted(self.sources)},
        }

    def describe(self) -> str:
        """Human-readable table: one line per value with its source."""
        lines = [
            f"profile {self.profile_id}" + (f"  ({self.path})" if self.path else "  (built-in)")
        ]
        width = max(len(s.name) for s in FIELDS)
        for spec in FIELDS:
            value = json.dumps(self.values[spec.name])
            lines.append(f"  {spec.name:<{width}}  {value:<28} {self.sources[spec.name]}")
        return "\n".join(lines)


def _spec_for(name: str, where: str) -> FieldSpec:
    section, _, key = name.partition(".")
    spec = _BY_SECTION.get(section, {}).get(key)
    if spec is None:
        known = ", ".join(s.name for s in FIELDS)
        raise ProfileError(
            f"{where}: unknown key '{name}' (known keys: {known})", key=name, file=where
        )
    return spec


def _normalize(spec: FieldSpec, value: Any) -> Any:
    if isinstance(spec.default, float) and isinstance(value, int):
        return float(value)
    if isinstance(value, list):
        return [float(x) for x in value]
    return value


def _check(spec: FieldSpec, value: Any, where: str) -> None:
    if not spec.check(value):
        raise ProfileError(
            f"{where}: invalid value {value!r} for '{spec.name}' (allowed: {spec.allowed})",
            key=spec.name,
            file=where,
            allowed=spec.allowed,
            value=repr(value),
        )


#: (smaller, larger): the first may not exceed the second (checked in this order).
_NOT_ABOVE = (
    ("context.n_ubatch", "context.n_batch"),
    ("cache.exact_chunk", "context.n_batch"),
    ("context.n_batch", "context.n_ctx"),
)


def _check_cross_field(values: Mapping[str, Any], where: str) -> None:
    for small, large in _NOT_ABOVE:
        if values[small] > values[large]:
            raise ProfileError(
                f"{where}: '{small}' ({values[small]}) must not exceed '{large}' "
                f"({values[large]})",
                key=small,
                file=where,
                allowed=f"an integer <= {large}",
            )


def default_profile() -> Profile:
    values = {s.name: s.default for s in FIELDS}
    return Profile(values=values, sources={s.name: "default" for s in FIELDS})


def load_profile(path: str | os.PathLike[str] | None) -> Profile:
    """Load and strictly validate a profile file; ``None`` gives the built-in default."""
    base = default_profile()
    if path is None:
        return base
    p = Path(path)
    where = str(p)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ProfileError(f"{where}: profile file not found", file=where) from None
    except OSError as exc:
        raise ProfileError(f"{where}: cannot read profile: {exc}", file=where) from None
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}", file=where) from None

    values = dict(base.values)
    sources = dict(base.sources)
    for section, table in doc.items():
        if section not in _BY_SECTION:
            raise ProfileError(
                f"{where}: unknown section '[{section}]' (known: {', '.join(_BY_SECTION)})",
                key=section,
                file=where,
            )
        if not isinstance(table, dict):
            raise ProfileError(
                f"{where}: '{section}' must be a table ([{section}])", key=section, file=where
            )
        for key, value in table.items():
            spec = _spec_for(f"{section}.{key}", where)
            _check(spec, value, where)
            values[spec.name] = _normalize(spec, value)
            sources[spec.name] = where
    _check_cross_field(values, where)
    return Profile(values=values, sources=sources, path=where, base_dir=str(p.resolve().parent))
