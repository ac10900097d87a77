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
    answer_cue: str = ""  # after the question: what a base model continues from
    stop: tuple[str, ...] = ()  # text that ends the answer, besides the model's end token
    opening: tuple[str, ...] = ()  # stops that may also open an answer (engine.results.drain)
    tools: bool = True  # whether segment B's tool schemas mean anything to the model


PROMPT_FORMATS: dict[str, PromptFormat] = {
    "raw": PromptFormat(name="raw", open="", user_open="", close=""),
    # For a base model (no chat template): a document it continues. The question ends in an
    # answer cue; the answer ends where the document would go on (a new question, a heading).
    "base": PromptFormat(
        name="base", open="", user_open="", close="", answer_cue="Answer:",
        stop=("\nQuestion:", "\nAnswer:", "\n# ", "\n```", "\n\n\n"),
        opening=("\n```", "\n\n\n"), tools=False,
    ),
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

#: The profile value that picks the format from the model's chat template.
AUTO_FORMAT = "auto"

# Marker text of each chat template family → its format (checked in order).
_TEMPLATE_MARKERS = (
    ("<start_of_turn>", "gemma"),
    ("<|start_header_id|>", "llama3"),
    ("<|im_start|>", "chatml"),
)


def detect_prompt_format(chat_template: str | None) -> str:
    """The format for a model's chat template: its family's markers, or ``base`` when the
    model has no template (a base model) or one of a family not known here."""
    if chat_template:
        for marker, name in _TEMPLATE_MARKERS:
            if marker in chat_template:
                return name
    return "base"


def resolve_prompt_format(configured: str, chat_template: str | None) -> str:
    """``configured`` unless it is ``auto``; then ``detect_prompt_format``."""
    return detect_prompt_format(chat_template) if configured == AUTO_FORMAT else configured


def register_format(fmt: PromptFormat) -> None:
    """Make a format derived at run time (``contextasm.templates``) known by its name. A name
    is a digest of the markers, so registering it again is harmless."""
    PROMPT_FORMATS.setdefault(fmt.name, fmt)


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
