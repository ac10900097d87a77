"""Prompt formats: the turn markers that wrap the segments.

Markers live only in fixed segments: the opening markers (and BOS) at the start of segment A,
the closing and assistant-turn markers at the end of segment I (with, for formats that have a
separate user role, the switch to the user turn at the start of I). Everything between is plain
content, so a marker can never move a segment boundary, and every context segment B–H sits in
one turn. Markers are tokenized with special-token parsing on; content never is, so text in a
file that looks like ``<start_of_turn>`` cannot forge a turn.
"""

from __future__ import annotations

from dataclasses import dataclass

from contextasm.errors import InvalidInputError, UnknownPromptFormatError


@dataclass(frozen=True)
class PromptFormat:
    """Marker texts of one prompt format (all tokenized with ``special=True``)."""

    name: str
    open: str  # start of segment A, after BOS
    user_open: str  # start of segment I (closes the context turn, opens the user turn)
    close: str  # end of segment I (closes the user turn, opens the model's turn)


PROMPT_FORMATS: dict[str, PromptFormat] = {
    "raw": PromptFormat(name="raw", open="", user_open="", close=""),
    "chatml": PromptFormat(
        name="chatml",
        open="<|im_start|>system\n",
        user_open="<|im_end|>\n<|im_start|>user\n",
        close="<|im_end|>\n<|im_start|>assistant\n",
    ),
    # Gemma has no system role: the context and the question share the one user turn.
    "gemma": PromptFormat(
        name="gemma",
        open="<start_of_turn>user\n",
        user_open="",
        close="<end_of_turn>\n<start_of_turn>model\n",
    ),
    # <|begin_of_text|> is Llama 3's BOS token: it comes from bos_policy "add", not from text.
    "llama3": PromptFormat(
        name="llama3",
        open="<|start_header_id|>system<|end_header_id|>\n\n",
        user_open="<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n",
        close="<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
}

BOS_POLICIES = ("add", "none")


def get_format(name: str) -> PromptFormat:
    """The prompt format called ``name``; an unknown name is an error, never a fallback."""
    try:
        return PROMPT_FORMATS[name]
    except KeyError:
        raise UnknownPromptFormatError(
            f"unknown prompt format {name!r}",
            data={"prompt_format": name, "known": sorted(PROMPT_FORMATS)},
        ) from None


def check_bos_policy(policy: str) -> None:
    if policy not in BOS_POLICIES:
        raise InvalidInputError(
            f"unknown BOS policy {policy!r}",
            data={"bos_policy": policy, "known": list(BOS_POLICIES)},
        )
