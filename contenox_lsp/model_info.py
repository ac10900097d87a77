"""``contenox-lsp model info``: a user's check before switching models.

The engine says what the model is (``Session.model_facts``); this adds what the server makes of
it (the inline-completion layout) and whether the profile's settings fit the model.
"""

from __future__ import annotations

import re
from typing import Any

from contenox_lsp.completion.prompt import choose_mode, completion_layout
from contextasm import get_format
from engine import Session

#: Marker texts that are special tokens in the vocabularies that have them (``<|im_start|>``,
#: ``<start_of_turn>``, ``[INST]`` is plain text and is not checked).
_SPECIAL_LOOKING = re.compile(r"<[|｜]?[A-Za-z_▁/][A-Za-z0-9_▁|｜/]*[|｜]?>")


def model_info(session: Session) -> dict[str, Any]:
    facts = dict(getattr(session, "model_facts", lambda: {})())
    facts.setdefault("description", session.model_description)
    facts.setdefault("promptFormat", session.identity.prompt_format)
    facts.setdefault("promptFormatSource", session.prompt_format_source)
    facts.setdefault("exactReuse", session.exact_reuse)
    facts["backend"] = session.backend
    mode = choose_mode(session.profile.completion_mode, session.fim_tokens)
    facts["completionMode"] = mode
    facts["completionLayout"] = completion_layout(mode, session.fim_tokens)
    facts["fits"] = _fits(facts) + _forced_settings(session)
    return facts


def _forced_settings(session: Session) -> list[str]:
    """What a profile forces that this vocabulary cannot give (the server falls back)."""
    problems = []
    profile = session.profile
    if profile.completion_mode == "fim" and session.fim_tokens is None:
        problems.append("completion.mode = \"fim\" but the vocabulary has no FIM tokens: "
                        "completions use the prefix layout")
    if profile.prompt_format != "auto":
        fmt = get_format(session.identity.prompt_format)
        for marker in sorted(set(_SPECIAL_LOOKING.findall(fmt.open + fmt.user_open + fmt.close))):
            if len(session.tokenize(marker, special=True)) != 1:
                problems.append(f"prompt.format = \"{fmt.name}\" uses {marker}, which is not a "
                                "token of this vocabulary: the model sees it as plain text")
    return problems


def _fits(facts: dict[str, Any]) -> list[str]:
    """What does not fit between the profile and the model (empty: nothing)."""
    problems = []
    trained, configured = facts.get("contextTrained"), facts.get("contextConfigured")
    if trained and configured and configured > trained:
        problems.append(f"context.n_ctx ({configured}) is beyond the {trained} positions the "
                        "model was trained on: answers degrade past them")
    source = str(facts.get("promptFormatSource") or "")
    if source.startswith(("family (", "base: template not usable")):
        problems.append(f"the chat template could not be used as is: {source}")
    exact = facts.get("exactReuse") or {}
    if exact.get("kind") == "inexact":
        problems.append(f"warm may differ from cold on this backend: {exact.get('description')}")
    if exact.get("kind") == "chunked" and "(" in str(exact.get("description", "")):
        problems.append(f"exact reuse runs the slower chunked schedule: {exact['description']}")
    return problems


def _mib(n: Any) -> str:
    return "?" if n is None else f"{n / 2**20:.1f} MiB"


def render(doc: dict[str, Any]) -> str:
    fim = doc.get("fim")
    exact = doc.get("exactReuse") or {}
    rows = [
        ("model", f"{doc.get('description')} ({doc.get('path', '?')})"),
        ("architecture", f"{doc.get('architecture', '?')}, {doc.get('layers', '?')} layers, "
                         f"{(doc.get('parameters') or 0) / 1e6:.0f}M parameters"),
        ("context", f"{doc.get('contextConfigured', '?')} positions configured, "
                    f"{doc.get('contextTrained', '?')} trained; sliding window "
                    f"{doc.get('slidingWindow') or 'none'}"),
        ("chat format", f"{doc.get('promptFormat')} ({doc.get('promptFormatSource')})"),
        ("completion", f"{doc.get('completionMode')} ({doc.get('completionLayout')} layout)" + (
            "" if not fim else " — FIM " + " ".join(
                f"{k}={v}" for k, v in fim.items() if v is not None))),
        ("stops", ", ".join(str(t) for t in doc.get("endOfGeneration", [])) or "—"),
        ("BOS", f"{(doc.get('bos') or {}).get('token')} ({(doc.get('bos') or {}).get('policy')})"),
        ("KV memory", f"{doc.get('kvBytesPerToken', '?')} bytes a token, "
                      f"{_mib(doc.get('kvBytesPerSequence'))} a sequence, "
                      f"{_mib(doc.get('kvBytesAllSequences'))} for all "
                      f"{doc.get('sequences', '?')} (live + parked branches)"),
        ("exact reuse", str(exact.get("description", "—")) + (
            f"; snapshots past the sliding window: {exact['snapshotsPastWindow']}"
            if exact.get("snapshotsPastWindow") else "")),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += [f"{'fits'.ljust(width)}  " + ("yes" if not doc["fits"] else doc["fits"][0])]
    lines += [" " * (width + 2) + p for p in doc["fits"][1:]]
    return "\n".join(lines)
