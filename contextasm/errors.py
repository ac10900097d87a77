"""Structured errors of context assembly.

Every error carries a stable machine-readable ``code`` and a ``data`` dict so the LSP server can
forward it as a JSON-RPC error payload and the CLI can print it, without parsing messages.
"""

from __future__ import annotations

from typing import Any


class ContextAsmError(Exception):
    """Base class: ``code`` is a stable identifier, ``data`` holds the numbers behind it."""

    code: str = "context_error"

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": dict(self.data)}


class ContextOverflowError(ContextAsmError):
    """The segments that may not be shrunk (highest class + the user turn) exceed the budget.

    ``data``: ``requested`` (tokens the minimal prompt needs), ``limit`` (prompt budget),
    ``n_ctx``, ``max_new_tokens``, ``margin``.
    """

    code = "context_overflow"


class UnknownPromptFormatError(ContextAsmError):
    """The profile names a prompt format this package does not know (never a silent fallback)."""

    code = "unknown_prompt_format"


class InvalidInputError(ContextAsmError):
    """An input value is out of range (bad pin range, unknown BOS policy, negative budget...)."""

    code = "invalid_input"


class TokenizerMismatchError(ContextAsmError):
    """The tokenizer handed to ``assemble`` is not the one the identity was stamped with."""

    code = "tokenizer_mismatch"


class ManifestError(ContextAsmError):
    """A serialized manifest is malformed (strict parsing: unknown/missing keys, bad ranges)."""

    code = "invalid_manifest"


class SnapshotStoreError(ContextAsmError):
    """The snapshot store could not complete an operation (I/O failure of the writer...)."""

    code = "snapshot_store"
