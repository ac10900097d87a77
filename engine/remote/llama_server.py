"""The ``llama-server`` backend of the engine seam: one slot of a (shared) llama.cpp server.

The assembler's token ids go to ``POST /completion`` as the prompt (never text: the server
would tokenize text its own way), with ``cache_prompt: true`` and a pinned ``id_slot``, so the
slot keeps the previous prompt's KV and reuses its longest common prefix. What the server
really reused comes back in every response (``timings.cache_n`` tokens taken from the slot,
``timings.prompt_n`` computed), and that is what ``PrefillResult`` reports: a prefix the
session expected to be resident but the server did not have (it restarted, another client used
the slot) is a reported miss, never a silent one.

- ``prefill`` is an ``n_predict: 0`` request (the idle pre-prefill); ``stream`` sends the same
  prompt again with ``n_predict`` set, so the server re-evaluates only the last prompt token.
- Cancelling closes the stream; prompt progress events (``return_progress``) arrive once per
  server batch, so a cancelled prefill stops within one batch.
- Tokenization is the server's own vocabulary (``/tokenize`` with special-token parsing as
  asked, ``/detokenize``), memoised per text.
- Identity: ``/props`` and ``/v1/models`` (model path, size, parameter count, vocabulary,
  build, the slot's context). It is read again before every prefill: a server restarted with
  another model or build is an identity miss.

Snapshots go through the server's slot save/restore (``engine.remote.slot_snapshots``) when
it was started with ``--slot-save-path``; ``capabilities`` says whether it was. Parked branches
are not available (the slot is the one sequence this session owns): ``UnsupportedCapabilityError``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from contextasm.formats import resolve_prompt_format
from contextasm.identity import ContextIdentity
from contextasm.manifest import common_prefix_length
from engine.errors import (
    CancelledError,
    EngineError,
    InvalidBatchError,
    InvalidSessionStateError,
    ProfileMismatchError,
    RemoteError,
    UnsupportedCapabilityError,
)
from engine.fim import KNOWN_FIM_TEXTS, FimTokens
from engine.profile import Profile
from engine.remote import slot_snapshots
from engine.remote.client import ServerClient, is_retryable
from engine.remote.session_key import default_session_key
from engine.results import (
    GenerateResult,
    PrefillResult,
    SessionMetrics,
    SnapshotResult,
    decode_rate,
    ms_since,
)
from engine.session_base import SessionBase, WithoutSequenceState, check_prompt

log = logging.getLogger(__name__)


#: What llama-server reports as its chat template when the model's GGUF has none (llama.cpp
#: ``common/chat.cpp`` CHATML_TEMPLATE_SRC): read as "no template", as the in-process engine does.
SERVER_FALLBACK_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)



def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


@dataclass
class Piece:
    """One streamed event of a completion request, whatever the server's API."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)  # ids of ``text`` when the server says
    final: bool = False
    cached: int | None = None  # prompt tokens the server took from its cache (final only)
    computed: int | None = None  # prompt tokens it computed (final only)
    stop: str = ""  # why generation ended: "eos", "word", "limit" (final only)
    report: dict[str, Any] = field(default_factory=dict)  # the server's own figures


def server_identity(profile: Profile, backend: str, version: str, model_digest: str,
                    tokenizer_digest: str, template_digest: str, prompt_format: str,
                    block_size: int) -> ContextIdentity:
    """The cache identity of a model on a server. Its KV and attention settings are the
    server's command line's, which no endpoint reports: the model and build fields stand for
    them (another model or build is a reported miss)."""
    return ContextIdentity(
        profile_id=profile.profile_id,
        backend=backend,
        backend_version=version,
        model_digest=model_digest,
        tokenizer_digest=tokenizer_digest,
        chat_template_digest=template_digest,
        prompt_format=prompt_format,
        bos_policy=profile.bos_policy,
        n_ctx=profile.n_ctx,
        rope_freq_base=0.0,
        rope_freq_scale=0.0,
        rope_scaling_type="server",
        type_k="server",
        type_v="server",
        flash_attn="server",
        swa_full=True,
        block_size=block_size,
    )


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _model_template(reported: str) -> str:
    return "" if reported == SERVER_FALLBACK_TEMPLATE else reported


