"""The ``openai`` backend: an engine speaking the OpenAI-compatible completions API with
automatic prefix caching (vLLM, SGLang, llama-server's ``/v1/completions``).

What differs from the ``llama-server`` backend (whose session this extends):

- Requests go to ``POST /v1/completions`` with the assembled **token ids** as the prompt
  (vLLM, SGLang and llama-server accept a list of ids), streamed, with
  ``stream_options.include_usage`` so the last event carries ``usage``.
- Reuse is ``usage.prompt_tokens_details.cached_tokens`` where the server reports it (vLLM with
  ``--enable-prompt-tokens-details``, llama-server). Where it does not, the session cannot know
  what was reused: it reports the common prefix with its last prompt in whole cache blocks and
  says so in ``metrics.extra["reuse_accounting"]``.
- No slot to pin: the server's cache is shared and content addressed in blocks of
  ``cache.block_size`` tokens (vLLM: 16 by default), which is also what the assembler pads the
  stable prefix to. ``remote.slot`` and ``remote.reuse_chunk`` do not apply.
- The API streams text, not ids: a generation's ``tokens`` are its text tokenized again.
- ``reset()`` cannot empty a shared server's cache: it only forgets this session's account.
- Tokenization: the server's ``/tokenize`` and ``/detokenize`` (vLLM's shape, or llama-server's,
  picked by ``/v1/models`` ``owned_by``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from contextasm.formats import resolve_prompt_format
from contextasm.identity import ContextIdentity
from engine.errors import ProfileMismatchError, RemoteError
from engine.profile import Profile
from engine.remote.llama_server import LlamaServerSession, Piece, _digest, server_identity
from engine.session_base import WithoutSequenceState

#: ``/v1/models`` ``owned_by`` of llama-server (its tokenize endpoints take other fields).
LLAMA_CPP_OWNER = "llamacpp"


class OpenAiSession(LlamaServerSession):
    """A model on an OpenAI-compatible completions server behind the engine session seam."""

    backend = "openai"
    why_no_sequence_state = "the server's shared prefix cache keeps prefixes warm instead"

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self._chunk = 0  # no slot to cut: the server's block cache decides
        self.metrics.extra["reuse_accounting"] = (
            "server-reported where usage.prompt_tokens_details.cached_tokens is present; "
            "otherwise estimated (common prefix with the last prompt, whole cache blocks)"
        )

    @classmethod
    def open(cls, profile: Profile) -> OpenAiSession:
        return cls(profile)

    # No slot of its own: the server's shared block cache is what keeps a prefix.
    save_snapshot = WithoutSequenceState.save_snapshot
    load_snapshot = WithoutSequenceState.load_snapshot

    def _probe_slot_actions(self) -> bool:
        return False

    # ----------------------------------------------------------------- server facts

    def _read_facts(self) -> dict[str, Any]:
        models = self._client.get("/v1/models")
        try:
            model = models["data"][0]
            meta = model.get("meta") or {}
            facts: dict[str, Any] = {
                "model_id": str(model["id"]),
                "owned_by": str(model.get("owned_by", "")),
                "n_ctx": int(model.get("max_model_len") or meta.get("n_ctx") or 0),
                "n_vocab": int(meta.get("n_vocab") or 0),
                "size": int(meta.get("size") or 0),
                "n_params": int(meta.get("n_params") or 0),
            }
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise RemoteError(
                f"{self._client.base_url}/v1/models does not list a model ({exc})",
                url=self._client.base_url,
            ) from None
        if facts["n_ctx"] and facts["n_ctx"] < self.profile.n_ctx:
            raise ProfileMismatchError(
                f"the server's model takes {facts['n_ctx']} tokens, the profile's "
                f"context.n_ctx is {self.profile.n_ctx}: lower context.n_ctx",
                server_n_ctx=facts["n_ctx"], n_ctx=self.profile.n_ctx,
            )
        return facts

    def _identity(self, facts: dict[str, Any]) -> ContextIdentity:
        model = {k: facts[k] for k in ("model_id", "n_ctx", "size", "n_params", "n_vocab")}
        vocab = {"model": facts["model_id"], "n_vocab": facts["n_vocab"], "bos": self._bos,
                 "eos": self._eos}
        # The API does not expose the chat template: "auto" means base framing here.
        return server_identity(
            self.profile, self.backend, facts["owned_by"], _digest(model), _digest(vocab), "",
            resolve_prompt_format(self.profile.prompt_format, None), self.profile.block_size)

    def _special_ids(self) -> tuple[int | None, int | None]:
        """BOS: what the tokenizer adds in front when asked to; EOS: not known through the API
        (the server stops at it itself)."""
        with_special = self._tokenize_special("a")
        plain = self._tokenize_cached("a", False)
        bos = with_special[0] if len(with_special) > len(plain) else None
        return bos, None

    @property
    def n_vocab(self) -> int:
        return int(self._facts["n_vocab"]) or 2**31 - 1  # unknown: the server checks ids

    @property
    def reuse_granularity(self) -> int:
        return max(1, self.profile.block_size)

    @property
    def reusable_resident(self) -> int:
        return len(self._tokens)

    @property
    def model_description(self) -> str:
        return f"{self._facts['model_id']} on {self._client.base_url} (OpenAI API)"

    @property
    def server_facts(self) -> dict[str, Any]:
        return dict(self._facts)

    # ----------------------------------------------------------------- tokens

    @property
    def _llama_cpp(self) -> bool:
        return bool(self._facts["owned_by"] == LLAMA_CPP_OWNER)

    def _tokenize_special(self, text: str) -> list[int]:
        if self._llama_cpp:
            doc = self._client.post("/tokenize", {"content": text, "add_special": True})
        else:
            doc = self._client.post("/tokenize", {"model": self._facts["model_id"],
                                                  "prompt": text, "add_special_tokens": True})
        return [int(t) for t in doc["tokens"]]

    def _tokenize_remote(self, text: str, special: bool) -> list[int]:
        if self._llama_cpp:
            doc = self._client.post(
                "/tokenize", {"content": text, "add_special": False, "parse_special": special})
        else:
            # vLLM's /tokenize always matches special-token text; "special" cannot be honoured.
            doc = self._client.post("/tokenize", {"model": self._facts["model_id"],
                                                  "prompt": text, "add_special_tokens": False})
        return [int(t) for t in doc["tokens"]]

    def detokenize(self, tokens: Sequence[int], *, special: bool = False) -> str:
        toks = [int(t) for t in tokens if special or t != self._bos]
        if not toks:
            return ""
        if self._llama_cpp:
            return str(self._client.post("/detokenize", {"tokens": toks}).get("content", ""))
        doc = self._client.post("/detokenize", {"model": self._facts["model_id"], "tokens": toks})
        return str(doc.get("prompt", ""))

    # ----------------------------------------------------------------- requests

    def _request(self, tokens: Sequence[int], n_predict: int, *, cache: bool = True
                 ) -> Iterator[Piece]:
        get = self.profile.get
        body: dict[str, Any] = {
            "model": self._facts["model_id"],
            "prompt": list(tokens),
            "max_tokens": max(1, n_predict),  # the API has no prompt-only request
            "temperature": float(get("sampler.temperature")),
            "top_p": float(get("sampler.top_p")),
            "seed": int(get("context.seed")),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        salt = str(get("remote.cache_salt"))
        if salt:
            # vLLM keys its prefix cache by the salt too: another developer's cached prefix
            # cannot be reused, nor timed, from this session (docs/fleet.md).
            body["cache_salt"] = salt
        extra = {"top_k": int(get("sampler.top_k")), "min_p": float(get("sampler.min_p"))}
        body.update(extra)  # vLLM, SGLang and llama-server take these sampling extensions
        if self._llama_cpp:
            body["repeat_penalty"] = float(get("sampler.repeat_penalty"))
        else:
            body["repetition_penalty"] = float(get("sampler.repeat_penalty"))
        finish = ""
        for event in self._client.events("/v1/completions", body, self._cancel.is_set):
            for choice in event.get("choices") or []:
                finish = str(choice.get("finish_reason") or finish)
                yield Piece(text=str(choice.get("text") or ""))
            usage = event.get("usage")
            if usage:
                details = usage.get("prompt_tokens_details") or {}
                cached = details.get("cached_tokens")
                prompt_n = int(usage.get("prompt_tokens", len(tokens)))
                yield Piece(
                    final=True, cached=None if cached is None else int(cached),
                    computed=None if cached is None else prompt_n - int(cached),
                    stop={"stop": "eos", "length": "limit"}.get(finish, finish),
                    report=dict(usage))

    def _server_reuse(self, report: dict[str, Any]) -> tuple[int | None, int | None]:
        details = report.get("prompt_tokens_details") or {}
        cached, prompt = details.get("cached_tokens"), report.get("prompt_tokens")
        if not isinstance(cached, int) or not isinstance(prompt, int):
            return None, None
        return cached, prompt - cached

    def _reported_reuse(self, final: Piece, toks: Sequence[int], keep: int) -> int:
        reported = final.cached is not None
        self.metrics.extra["reuse_reported_by_server"] = reported
        if final.cached is not None:
            return min(final.cached, len(toks) - 1)
        # Not reported: what the session expected, the common prefix with its last prompt in
        # whole cache blocks (``keep``).
        return keep

    def reset(self) -> None:
        """Forget this session's account of the server's cache (a shared cache cannot be
        emptied from here: a "cold" prompt must be one the server has not seen)."""
        with self._exclusive("reset"):
            self._tokens = []
            self._resident_identity = None


__all__ = ["OpenAiSession"]
