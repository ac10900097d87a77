"""Fill-in-the-middle tokens of a model's vocabulary (backend-independent)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FimTokens:
    """The token ids a fill-in-the-middle prompt is built from (``repo``/``sep``: the
    repository-level tokens some families have, else None)."""

    prefix: int
    suffix: int
    middle: int
    repo: int | None = None
    sep: int | None = None


#: Token texts of the families whose vocabularies carry FIM tokens, for backends that can only
#: look tokens up by text (llama.cpp reads them from the GGUF vocabulary itself).
KNOWN_FIM_TEXTS: tuple[tuple[str, str, str], ...] = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder(2), Refact
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
    ("▁<PRE>", "▁<SUF>", "▁<MID>"),  # CodeLlama
)