class LlamaServerSession(WithoutSequenceState, SessionBase):
    """One slot of a llama-server behind the engine session seam."""

    backend = "llama-server"
    why_no_sequence_state = (
        "the session owns one server slot, whose cached prompt keeps the prefix warm"
    )

    def __init__(self, profile: Profile) -> None:
        super().__init__()
        profile = profile.resolve_bos(None)  # the policy "add" stands for when unknown
        self.profile = profile
        get = profile.get
        # remote.slot; -1: the slot the session key hashes to (one per developer on a shared
        # server without configuring each; see _pick_slot), resolved with the server's facts.
        self._slot_setting = int(get("remote.slot"))
        self._slot = max(0, self._slot_setting)
        self._client = ServerClient(
            str(get("remote.url")), api_key_env=str(get("remote.api_key_env")),
            connect_timeout_s=float(get("remote.connect_timeout_s")),
            timeout_s=float(get("remote.timeout_s")),
            session_key=str(get("remote.session_key")) or default_session_key(),
            retry_s=float(get("remote.retry_s")),
        )
        self._served_slot: int | None = None  # the slot the last request ran in
        self._cancel = threading.Event()
        self._tokens: list[int] = []
        # What the slot holds as far as this session knows (prompt + generated tokens); None
        # after a failure: unknown, so the next prefill assumes the worst.
        self._slot_tokens: list[int] | None = []
        self._chunk = int(get("remote.reuse_chunk"))
        # Whether a generate request recomputed the resident prompt's last token alone (the
        # server always evaluates at least one prompt token per request).
        self._last_recomputed = False
        self._resident_identity: ContextIdentity | None = None
        self._prefill_started = 0.0
        self._cold_next = False
        self.metrics = SessionMetrics()
        self.metrics.extra["reuse_accounting"] = (
            "server-reported: timings.cache_n (reused from the slot) and timings.prompt_n "
            "(computed) of each request"
        )
        try:
            self._facts = self._read_facts()
            self._tokenize_cached = lru_cache(maxsize=4096)(self._tokenize_remote)
            self._bos, self._eos = self._special_ids()
            self._fim = self._find_fim()
            self.identity = self._identity(self._facts)
            self._slot_actions = self._probe_slot_actions()
        except Exception:
            self._client.close()
            raise

    @classmethod
    def open(cls, profile: Profile) -> LlamaServerSession:
        return cls(profile)

    # ----------------------------------------------------------------- server facts

    def _read_facts(self) -> dict[str, Any]:
        """What identifies the server's model and build, and what this session needs of it;
        a server whose slot context or slot count does not fit the profile is refused."""
        props = self._client.get("/props")
        models = self._client.get("/v1/models")
        try:
            meta = models["data"][0]["meta"]
            slot_ctx = int(props["default_generation_settings"]["n_ctx"])
            facts: dict[str, Any] = {
                "model_path": str(props.get("model_path", "")),
                "build_info": str(props.get("build_info", "")),
                "total_slots": int(props.get("total_slots", 1)),
                "chat_template": _model_template(str(props.get("chat_template", ""))),
                "bos_token": str(props.get("bos_token", "")),
                "eos_token": str(props.get("eos_token", "")),
                "n_ctx": slot_ctx,
                "n_vocab": int(meta["n_vocab"]),
                "vocab_type": int(meta.get("vocab_type", -1)),
                "n_params": int(meta.get("n_params", 0)),
                "size": int(meta.get("size", 0)),
                "ftype": str(meta.get("ftype", "")),
            }
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise RemoteError(
                f"{self._client.base_url} does not look like a llama-server (/props, "
                f"/v1/models lack {exc})", url=self._client.base_url,
            ) from None
        if facts["n_ctx"] < self.profile.n_ctx:
            raise ProfileMismatchError(
                f"the server's slots hold {facts['n_ctx']} tokens, the profile's context.n_ctx "
                f"is {self.profile.n_ctx}: start llama-server with -c (n_ctx × slots) or lower "
                "context.n_ctx", server_n_ctx=facts["n_ctx"], n_ctx=self.profile.n_ctx,
            )
        if self._slot_setting >= facts["total_slots"]:
            raise ProfileMismatchError(
                f"remote.slot = {self._slot_setting}, but the server has "
                f"{facts['total_slots']} slot(s) (start it with -np N)",
                slot=self._slot_setting, total_slots=facts["total_slots"],
            )
        self._slot = self._pick_slot(facts["total_slots"])
        return facts

    def _pick_slot(self, total_slots: int) -> int:
        """The profile's slot, or with ``remote.slot = -1`` the one the session key hashes to.

        Not llama-server's own choice (``id_slot: -1``): it picks the idle slot whose cached
        prompt is most similar relative to that slot's length, so on one repository a teammate's
        shorter prompt wins and both lose their prefix. Two keys share a slot with probability
        1/slots (a reported miss, never a wrong prefix; docs/fleet.md)."""
        if self._slot_setting >= 0:
            return self._slot_setting
        digest = hashlib.sha256(self._client.session_key.encode()).hexdigest()
        return int(digest[:8], 16) % max(1, total_slots)

    def _identity(self, facts: dict[str, Any]) -> ContextIdentity:
        model = {k: facts[k] for k in ("model_path", "n_params", "size", "ftype", "n_vocab")}
        vocab = {k: facts[k] for k in ("n_vocab", "vocab_type", "bos_token", "eos_token")}
        template = facts["chat_template"]
        # The assembler pads the stable region to block_size: left at 1 it follows the reuse
        # chunk, so the idle prefill's prefix ends on a chunk the next request reuses.
        block = self.profile.block_size if self.profile.block_size > 1 else self.reuse_granularity
        return server_identity(
            self.profile, self.backend, facts["build_info"], _digest(model), _digest(vocab),
            hashlib.sha256(template.encode()).hexdigest() if template else "",
            resolve_prompt_format(self.profile.prompt_format, template or None), block)

    def _special_ids(self) -> tuple[int | None, int | None]:
        return (self._single_token(self._facts["bos_token"]),
                self._single_token(self._facts["eos_token"]))

    def _single_token(self, text: str) -> int | None:
        if not text:
            return None
        ids = self._tokenize_cached(text, True)
        return ids[0] if len(ids) == 1 else None

    def _find_fim(self) -> FimTokens | None:
        for texts in KNOWN_FIM_TEXTS:
            ids = [self._single_token(t) for t in texts]
            if all(i is not None for i in ids):
                pre, suf, mid = (int(i) for i in ids if i is not None)
                return FimTokens(pre, suf, mid)
        return None

    # ----------------------------------------------------------------- seam facts

    @property
    def n_ctx(self) -> int:
        return self.profile.n_ctx

    @property
    def n_vocab(self) -> int:
        return int(self._facts["n_vocab"])

    @property
    def bos_token_id(self) -> int | None:
        return self._bos

    @property
    def tokenizer_digest(self) -> str:
        return self.identity.tokenizer_digest

    @property
    def model_path(self) -> str:
        return str(self._facts["model_path"])

    @property
    def model_description(self) -> str:
        name = Path(self._facts["model_path"]).name or "model"
        return f"{name} on llama-server {self._client.base_url} (slot {self._slot})"

    @property
    def reuse_granularity(self) -> int:
        # remote.reuse_chunk: whole chunks only (warm == cold); else any common prefix.
        return max(1, self._chunk)

    @property
    def reusable_resident(self) -> int:
        """With chunked reuse, the resident prompt's tokens that were computed in whole
        chunks; the partial last chunk and generated tokens are computed again, and so is the
        chunk of the prompt's last token once a generate request recomputed it alone."""
        if self._chunk <= 0:
            return len(self._tokens)
        whole = len(self._tokens) - (1 if self._last_recomputed else 0)
        return max(0, whole) // self._chunk * self._chunk

    @property
    def capabilities(self) -> dict[str, bool]:
        return {"snapshots": self._slot_actions, "branches": False, "cancel": True,
                "prefix_reuse": True}

    @property
    def fim_tokens(self) -> FimTokens | None:
        return self._fim

    @property
    def remote_status(self) -> dict[str, Any] | None:
        """Where requests go and what the server last said about them (``contenox/status``)."""
        cached, computed = self._server_reuse(self.metrics.extra.get("last_server_timings") or {})
        return {
            "endpoint": self._client.base_url,
            "sessionKey": self._client.session_key,
            "cacheSalt": bool(self.profile.get("remote.cache_salt")),
            # The replica that served the last request, where the router or proxy names it.
            "servedBy": self._client.served_by,
            "slot": self._served_slot,
            "retries": self._client.retries,
            # The server's own account of its last request's prompt: from its cache / computed.
            "serverCachedTokens": cached,
            "serverComputedTokens": computed,
        }

    def _server_reuse(self, report: dict[str, Any]) -> tuple[int | None, int | None]:
        """Prompt tokens from the server's cache and computed, in its last request's report."""
        return _int_or_none(report.get("cache_n")), _int_or_none(report.get("prompt_n"))

    @property
    def server_facts(self) -> dict[str, Any]:
        """The server's model, build and slots as read at the last identity check."""
        return {k: v for k, v in self._facts.items() if k != "chat_template"}

    # ----------------------------------------------------------------- tokens

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        doc = self._client.post(
            "/tokenize", {"content": text, "add_special": False, "parse_special": special}
        )
        return [int(t) for t in doc["tokens"]]

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        out = list(self._tokenize_cached(text, special)) if text else []
        if add_bos and self._bos is not None:
            out.insert(0, self._bos)
        return out

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        if not tokens:
            return ""
        toks = [int(t) for t in tokens]
        if not special:
            toks = [t for t in toks if t not in (self._bos, self._eos)]
        doc = self._client.post("/detokenize", {"tokens": toks})
        return str(doc.get("content", ""))

    # ----------------------------------------------------------------- requests

    def cancel(self) -> None:
        """Thread-safe: the running request's stream is closed at its next event."""
        self._cancel.set()

    def _body(self, tokens: Sequence[int], n_predict: int, *, cache: bool = True
              ) -> dict[str, Any]:
        get = self.profile.get
        return {
            "prompt": list(tokens),
            "n_predict": n_predict,
            "cache_prompt": cache and not self._cold_next,
            "id_slot": self._slot,
            "stream": True,
            "return_progress": True,
            "return_tokens": True,
            "temperature": float(get("sampler.temperature")),
            "top_k": int(get("sampler.top_k")),
            "top_p": float(get("sampler.top_p")),
            "min_p": float(get("sampler.min_p")),
            "repeat_penalty": float(get("sampler.repeat_penalty")),
            "seed": int(get("context.seed")),
        }

    def _served(self, tokens: Sequence[int], n_predict: int, *, cache: bool = True
                ) -> Iterator[Piece]:
        """``_request``, sent again while it fails before anything came back but progress
        (``remote.retry_s``): a replica that died under a router, or a restarting server, costs
        a slower answer on another replica, whose missing prefix the final piece reports."""
        budget = self._client.retry_budget()
        while True:
            produced = False
            try:
                for piece in self._request(tokens, n_predict, cache=cache):
                    produced = produced or piece.final or bool(piece.text or piece.tokens)
                    yield piece
                return
            except EngineError as exc:
                retry = not produced and is_retryable(exc) and not self._cancel.is_set()
                delay = budget.next_delay() if retry else None
                if delay is None:
                    raise
                self._client.note_retry(exc, delay)
                if self._cancel.wait(delay):  # a cancel ends the wait too
                    raise CancelledError("remote request cancelled while retrying",
                                         stage="retry") from None

    def _request(self, tokens: Sequence[int], n_predict: int, *, cache: bool = True
                 ) -> Iterator[Piece]:
        """One ``/completion`` request as pieces; progress events come through as empty
        pieces, so a cancel is seen at each server batch."""
        for event in self._client.events("/completion", self._body(tokens, n_predict,
                                                                    cache=cache),
                                         self._cancel.is_set):
            if "prompt_progress" in event and not event.get("content"):
                yield Piece()  # progress only (its "tokens" field is not a generated token)
            elif event.get("stop"):
                timings = event.get("timings", {})
                if isinstance(event.get("id_slot"), int):
                    self._served_slot = int(event["id_slot"])
                yield Piece(
                    text=str(event.get("content", "")),
                    tokens=[int(t) for t in event.get("tokens", [])], final=True,
                    cached=int(timings.get("cache_n", 0)),
                    computed=int(timings.get("prompt_n", 0)),
                    stop=str(event.get("stop_type", "")), report=timings)
            else:
                yield Piece(text=str(event.get("content", "")),
                            tokens=[int(t) for t in event.get("tokens", [])])

    def _check_identity(self, ident: ContextIdentity) -> str | None:
        """Re-read the server's facts; a changed model or build is a reported miss."""
        facts = self._read_facts()
        if facts != self._facts:
            fresh = self._identity(facts)
            changed = self.identity.first_mismatch(fresh)
            self._facts, self.identity = facts, fresh
            self._tokenize_cached.cache_clear()
            self._tokens = []
            self._slot_tokens = None
            if changed is not None:
                return f"the server changed (identity field '{changed}'): nothing reused"
        if self._resident_identity is not None and self._resident_identity != ident:
            field = self._resident_identity.first_mismatch(ident)
            self._tokens = []
            return f"identity field '{field}' changed: the slot's prefix is not reused"
        return None

    def prefill(
        self, tokens: Sequence[int], identity: ContextIdentity | None = None
    ) -> PrefillResult:
        """Make ``tokens`` the slot's prompt (an ``n_predict: 0`` request) and report what the
        server reused."""
        with self._exclusive("prefill"):
            self._cancel.clear()
            t0 = time.perf_counter()
            self._prefill_started = t0
            toks = check_prompt(tokens, self.n_vocab, self.n_ctx)
            ident = identity or self.identity
            try:
                reason = self._check_identity(ident)
            except EngineError:
                self._tokens, self._slot_tokens = [], None  # the server is not what it was
                raise
            keep = self._reusable(toks)
            self._tokens = []  # until the server confirms, nothing is known to be resident
            try:
                cut = self._align_slot(toks, keep)
                self._slot_tokens = None
                final, generated = self._final_piece(
                    self._served(toks, 0, cache=cut is None or cut > 0), stage="prefill")
            except CancelledError as exc:
                # The server changes a slot only from where a prompt departs from it, so the
                # prefix this request was to reuse is still there: a cancelled idle prefill
                # must not make the next one start over (and cut the slot back to its first
                # step). The next prefill checks it against the server's own count anyway.
                self._keep_after_cancel(toks, keep, ident)
                exc.data.update(committed_tokens=len(self._tokens))
                raise
            self._cold_next = False
            served = self._reported_reuse(final, toks, keep)
            # What came from before this call: a cut request (if one ran) reports it.
            reused = served if cut is None else min(cut, served)
            computed = len(toks) - reused
            if reason is None and reused < keep:
                reason = (
                    f"the server's slot held {reused} of the {keep} tokens this session left "
                    "there (the server restarted, another client used the slot, or a router "
                    "sent the request to another replica)"
                )
            self._tokens = toks
            self._last_recomputed = False
            self._slot_tokens = [*toks, *generated]
            self._resident_identity = ident
            self.metrics.extra["last_server_timings"] = final.report
            return self.metrics.record_prefill(PrefillResult(
                reused_tokens=reused, new_tokens=computed, prefill_ms=ms_since(t0),
                total_tokens=len(toks), miss_reason=reason,
            ))

    def _keep_after_cancel(self, toks: Sequence[int], keep: int,
                           ident: ContextIdentity) -> None:
        self._tokens = list(toks[:keep])
        self._slot_tokens = None  # what the server did with the rest is unknown
        self._last_recomputed = False
        self._resident_identity = ident if keep else self._resident_identity

    def _reusable(self, toks: Sequence[int]) -> int:
        """How many leading tokens of ``toks`` this prefill may take from the slot: the common
        prefix with the last prompt, never its last token, and with ``remote.reuse_chunk``
        only whole chunks that were computed as whole chunks."""
        n = min(common_prefix_length(self._tokens, toks), self.reusable_resident, len(toks) - 1)
        return n // self.reuse_granularity * self.reuse_granularity

    def _align_slot(self, toks: Sequence[int], keep: int) -> int | None:
        """Make the server reuse at most ``keep`` tokens (chunked reuse only). Returns None
        when nothing had to be cut, else how many tokens the slot really held of ``keep``
        (0: the prompt request is to recompute everything).

        llama-server reuses the whole common prefix it finds, so a prompt that matches the slot
        past ``keep`` would be computed from a position inside a chunk, in a micro-batch a cold
        run never forms (the rounding differs, engine/README.md). A one-token request that
        agrees with ``toks`` up to ``keep`` and differs at ``keep`` cuts the slot there first
        (one extra token computed, the marker)."""
        if self._chunk <= 0:
            return None
        slot = self._slot_tokens
        held = len(toks) if slot is None else common_prefix_length(slot, toks)
        if held <= keep:
            return None
        if keep == 0:
            return 0
        marker = toks[keep] + 1 if toks[keep] + 1 < self.n_vocab else toks[keep] - 1
        self._slot_tokens = None
        final, _ = self._final_piece(self._served([*toks[:keep], marker], 0),
                                       stage="prefill")
        return min(keep, final.cached or 0)

    def _reported_reuse(self, final: Piece, toks: Sequence[int], keep: int) -> int:
        """The prompt tokens the server says it took from its cache (``keep``: what this
        session expected it to take)."""
        return final.cached or 0

    def _final_piece(self, pieces: Iterator[Piece], stage: str) -> tuple[Piece, list[int]]:
        """Run a request to its end: its final piece and the tokens it generated."""
        final = Piece()
        generated: list[int] = []
        try:
            for piece in pieces:
                generated.extend(piece.tokens)
                if piece.final:
                    final = piece
        except CancelledError as exc:
            exc.data.update(stage=stage, committed_tokens=0)
            raise
        return final, generated

    def reset(self) -> None:
        """A cold session: the next request recomputes its whole prompt (``cache_prompt``
        off), whatever the slot holds."""
        with self._exclusive("reset"):
            self._tokens = []
            self._slot_tokens = None
            self._resident_identity = None
            self._cold_next = True

    def stream(self, max_tokens: int = 256, *,
               lookup: int = 0) -> Generator[str, bool | None, GenerateResult]:
        """Yield text pieces as the server streams them; returns the ``GenerateResult``."""
        with self._exclusive("stream"):
            if not self._tokens:
                raise InvalidSessionStateError(
                    "generate/stream needs a successful prefill() first", resident=0
                )
            if max_tokens < 1:
                raise InvalidBatchError("max_tokens must be >= 1", max_tokens=max_tokens)
            self._cancel.clear()
            room = self.n_ctx - len(self._tokens)
            n_predict = min(max_tokens, room)
            out_tokens: list[int] = []
            t_first = 0.0
            ttft_ms = 0.0
            finish = "length"
            pieces = self._served(self._tokens, n_predict)
            self._slot_tokens = None  # unknown until the stream ends
            self._last_recomputed = True
            text_parts: list[str] = []
            try:
                for piece in pieces:
                    if (piece.tokens or piece.text) and not t_first:
                        t_first = time.perf_counter()
                        ttft_ms = (t_first - self._prefill_started) * 1000.0
                    out_tokens.extend(piece.tokens)
                    text_parts.append(piece.text)
                    if piece.final:
                        finish = "stop" if piece.stop in ("eos", "word") else "length"
                        if piece.stop == "limit" and n_predict < max_tokens:
                            finish = "context_full"
                        self.metrics.extra["last_server_timings"] = piece.report
                    if piece.text and (yield piece.text):
                        finish = "stop"  # the consumer saw a stop text: close the stream
                        break
            except CancelledError as exc:
                exc.data.update(stage="decode", decoded_tokens=len(out_tokens))
                raise
            finally:
                close = getattr(pieces, "close", None)
                if close is not None:
                    close()
            if not out_tokens and text_parts:
                # The server streams text only (OpenAI API): its ids, as this vocabulary
                # tokenizes the text (may differ from the ids it sampled at a boundary).
                out_tokens = self.tokenize("".join(text_parts), special=False)
            self._slot_tokens = [*self._tokens, *out_tokens]
            decode_ms = (time.perf_counter() - t_first) * 1000.0 if t_first else 0.0
            n = len(out_tokens)
            result = GenerateResult(
                tokens=out_tokens,
                text="".join(text_parts),  # the server's own decoding of the tokens
                ttft_ms=ttft_ms,
                decode_tokens=n,
                decode_ms=decode_ms,
                decode_tok_s=decode_rate(n, decode_ms),
                finish_reason=finish,
            )
            return self.metrics.record_generate(result)


    def close(self) -> None:
        self._client.close()


    # ----------------------------------------------------------------- snapshots

    def _probe_slot_actions(self) -> bool:
        return slot_snapshots.slot_actions_enabled(self._client, self._slot)

    def _require_slot_actions(self) -> None:
        if not self._slot_actions:
            raise UnsupportedCapabilityError(
                f"the server at {self._client.base_url} keeps no slot files: start llama-server "
                "with --slot-save-path DIR for snapshots", capability="snapshots",
                backend=self.backend,
            )

    def save_snapshot(self, path: str | Path) -> SnapshotResult:
        """Save the slot on the server (its ``--slot-save-path``) and write the local snapshot
        that names the server's file."""
        with self._exclusive("save_snapshot"):
            self._require_slot_actions()
            if not self._tokens or self._resident_identity is None or self._slot_tokens is None:
                raise InvalidSessionStateError(
                    "nothing resident to snapshot", resident=len(self._tokens)
                )
            result = slot_snapshots.save(
                self._client, self._slot, Path(path), self._resident_identity, self._tokens,
                meta={"backend": self.backend, "model": self.model_description,
                      "last_recomputed": self._last_recomputed},
            )
            self.metrics.last_snapshot_save = result
            return result

    def load_snapshot(
        self, path: str | Path, expect_prefix: Sequence[int] | None = None
    ) -> SnapshotResult:
        """Restore a snapshot into the slot. The local file (checksum, identity, the expected
        prefix) is checked first, against the server as it is now; a refusal there leaves the
        session as it was, a failed restore leaves nothing resident."""
        with self._exclusive("load_snapshot"):
            self._require_slot_actions()
            self._check_identity(self.identity)  # the server as it is now
            payload, ref = slot_snapshots.check(Path(path), self.identity, self.n_ctx,
                                                expect_prefix)
            self._tokens, self._slot_tokens = [], None
            restored = slot_snapshots.restore(self._client, self._slot, Path(path), payload, ref)
            self._tokens = restored.tokens
            self._slot_tokens = (list(restored.tokens)
                                 if restored.slot_tokens == len(restored.tokens) else None)
            self._last_recomputed = bool(restored.meta.get("last_recomputed", False))
            self._resident_identity = self.identity
            self._cold_next = False
            self.metrics.last_snapshot_load = restored.result
            return restored.result

    # ----------------------------------------------------------------- unsupported

    def warm_prefix(self, tokens: Sequence[int]) -> int:
        return self._live_warm_prefix(tokens, self.identity, self.reuse_granularity)


__all__ = ["LlamaServerSession"]
