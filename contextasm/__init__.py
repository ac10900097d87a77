"""Backend-independent context assembly: segments, manifest, cache policy, explain-context."""

from __future__ import annotations

from contextasm.identity import ContextIdentity

__all__ = ["ContextIdentity"]
