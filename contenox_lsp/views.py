"""The JSON documents both doors return: the explain document and the turn metrics.

``contenox/explainContext`` and ``contenox-lsp explain-context --json`` return the same
explain document; ``contenox/ask`` and ``contenox-lsp ask --json`` the same metrics (field
names in camelCase, as in PROTOCOL.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from contenox_lsp.completion.prompt import choose_mode, completion_layout
from contenox_lsp.context_budget import ContextBudget, beside_question
from engine.session import reusable_prefix

if TYPE_CHECKING:
    from contextasm import Assembly, SnapshotEntry
    from engine import Session


#: The CLI's ``questionCodeBound``: its one-shot ask prefills everything after the restored
#: stable prefix anyway, so the question's code is not bounded.
CLI_QUESTION_CODE_BOUND: dict[str, Any] = {"tokens": None, "questionCodeMs": 0,
                                           "tokensPerS": None, "source": "cli"}


def explain_view(
    assembly: Assembly,
    session: Session,
    resident: Sequence[int],
    *,
    snapshot_tokens: int = 0,
    include_text: bool = False,
    prefill_tokens_per_s: float | None = None,
    question_code_bound: dict[str, Any] | None = None,
    budget: ContextBudget,
    index: dict[str, Any],
) -> dict[str, Any]:
    """What of ``assembly`` is cached, segment by segment.

    ``budget``: the one budget the context beside the question was built within (shown with
    the tokens it took). ``index``: the repo index's state and files (the server's: while it
    builds, the prompt has no repo map and no code; the CLI builds it before assembling).

    ``question_code_bound``: what bounded the question's code (the server's; the CLI's
    one-shot ask has no bound).

    ``resident``: the session's resident tokens; ``snapshot_tokens``: the prefix length of the
    best snapshot that could be restored instead (0: none)."""
    common, reason = assembly.reuse_against_resident(list(resident), session.resident_identity)
    # What the next prefill really reuses (whole reuse blocks only).
    live = reusable_prefix(session, common)
    reused = max(live, snapshot_tokens)
    cached_from = "snapshot" if snapshot_tokens > live else ("resident" if live else "none")
    ident = assembly.identity
    completion_mode = choose_mode(session.profile.completion_mode, session.fim_tokens)
    segments = []
    for seg in assembly.segments:
        extra = {"text": seg.text} if include_text else {}
        segments.append({
            "kind": seg.kind.value,
            "label": seg.label,
            "tokens": seg.n_tokens,
            "tokenStart": seg.token_start,
            "tokenEnd": seg.token_end,
            "status": "cached" if seg.token_end <= reused else "new",
            "cacheClass": seg.cache_class.value,
            "invalidation": seg.invalidation,
            "byteHash": seg.byte_hash,
            "tokenHash": seg.token_hash,
            "truncated": seg.truncated,
            **extra,
        })
    new = assembly.n_tokens - reused
    return {
        "profileId": ident.profile_id,
        "backend": ident.backend,
        "nCtx": ident.n_ctx,
        "totalTokens": assembly.n_tokens,
        "reusedTokens": reused,
        "newTokens": new,
        "residentTokens": len(resident),
        "pendingPrefillTokens": max(0, assembly.question_start
                                    - min(common, assembly.question_start)),
        "userStart": assembly.user_start,
        "stableEnd": assembly.stable_end,
        "cachedFrom": cached_from,
        "missReason": reason,
        "estimatedPrefillMs": (None if not prefill_tokens_per_s
                               else round(new / prefill_tokens_per_s * 1000.0, 1)),
        "reuseGranularity": session.reuse_granularity,
        "capabilities": dict(session.capabilities),
        # Parked prefixes kept resident beside the live one (chat, completion), in tokens.
        "branches": {b.name: b.tokens for b in session.branches()},
        # The inline-completion prompt layout this model gets: "fim" or "prefix".
        # chat formats for instruction models, "base" (a document to continue) without a
        # chat template: the profile's prompt.format, "auto" resolved by the engine
        "promptFormat": ident.prompt_format,
        # where it came from: "profile", "template" (derived from the model's chat template),
        # "family (...)", "base: no template", "base: template not usable (...)"; null: the
        # backend does not say
        "promptFormatSource": session.prompt_format_source,
        "completionMode": completion_mode,
        # "repository": FIM prompts in the model's repository layout (repository name, each
        # context file after a file separator, then the current file); else "plain"
        "completionLayout": completion_layout(completion_mode, session.fim_tokens),
        "questionCodeBound": question_code_bound or CLI_QUESTION_CODE_BOUND,
        "budget": budget.describe(beside_question(assembly)),
        "index": index,
        "segments": segments,
        "dropped": [
            {"kind": d.kind.value, "label": d.label, "cacheClass": d.cache_class.value,
             "tokens": d.full_tokens, "status": "evicted"}
            for d in assembly.dropped
        ],
    }


@dataclass(frozen=True)
class TurnMetrics:
    """What one answered turn cost (the ``metrics`` of ``contenox/ask`` and ``ask --json``)."""

    promptTokens: int
    reusedTokens: int
    newTokens: int
    restoredFromSnapshot: int
    stableTokens: int
    stableSnapshotSaved: bool
    assemblyMs: float
    prefillMs: float
    ttftMs: float
    engineTtftMs: float
    decodeTokens: int
    decodeTokensPerSecond: float
    finishReason: str | None
    missReason: str | None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, float):
                out[key] = round(value, 3)
        return out


def snapshot_entry_view(e: SnapshotEntry) -> dict[str, Any]:
    return {
        "prefixHash": e.key.prefix_hash,
        "tokens": e.key.n_tokens,
        "cacheClass": e.cache_class.value,
        "bytes": e.size_bytes,
        "label": e.label,
        "created": e.created,
        "lastUsed": e.last_used,
        "path": str(e.path),
    }
