"""A persistent llama.cpp session: one model + one context, live prefix reuse, snapshots, branches.

Sequence 0 is the live sequence. Sequences 1..n_seq_max-1 hold parked branches: other prefixes
kept warm. ``prefill`` reuses the longest valid cached prefix of the live sequence or of a
parked branch, removes the tail with ``llama_memory_seq_rm`` and decodes only the new suffix;
each finished micro-batch is committed (counted as resident) before the next one.

Exact reuse (``cache.exact_reuse``, the default) makes the warm computation the cold one, so
warm prefix + suffix gives the cold run's logits bit for bit. llama.cpp's CPU kernels compute a
token the same way whatever else is in its micro-batch only from some batch size on (and only
with weight repacking off), and that size depends on the CPU and build, so the session
measures it at load (``engine.llama.invariance``) and picks an ``ExactSchedule``:

- **invariant** (the kernels agree from ``min_batch`` tokens on; 8 on the machines seen):
  every micro-batch the engine decodes has at least ``min_batch`` tokens (the last one
  borrows from the one before), so any two splits of a prompt compute every token alike.
  Reuse is token by token: a prefill keeps the common prefix of what was prefilled (never
  generated tokens, which were decoded one at a time) and recomputes at least ``min_batch``
  tokens. Prefill runs in micro-batches of ``n_ubatch`` (128), at llama.cpp's full speed.
  With two regimes (``ExactSchedule.tile``: CPU flash attention computes a token one way in
  micro-batches of 64+ tokens and another in smaller ones, each invariant) a prompt is
  computed in tile-sized micro-batches up to its edge (``tile_boundary``) and its last 8-71
  tokens in small ones; reuse keeps what was computed in the regime the new prompt's cold
  prefill uses (``tiled_reusable``).
- **chunked** (``cache.exact_schedule = "chunked"``, or no size passed the measurement):
  round 2's schedule. Every prompt is decoded in micro-batches of ``cache.exact_chunk`` that
  start at its multiples, the last partial chunk in pieces of ``TAIL_PIECE`` then the rest;
  whole chunks are reused, and whole tail pieces while the new prompt ends inside the same
  partial chunk (a keystroke's inline completion).

Either way every sequence has its own KV stream, so the live sequence sits at cells
``0..n-1`` in position order, as after a cold prefill; branches are whole-stream copies (every
cell of the sliding window kept) and snapshots are loaded into the live stream itself.

Without it (``exact_reuse = false``) reuse is token-granular on one KV pool that parked
branches share with the live sequence: cheaper in memory, but warm output may drift from cold.

The session is built in layers: ``engine.llama.live.Computed`` is what a sequence holds (the
live one and each branch), ``engine.llama.branches`` parks and restores branches,
``engine.llama.snapshots`` saves and loads the live sequence, and this module prefills,
decodes and chooses the schedule.
"""

from __future__ import annotations

import array
import codecs
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import llama_cpp

from contextasm.identity import ContextIdentity
from contextasm.manifest import common_prefix_length
from contextasm.templates import FormatChoice, choose_prompt_format
from engine.errors import (
    CancelledError,
    DecodeFailedError,
    DecodeFatalError,
    EngineError,
    InvalidBatchError,
    InvalidSessionStateError,
    NoKvSlotError,
)
from engine.fim import FimTokens
from engine.llama import invariance, logbridge
from engine.llama.abort_flag import AbortFlag
from engine.llama.branches import MAIN_SEQ, Branch, fill_batch
from engine.llama.live import BatchKind, Computed
from engine.llama.model import (
    LoadedModel,
    backend_version,
    context_params,
    load_model,
    meta_str,
)
from engine.llama.sampler import build_sampler, greedy_token
from engine.llama.snapshots import WINDOW_TRUST_LENGTHS, SnapshotLayer
from engine.lookup import LookupStats, NgramIndex
from engine.model_files import cache_dir
from engine.profile import Profile
from engine.results import (
    GenerateResult,
    PrefillResult,
    SessionMetrics,
    decode_rate,
    ms_since,
)
from engine.session_base import check_prompt

log = logging.getLogger(__name__)

DecodeFn = Callable[[Any, Any], int]


@dataclass(frozen=True)
class ExactSchedule:
    """How this session keeps warm == cold (module doc).

    ``kind``: "invariant" (the kernels were measured batch-invariant from ``min_batch`` tokens
    on: any split into micro-batches of at least that many gives the same bits; reuse is token
    by token, at least ``min_batch`` tokens are recomputed), "chunked" (micro-batches of
    ``chunk`` aligned to its multiples, reuse in whole chunks and tail pieces) or "off"
    (``cache.exact_reuse = false``: token-granular reuse, warm may drift from cold).
    ``fallback`` says why "chunked" was chosen when the profile asked for "auto"."""

    kind: str
    chunk: int
    min_batch: int = 1
    fallback: str | None = None
    tile: int = 0
    """Invariant schedule with two regimes (0: one): micro-batches of ``tile`` tokens or more
    compute a token one way, smaller ones (from ``min_batch``) another, each invariant within
    itself (CPU flash attention: tiles of 64 query rows, or row by row). A prompt's tokens up
    to ``tile_boundary`` go through the first, the last few through the second."""

    def describe(self) -> str:
        if self.kind == "invariant" and self.tile:
            return (f"exact: invariant in two regimes: micro-batches of {self.tile}+ tokens "
                    f"up to the prompt's last {self.min_batch}-"
                    f"{self.tile + self.min_batch - 1}, of {self.min_batch}+ for those")
        if self.kind == "invariant":
            return f"exact: invariant from {self.min_batch}-token micro-batches"
        if self.kind == "chunked":
            why = f" ({self.fallback})" if self.fallback else ""
            return f"exact: chunked by {self.chunk}{why}"
        return "exact reuse off"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "chunk": self.chunk, "minBatch": self.min_batch,
                "tile": self.tile, "description": self.describe()}


#: The piece size of a prompt's last, partial chunk under exact reuse (see the module doc): a
#: keystroke recomputes fewer than this many tokens before its own, not up to a whole chunk's
#: worth (31 at n_ubatch 32, ~40 ms more on 2 cores), for up to three more small
#: micro-batches at the end of each cold prefill.
TAIL_PIECE = 8


def reusable_tokens(common: int, prompt_len: int, exact: int, pieces: int, chunk: int,
                    piece: int) -> int:
    """Of ``common`` leading tokens shared with a resident sequence computed in whole chunks
    up to ``exact`` and in whole tail pieces up to ``pieces``, how many a prefill of a
    ``prompt_len``-token prompt keeps: those a cold prefill of that prompt computes in the
    same micro-batches, never its last token (its logits are computed again)."""
    n = min(common, prompt_len - 1)
    if n >= exact and prompt_len // chunk * chunk == exact:
        return max(exact, min(n, pieces) // piece * piece)  # inside the same partial chunk
    return max(0, min(n, exact)) // chunk * chunk


#: Bytes per element of the KV cache types (quantized types: per element, block overhead in).
_KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32,
             "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}


def invariant_batches(pos: int, end: int, size: int, min_batch: int
                      ) -> list[tuple[int, int, BatchKind]]:
    """Micro-batches of at most ``size`` tokens covering ``pos..end-1``, none smaller than
    ``min_batch`` (the last borrows from the one before it; ``size >= 2 * min_batch``). Only a
    prompt shorter than ``min_batch`` gets a smaller one ("rest": not reusable)."""
    out: list[tuple[int, int, BatchKind]] = []
    start = pos
    while end - start > size:
        take = size if end - start - size >= min_batch else end - start - min_batch
        out.append((start, start + take, "chunks"))
        start += take
    if start < end:
        out.append((start, end, "chunks" if end - start >= min_batch else "rest"))
    return out


def tile_boundary(n: int, tile: int, min_batch: int) -> int:
    """Under the two-regime invariant schedule, where a cold prefill of ``n`` tokens stops
    computing in tile-sized micro-batches: the last multiple of ``tile`` that leaves at least
    ``min_batch`` tokens after it (those, 8 to ``tile + min_batch - 1``, go in small ones).
    A multiple of ``tile``, so a prompt that grows keeps it for ``tile`` tokens."""
    return max(0, (n - min_batch) // tile * tile)


def tiled_batches(pos: int, end: int, size: int, tile: int, min_batch: int
                  ) -> list[tuple[int, int, BatchKind]]:
    """The two-regime schedule's micro-batches for ``pos..end-1`` (``pos`` as ``tiled_reusable``
    leaves it): up to ``tile_boundary`` in batches of ``tile`` to ``size`` tokens ("chunks"),
    then in batches of ``min_batch`` to ``tile - 1`` ("piece"; "rest" below ``min_batch``)."""
    edge = tile_boundary(end, tile, min_batch)
    assert pos >= edge or edge - pos >= tile, (pos, edge, tile)
    out: list[tuple[int, int, BatchKind]] = []
    if pos < edge:
        out += invariant_batches(pos, edge, size, tile)
    out += [(a, b, "piece" if kind == "chunks" else kind)
            for a, b, kind in invariant_batches(max(pos, edge), end, tile - 1, min_batch)]
    return out


def tiled_reusable(common: int, prompt_len: int, exact: int, pieces: int, tile: int,
                   min_batch: int) -> int:
    """Of ``common`` leading tokens shared with a resident sequence computed in tile-sized
    micro-batches up to ``exact`` and in small ones from there up to ``pieces``, how many a
    prefill of a ``prompt_len``-token prompt keeps under the two-regime schedule: those its
    cold prefill computes in the same regime, so that what is left to compute before its
    ``tile_boundary`` fills at least one tile-sized batch and at least ``min_batch`` tokens
    are left after it."""
    edge = tile_boundary(prompt_len, tile, min_batch)
    keep = min(common, exact, edge)
    if keep == edge == exact:  # same boundary: the small batches after it are the cold ones
        return max(keep, min(common, pieces, prompt_len - min_batch))
    if 0 < edge - keep < tile:
        keep = max(0, edge - tile)
    return keep



class LlamaSession(SnapshotLayer):
    """The llama.cpp implementation of the engine session seam (see ``engine.session.Session``)."""

    backend = "llama"

    def __init__(self, profile: Profile, model: LoadedModel) -> None:
        super().__init__()
        profile = profile.resolve_bos(model.adds_bos)
        self.profile = profile
        self._model = model
        self._cancel = threading.Event()
        # Tokenizing may run on another thread than prefill; close() must not free the model
        # under it. Held only for the microseconds a tokenize takes, never during a decode.
        self._model_lock = threading.Lock()
        self._closed = False
        # The flag cancel() sets and llama.cpp reads after each graph node, without Python.
        self._abort = AbortFlag()
        # Fault-injection seam for tests: the function that runs one batch.
        self._decode_fn: DecodeFn = llama_cpp.llama_decode
        self._ctx: Any = None
        self._mem: Any = None
        self._n_ubatch_override: int | None = None  # kept for a rebuild after a fatal decode
        # The live sequence (MAIN_SEQ): its tokens and how much of them a later prefill may
        # keep, changed only through its methods (engine.llama.live).
        self._live = Computed()
        self._resident_identity: ContextIdentity | None = None
        self._logits_ready = False
        self._prefill_started = 0.0
        self._branches: dict[str, Branch] = {}
        self._fatal_reason: str | None = None
        self.metrics = SessionMetrics()
        self._exact = profile.exact_reuse
        self._n_seq_max = int(profile.get("context.n_seq_max"))
        self._batch = llama_cpp.llama_batch_init(profile.n_batch, 0, 1)
        self._batch_capacity = profile.n_batch
        self.last_lookup: LookupStats | None = None
        """Drafted and accepted tokens of the last ``stream(lookup=...)`` (None: no lookup)."""
        self._sampler = build_sampler(profile, model.vocab)
        # A cross-stream sequence copy that llama.cpp has not run yet (see _flush_copies).
        self._copies_pending = False
        self.schedule = self._choose_schedule()
        # The reuse unit: whole chunks under the chunked schedule, else single tokens.
        self._chunk = self.schedule.chunk
        # The last partial chunk's pieces (the chunk itself where it does not divide it).
        self._piece = TAIL_PIECE if self._chunk % TAIL_PIECE == 0 else self._chunk
        # Tokens per llama_decode call: whole chunks (chunked), one micro-batch (invariant:
        # the engine, not llama.cpp, decides every micro-batch's size).
        n_ubatch = int(profile.get("context.n_ubatch"))
        self._n_batch = (max(self._chunk, profile.n_batch // self._chunk * self._chunk)
                         if self.schedule.kind == "chunked" else
                         n_ubatch if self.schedule.kind == "invariant" else profile.n_batch)
        self.prompt_format = self._choose_format()
        self.identity = ContextIdentity(
            profile_id=profile.profile_id,
            backend=self.backend,
            backend_version=f"{backend_version()}; {self.schedule.describe()}",
            model_digest=model.model_digest,
            tokenizer_digest=model.tokenizer_digest,
            chat_template_digest=model.chat_template_digest,
            prompt_format=self.prompt_format.name,
            bos_policy=profile.bos_policy,
            n_ctx=self.n_ctx,
            rope_freq_base=float(profile.get("context.rope_freq_base")),
            rope_freq_scale=float(profile.get("context.rope_freq_scale")),
            rope_scaling_type=str(profile.get("context.rope_scaling_type")),
            type_k=str(profile.get("context.type_k")),
            type_v=str(profile.get("context.type_v")),
            flash_attn=str(profile.get("context.flash_attn")),
            swa_full=profile.swa_full,
            block_size=self._identity_block_size(profile),
        )

    def _token_text(self, token: int) -> str | None:
        """A token's text with special tokens spelled out (None for llama.cpp's "no token")."""
        if token < 0:
            return None
        return self.token_piece(token, special=True).decode("utf-8", "replace")

    def _choose_format(self) -> FormatChoice:
        """The prompt format (``contextasm.templates``): from the model's chat template under
        ``prompt.format = "auto"``, rendered with its own BOS and EOS texts."""
        vocab = self._model.vocab
        choice = choose_prompt_format(self.profile.prompt_format, self._model.chat_template,
                                      self._token_text(llama_cpp.llama_vocab_bos(vocab)) or "",
                                      self._token_text(llama_cpp.llama_vocab_eos(vocab)) or "")
        if choice.source.startswith(("family (", "base: template not usable")):
            log.warning("prompt format %s: %s", choice.name, choice.source)
        return choice

    def _choose_schedule(self) -> ExactSchedule:
        """Create the context and decide how exact reuse is kept (module doc): measured batch
        invariance when the profile allows it, else the chunked schedule."""
        profile = self.profile
        if not self._exact:
            self._create_context()
            return ExactSchedule("off", chunk=1)
        chunk = profile.exact_chunk
        if profile.exact_schedule == "chunked":
            self._create_context(n_ubatch=chunk)
            return ExactSchedule("chunked", chunk=chunk)
        n_ubatch = int(profile.get("context.n_ubatch"))
        why = self._known_batch_dependent()
        if why is None:
            self._create_context()
            min_batch = self._measured_min_batch(n_ubatch)
            if min_batch is not None and 2 * min_batch <= n_ubatch:
                # Smaller micro-batches may be invariant among themselves (another kernel
                # path): then only the last tokens need a small one, not a whole tile.
                small = (self._measured_min_batch(min_batch - 1)
                         if min_batch > invariance.CANDIDATES[0] else None)
                if small is not None and 2 * small <= min_batch - 1:
                    return ExactSchedule("invariant", chunk=1, min_batch=small, tile=min_batch)
                return ExactSchedule("invariant", chunk=1, min_batch=min_batch)
            why = ("not batch-invariant at any micro-batch size tried "
                   f"({', '.join(map(str, invariance.CANDIDATES))}) on this CPU")
            llama_cpp.llama_free(self._ctx)
            self._ctx = self._mem = None
        log.warning("exact reuse uses the chunked schedule (micro-batches of %d, reuse in "
                    "whole chunks): %s", chunk, why)
        self._create_context(n_ubatch=chunk)
        return ExactSchedule("chunked", chunk=chunk, fallback=why)

    def _known_batch_dependent(self) -> str | None:
        """Why this profile's kernels are batch-dependent by construction (no measurement
        needed), or None. A short probe can miss such a kernel: its differences are often
        below the f16 rounding of the KV cache, so these are never left to it."""
        p = self.profile
        if bool(p.get("context.repack_weights")):
            return ("repacked weights: the GEMM tiles and the GEMV for the columns left over "
                    "round a token by its column in the micro-batch")
        if int(p.get("context.n_gpu_layers")) != 0:
            return "GPU offload: its kernels are chosen by batch size"
        return None

    def _measured_min_batch(self, n_ubatch: int) -> int | None:
        """The invariance probe's answer for this model, build and kernel settings: from the
        cache file when measured before, else measured now (about a second) and kept."""
        key = invariance.probe_key(
            model=self._model.model_digest, backend=backend_version(), n_ubatch=n_ubatch,
            **invariance.kernel_settings(self.profile))
        path = cache_dir() / "engine" / "batch-invariance.json"
        found, min_batch = invariance.load_probe(path, key)
        if not found:
            t0 = time.perf_counter()
            probe = self.tokenize(invariance.PROBE_TEXT, add_bos=True)
            min_batch = invariance.find_min_batch(
                lambda sizes: self._probe_run(probe, sizes), n_ubatch)
            log.info("batch-invariance probe: minimum micro-batch %s (%.0f ms)",
                     min_batch, ms_since(t0))
            invariance.store_probe(path, key, min_batch)
        return min_batch

    def _probe_run(self, base: Sequence[int], sizes: Sequence[int]) -> bytes:
        """One probe decode (``invariance.RunFn``) of the prompt ``base`` repeats into, on the
        live sequence, which is empty at load and emptied again after."""
        base = list(base)
        n = sum(sizes)
        toks = (base * (n // len(base) + 1))[:n]
        llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
        try:
            pos = 0
            for size in sizes:
                fill_batch(self._batch, toks[pos: pos + size], pos, MAIN_SEQ,
                           "last" if pos + size == n else "none")
                status = int(llama_cpp.llama_decode(self._ctx, self._batch))
                if status != 0:
                    raise DecodeFatalError(
                        f"llama_decode returned {status} in the batch-invariance probe",
                        status=status)
                pos += size
            logits = ctypes.string_at(llama_cpp.llama_get_logits_ith(self._ctx, -1),
                                      4 * self.n_vocab)
            size = int(llama_cpp.llama_state_seq_get_size(self._ctx, MAIN_SEQ))
            buf = (ctypes.c_uint8 * size)()
            got = int(llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, MAIN_SEQ))
            return logits + ctypes.string_at(buf, got)
        finally:
            llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)

    def _identity_block_size(self, profile: Profile) -> int:
        """The assembler pads the stable region to this: ``cache.block_size``, and under the
        chunked schedule whole chunks when that is left at 1, so a stable prefix is reused
        to its last token (as OpenVINO's KV blocks do). Token-granular reuse needs none."""
        if profile.block_size > 1 or self._chunk == 1:
            if profile.block_size % self._chunk:
                log.warning(
                    "cache.block_size = %d is not a multiple of the exact-reuse chunk (%d): "
                    "a stable prefix that ends inside a chunk is reused only up to the chunk "
                    "before it", profile.block_size, self._chunk)
            return profile.block_size
        return self._chunk

    # ----------------------------------------------------------------- lifecycle

    @classmethod
    def open(cls, profile: Profile) -> LlamaSession:
        model = load_model(profile)
        try:
            return cls(profile, model)
        except BaseException:
            model.close()
            raise

    def _create_context(self, n_ubatch: int | None = None) -> None:
        if n_ubatch is not None:
            self._n_ubatch_override = n_ubatch
        params = context_params(self.profile, self._abort, self._n_ubatch_override)
        ctx = llama_cpp.llama_init_from_model(self._model.model, params)
        if not ctx:
            raise DecodeFatalError(
                "llama.cpp could not create a context (out of memory for n_ctx?)",
                n_ctx=self.profile.n_ctx,
            )
        self._ctx = ctx
        self._mem = llama_cpp.llama_get_memory(ctx)
        self._fatal_reason = None

    def _ensure_context(self) -> None:
        """After a fatal decode the context was freed; rebuild it on the next request."""
        if self._ctx is None:
            log.warning("rebuilding the llama.cpp context after: %s", self._fatal_reason)
            self._create_context()

    def close(self) -> None:
        """Free context and model; waits for a running call to finish (cancel it first)."""
        with self._busy, self._model_lock:
            if self._closed:
                return
            self._closed = True
            self._close_locked()

    def _close_locked(self) -> None:
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._sampler is not None:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        self._model.close()


    # ----------------------------------------------------------------- facts

    @property
    def n_ctx(self) -> int:
        """Positions one sequence can hold (with exact reuse each sequence has its own)."""
        if self._ctx is None:
            return self.profile.n_ctx
        return int(llama_cpp.llama_n_ctx_seq(self._ctx))

    @property
    def n_vocab(self) -> int:
        return self._model.n_vocab

    @property
    def bos_token_id(self) -> int | None:
        return self._model.bos_id

    @property
    def tokenizer_digest(self) -> str:
        return self._model.tokenizer_digest

    @property
    def model_path(self) -> str:
        return str(self._model.path)

    @property
    def model_description(self) -> str:
        return self._model.description

    @property
    def fim_tokens(self) -> FimTokens | None:
        return self._model.fim

    @property
    def capabilities(self) -> dict[str, bool]:
        return {
            "snapshots": True,
            "branches": self._n_seq_max > 1,
            "cancel": True,
            "prefix_reuse": True,
        }

    @property
    def exact_reuse(self) -> dict[str, Any]:
        past = self.snapshots_past_window
        measured = self.window_lengths_exact
        return {**self.schedule.to_dict(), "snapshotsPastWindow": (
            None if past is None and not self._past_window(self.n_ctx) else
            f"exact so far ({measured} of the {WINDOW_TRUST_LENGTHS} lengths measured before "
            "every length is trusted)" if past is None and measured else
            "not measured yet" if past is None else "exact" if past else
            f"refused: not exact on this CPU (window {self._model.n_swa} tokens)")}

    @property
    def prompt_format_source(self) -> str:
        return self.prompt_format.source

    def model_facts(self) -> dict[str, Any]:
        """What ``contenox-lsp model info`` shows: the model as llama.cpp loaded it, and what
        this profile makes of it (format, schedule, KV memory)."""
        m, vocab = self._model.model, self._model.vocab
        arch = meta_str(m, "general.architecture") or "?"
        n_layer = int(llama_cpp.llama_model_n_layer(m))
        n_head = max(1, int(llama_cpp.llama_model_n_head(m)))
        n_head_kv = int(llama_cpp.llama_model_n_head_kv(m))
        head = int(llama_cpp.llama_model_n_embd(m)) // n_head
        k_len = int(meta_str(m, f"{arch}.attention.key_length") or head)
        v_len = int(meta_str(m, f"{arch}.attention.value_length") or head)
        per_cell = n_layer * n_head_kv * (
            k_len * _KV_BYTES.get(str(self.profile.get("context.type_k")), 2.0)
            + v_len * _KV_BYTES.get(str(self.profile.get("context.type_v")), 2.0))

        # Every token that ends generation (llama.cpp adds the FIM pad, repository and
        # file-separator tokens to the EOS/EOT ones): a scan of the vocabulary, ~0.1 s.
        eog = [t for t in range(self._model.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)]
        fim = self._model.fim
        return {
            "path": str(self._model.path), "description": self._model.description,
            "architecture": arch, "name": meta_str(m, "general.name"),
            "parameters": int(llama_cpp.llama_model_n_params(m)),
            "sizeBytes": int(llama_cpp.llama_model_size(m)),
            "layers": n_layer, "contextTrained": self._model.n_ctx_train,
            "contextConfigured": self.n_ctx, "slidingWindow": self._model.n_swa,
            "promptFormat": self.prompt_format.name,
            "promptFormatSource": self.prompt_format.source,
            "chatTemplate": self._model.chat_template is not None,
            "bos": {"token": self._token_text(
                        -1 if self._model.bos_id is None else self._model.bos_id),
                    "policy": self.profile.bos_policy},
            "endOfGeneration": [self._token_text(t) for t in eog],
            "fim": None if fim is None else {
                "prefix": self._token_text(fim.prefix), "suffix": self._token_text(fim.suffix),
                "middle": self._token_text(fim.middle),
                "repo": None if fim.repo is None else self._token_text(fim.repo),
                "sep": None if fim.sep is None else self._token_text(fim.sep)},
            "kvBytesPerToken": round(per_cell),
            "kvBytesPerSequence": round(per_cell * self.n_ctx),
            "kvBytesAllSequences": round(per_cell * self.n_ctx * self._n_seq_max),
            "sequences": self._n_seq_max,
            "exactReuse": self.exact_reuse,
        }

    @property
    def reuse_granularity(self) -> int:
        return self._chunk  # 1 without exact reuse: the KV cache is trimmed token by token

    @property
    def resident_tokens(self) -> list[int]:
        return list(self._live.tokens)

    @property
    def n_resident(self) -> int:
        return len(self._live)

    @property
    def reusable_resident(self) -> int:
        return self._live.exact if self._exact else len(self._live)

    def next_token_logits(self) -> array.array[float]:
        """A copy of the logits the next ``generate`` samples from (for drift measurements)."""
        if self._ctx is None or not self._logits_ready:
            raise InvalidSessionStateError("no logits: prefill() first", resident=len(self._live))
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        out = array.array("f", bytes(4 * self.n_vocab))
        ctypes.memmove(out.buffer_info()[0], ptr, 4 * self.n_vocab)
        return out

    # ----------------------------------------------------------------- tokens

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        """Tokenize without any implicit BOS; ``add_bos`` prepends the model's BOS explicitly."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        with self._model_lock:
            if self._closed:
                raise InvalidSessionStateError("session is closed")
            while True:
                buf = (llama_cpp.llama_token * cap)()
                n = llama_cpp.llama_tokenize(
                    self._model.vocab, data, len(data), buf, cap, False, special
                )
                if n >= 0:
                    break
                cap = -n
        out = list(buf[:n])
        if add_bos and self._model.bos_id is not None:
            out.insert(0, self._model.bos_id)
        return out

    def token_piece(self, token: int, *, special: bool = False) -> bytes:
        if self._closed:
            raise InvalidSessionStateError("session is closed")
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._model.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._model.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        return b"".join(self.token_piece(t, special=special) for t in tokens).decode(
            "utf-8", errors="replace"
        )

    # ----------------------------------------------------------------- cancellation

    def cancel(self) -> None:
        """Thread-safe. Aborts the running prefill (within one micro-batch) or decode (within
        one token) of the current request; a new ``prefill`` starts a new request."""
        self._cancel.set()
        # What llama.cpp logs as errors while the flag stops a decode is this cancellation.
        logbridge.note_abort()
        self._abort.set()

    # ----------------------------------------------------------------- prefill

    def prefill(
        self, tokens: Sequence[int], identity: ContextIdentity | None = None
    ) -> PrefillResult:
        """Make ``tokens`` resident, reusing the longest valid cached prefix.

        ``identity`` is the manifest identity the prompt was assembled under (default: this
        session's). Resident state from another identity is never reused: KV is cleared.
        Raises before any decode if the prompt cannot fit; on cancel/failure the live sequence
        holds exactly the committed chunks.
        """
        with self._exclusive("prefill"):
            self._cancel.clear()
            self._abort.clear()
            logbridge.abort_withdrawn()
            t0 = time.perf_counter()
            self._prefill_started = t0
            toks = check_prompt(tokens, self._model.n_vocab, self.n_ctx)
            ident = identity or self.identity
            self._ensure_context()
            self._logits_ready = False
            reused, reason, restored = self._reuse_prefix(toks, ident)
            self._decode_suffix(toks[reused:], pos=reused)
            self._logits_ready = True
            result = PrefillResult(
                reused_tokens=reused,
                new_tokens=len(toks) - reused,
                prefill_ms=ms_since(t0),
                total_tokens=len(toks),
                miss_reason=reason,
                restored_branch=restored,
            )
            return self.metrics.record_prefill(result)

    def _reuse_prefix(
        self, toks: list[int], ident: ContextIdentity
    ) -> tuple[int, str | None, str | None]:
        """Trim the live sequence to the reusable prefix of ``toks``: (n, reason, branch)."""
        reason: str | None = None
        if self._resident_identity is not None:
            field = self._resident_identity.first_mismatch(ident)
            if field is not None:
                reason = f"identity field '{field}' changed: KV cleared"
                self._clear_live()
        self._resident_identity = ident

        n = self._live_reusable(toks, self._chunk)
        restored: str | None = None
        best = self._best_branch(toks, ident)
        if best is not None and best[1] > n:
            branch, n = best
            self._copy_seq(branch.seq_id, MAIN_SEQ)
            self._live.set(branch.computed)
            branch.last_used = time.monotonic()
            restored = branch.name

        # Sliding-window layers may hold only the window: always with swa_full = false, and
        # after a snapshot load even with swa_full (llama.cpp saves only the window's cells).
        if 0 < n < len(self._live) and self._model.n_swa > 0:
            pos_min = int(llama_cpp.llama_memory_seq_pos_min(self._mem, MAIN_SEQ))
            needed = max(0, n - self._model.n_swa)
            if pos_min > needed:
                why = "swa_full = false" if not self.profile.swa_full else "restored snapshot"
                reason = (
                    f"sliding window: rollback to {n} needs position {needed}, but positions "
                    f"below {pos_min} are gone ({why})"
                )
                n = 0
        if n < len(self._live):
            if not llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, n, -1):
                reason = reason or "the cache cannot remove a partial sequence"
                n = 0
                llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
        self._live.cut(n)
        return n, reason, restored

    def warm_prefix(self, tokens: Sequence[int]) -> int:
        toks = list(tokens)
        n = self._live_warm_prefix(toks, self.identity, self._chunk)
        best = self._best_branch(toks, self.identity)
        return max(n, best[1]) if best is not None else n

    def _snapshot_tokens(self) -> int:
        if self.schedule.tile and self._live.pieces >= self.schedule.tile:
            return self._live.pieces
        return super()._snapshot_tokens()

    def _settle_for_snapshot(self) -> None:
        """Two regimes: the tokens after the live sequence's edge were computed in small
        micro-batches, as a cold prefill of this very prompt does; a longer prompt computes
        them in tile-sized ones. Compute them so (with the tokens before them that make a
        tile), so that a snapshot holds every prefilled token exactly as any prompt that
        extends it needs it."""
        live, tile = self._live, self.schedule.tile
        if not tile or live.exact == live.pieces or live.pieces < tile:
            return
        end = live.pieces
        start = min(live.exact, end - tile)
        tokens = live.tokens[start:end]
        llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, start, -1)
        live.cut(start)
        self._logits_ready = False
        self._decode_chunk(tokens, start, logits_last=False, stage="snapshot")
        live.commit(tokens, "chunks")

    def _reusable(self, resident: Computed, toks: Sequence[int]) -> int:
        """How many of the ``resident`` tokens a prefill of ``toks`` keeps under this
        session's schedule (module doc)."""
        exact, pieces = resident.exact, resident.pieces
        common = common_prefix_length(resident.tokens, toks)
        if self.schedule.kind == "off":
            return max(0, min(common, len(toks) - 1))
        if self.schedule.kind == "invariant" and self.schedule.tile:
            return tiled_reusable(common, len(toks), exact, pieces, self.schedule.tile,
                                  self.schedule.min_batch)
        if self.schedule.kind == "invariant":
            # Keep what was computed in micro-batches of at least min_batch, leaving at least
            # min_batch tokens to compute: then every micro-batch of the warm prefill is one
            # the invariance holds for, as every one of the cold prefill is.
            return max(0, min(common, exact, len(toks) - self.schedule.min_batch))
        return reusable_tokens(common, len(toks), exact, pieces, self._chunk, self._piece)

    def _live_reusable(self, tokens: Sequence[int], granularity: int) -> int:
        # The schedule's rule (``_reusable``), not a plain granularity.
        return self._reusable(self._live, tokens)

    def reset(self) -> None:
        """Forget everything resident (live sequence and parked branches): a cold session."""
        with self._exclusive("reset"):
            for name in list(self._branches):
                self.branch_drop(name)
            if self._mem is not None:
                llama_cpp.llama_memory_clear(self._mem, True)
            self._live.clear()
            self._resident_identity = None
            self._logits_ready = False

    def _clear_live(self) -> None:
        llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, -1, -1)
        self._live.clear()

    def _decode_suffix(self, suffix: Sequence[int], pos: int) -> None:
        end = pos + len(suffix)
        for start, stop, kind in self._schedule(pos, end):
            if self._cancel.is_set():
                raise CancelledError(
                    "prefill cancelled", committed_tokens=len(self._live), stage="prefill"
                )
            chunk = suffix[start - pos : stop - pos]
            self._decode_chunk(chunk, start, logits_last=stop == end, stage="prefill")
            # Each micro-batch is the one a cold prefill of this prompt computes there.
            self._live.commit(chunk, kind)

    def _schedule(self, pos: int, end: int) -> list[tuple[int, int, BatchKind]]:
        """The batches that decode positions ``pos..end-1`` (see the module doc): whole
        chunks in n_batch batches (llama.cpp splits them into n_ubatch micro-batches), then
        the last partial chunk's whole pieces, then the rest. ``pos`` is where reuse stopped:
        a chunk boundary, or a piece boundary inside the last chunk."""
        if self.schedule.kind == "off":  # chunk = 1: everything counts as computed
            return [(s, min(s + self._n_batch, end), "chunks")
                    for s in range(pos, end, self._n_batch)]
        if self.schedule.kind == "invariant" and self.schedule.tile:
            return tiled_batches(pos, end, self._n_batch, self.schedule.tile,
                                 self.schedule.min_batch)
        if self.schedule.kind == "invariant":
            return invariant_batches(pos, end, self._n_batch, self.schedule.min_batch)
        full_end = end // self._chunk * self._chunk
        assert pos >= full_end or pos % self._chunk == 0, (pos, self._chunk)
        pieces_end = full_end + (end - full_end) // self._piece * self._piece
        out: list[tuple[int, int, BatchKind]] = [
            (s, min(s + self._n_batch, full_end), "chunks")
            for s in range(pos, full_end, self._n_batch)]
        out += [(s, s + self._piece, "piece") for s in range(max(pos, full_end), pieces_end,
                                                              self._piece)]
        if max(pos, pieces_end) < end:
            out.append((max(pos, pieces_end), end, "rest"))
        return out

    def _decode_chunk(
        self, chunk: Sequence[int], pos: int, *, logits_last: bool, stage: str,
        logits_all: bool = False,
    ) -> None:
        """Run one batch; on failure roll back to the committed tokens and raise its error."""
        while True:
            fill_batch(self._batch, chunk, pos, MAIN_SEQ,
                       "all" if logits_all else "last" if logits_last else "none")
            status = int(self._decode_fn(self._ctx, self._batch))
            if status == 0:
                self._copies_pending = False  # llama.cpp ran them before this batch
                return
            if status == 1 and not self._exact and self._drop_lru_branch():
                continue  # parked branches held shared cells; the live sequence comes first
            self._on_decode_failure(status, stage)

    def _on_decode_failure(self, status: int, stage: str) -> None:
        committed = len(self._live)
        data = {"status": status, "committed_tokens": committed, "stage": stage}
        if status < -1:
            self._go_fatal(f"llama_decode returned {status}")
            raise DecodeFatalError(
                f"llama_decode failed fatally ({status}); the context will be rebuilt", **data
            )
        if status == -1:
            # llama.cpp rejected a batch we built from its own resident state: that state and
            # our token list disagree (a forged snapshot, say). Only an empty sequence is safe.
            self._clear_live()
            data["committed_tokens"] = 0
            raise InvalidBatchError(
                "llama_decode rejected the batch as invalid; the live sequence was cleared",
                **data,
            )
        # Partial micro-batches may remain in KV (status 2): cut back to what we committed.
        llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, committed, -1)
        self._live.cut(committed)
        if status == 2:
            raise CancelledError(f"{stage} cancelled", **data)
        if status == 1:
            raise NoKvSlotError("no free KV slot for the batch (context full)", **data)
        raise DecodeFailedError(f"llama_decode returned unknown status {status}", **data)

    def _go_fatal(self, reason: str) -> None:
        if self._ctx is not None:
            llama_cpp.llama_free(self._ctx)
        self._ctx = None
        self._mem = None
        self._live.clear()
        self._resident_identity = None
        self._branches.clear()
        self._logits_ready = False
        self._fatal_reason = reason

    # ----------------------------------------------------------------- generation

    def stream(self, max_tokens: int = 256, *,
               lookup: int = 0) -> Generator[str, bool | None, GenerateResult]:
        """Yield text pieces as tokens are decoded; returns the ``GenerateResult``.

        ``generate`` runs this same loop; both stop within one token of ``cancel()``.
        ``lookup`` > 0 (greedy sampling only; ignored otherwise): prompt-lookup decoding —
        after each token, up to ``lookup`` tokens drafted from the sequence's own n-grams
        (``engine.lookup``) are verified in the same batch and kept up to the first one the
        model would not have chosen. Deterministic (warm == cold, bitwise), but a token
        decoded in a batch of several can round differently from the one-token loop (near
        ties): see the engine README.
        """
        with self._exclusive("stream"):
            if self._ctx is None or not self._logits_ready:
                raise InvalidSessionStateError(
                    "generate/stream needs a successful prefill() first", resident=len(self._live)
                )
            if max_tokens < 1:
                raise InvalidBatchError("max_tokens must be >= 1", max_tokens=max_tokens)
            if lookup < 0:
                raise InvalidBatchError("lookup must be >= 0", lookup=lookup)
            self._logits_ready = False  # the logits are consumed by this generation
            sampler = self._sampler
            llama_cpp.llama_sampler_reset(sampler)
            greedy = float(self.profile.get("sampler.temperature")) <= 0.0 and float(
                self.profile.get("sampler.repeat_penalty")) == 1.0
            lookup = min(lookup, self._batch_capacity - 1) if greedy else 0
            index = NgramIndex(self._live.tokens) if lookup else None
            # Kept current as it goes: a consumer that stops early (a stop text) closes the
            # generator before its end.
            self.last_lookup = LookupStats(0, 0) if lookup else None
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            out_tokens: list[int] = []
            pieces: list[str] = []
            ttft_ms = 0.0
            t_first = 0.0
            finish = "length"
            drafted = accepted = 0
            logits_at = -1  # the batch index whose logits give the next token
            while True:
                if self._cancel.is_set():
                    raise CancelledError(
                        "decode cancelled", stage="decode", decoded_tokens=len(out_tokens)
                    )
                tok = (greedy_token(self._ctx, logits_at, self.n_vocab) if greedy else
                       int(llama_cpp.llama_sampler_sample(sampler, self._ctx, logits_at)))
                if not out_tokens and not t_first:
                    t_first = time.perf_counter()
                    ttft_ms = (t_first - self._prefill_started) * 1000.0
                if llama_cpp.llama_vocab_is_eog(self._model.vocab, tok):
                    finish = "stop"
                    break
                out_tokens.append(tok)
                piece = decoder.decode(self.token_piece(tok))
                if piece:
                    pieces.append(piece)
                    if (yield piece):  # the consumer saw a stop sequence (engine.results.drain)
                        finish = "stop"
                        break
                if len(out_tokens) >= max_tokens:
                    break  # no logits needed after the last token
                if len(self._live) >= self.n_ctx:
                    finish = "context_full"
                    break
                if index is None:
                    self._decode_chunk([tok], len(self._live), logits_last=True,
                                       stage="decode")
                    self._live.append(tok)
                    continue
                # Prompt lookup: the token and a draft in one batch, every position's logits.
                index.append(tok)
                room = min(lookup, max_tokens - len(out_tokens),
                           self.n_ctx - len(self._live) - 1)
                draft = index.draft(room)
                self._decode_chunk([tok, *draft], len(self._live), logits_last=True,
                                   stage="decode", logits_all=True)
                self._live.append(tok)
                drafted += len(draft)
                kept, stop = 0, False
                for j, want in enumerate(draft):
                    got = greedy_token(self._ctx, j, self.n_vocab)  # lookup: greedy only
                    if got != want:
                        break
                    if llama_cpp.llama_vocab_is_eog(self._model.vocab, got):
                        finish, stop = "stop", True
                        break
                    kept += 1
                    out_tokens.append(got)
                    self._live.append(got)
                    index.append(got)
                    piece = decoder.decode(self.token_piece(got))
                    if piece:
                        pieces.append(piece)
                        if (yield piece):
                            finish, stop = "stop", True
                            break
                    if len(out_tokens) >= max_tokens:
                        stop = True
                        break
                accepted += kept
                self.last_lookup = LookupStats(drafted, accepted)
                # The rejected part of the draft leaves the KV cache.
                llama_cpp.llama_memory_seq_rm(self._mem, MAIN_SEQ, len(self._live), -1)
                if stop:
                    break
                logits_at = kept  # after the last kept token
            tail = decoder.decode(b"", final=True)
            if tail:
                pieces.append(tail)
                yield tail
            decode_ms = (time.perf_counter() - t_first) * 1000.0 if t_first else 0.0
            n = len(out_tokens)
            result = GenerateResult(
                tokens=out_tokens,
                text="".join(pieces),
                ttft_ms=ttft_ms,
                decode_tokens=n,
                decode_ms=decode_ms,
                # The first token comes from the prefill's logits; the rest cost a decode each.
                decode_tok_s=decode_rate(n, decode_ms),
                finish_reason=finish,
            )
            return self.metrics.record_generate(result)


__all__ = ["EngineError", "LlamaSession"]
