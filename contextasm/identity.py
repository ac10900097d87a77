"""The identity of a KV state: everything that must match for cached tokens to be reusable.

Byte-identical text is not enough for a KV hit: the same tokens under another model, tokenizer,
template, BOS policy, KV type or RoPE setting produce different attention state. The engine
stamps every resident prefix and every snapshot with a ``ContextIdentity`` and refuses reuse
when any field differs (a mandatory miss, never a silent reuse).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ContextIdentity:
    """Profile-level half of the cache manifest (the per-segment half lives in the manifest)."""

    profile_id: str
    backend: str
    backend_version: str
    model_digest: str
    tokenizer_digest: str
    chat_template_digest: str
    prompt_format: str
    bos_policy: str
    n_ctx: int
    rope_freq_base: float
    rope_freq_scale: float
    rope_scaling_type: str
    type_k: str
    type_v: str
    flash_attn: str
    swa_full: bool
    block_size: int

    def first_mismatch(self, other: ContextIdentity) -> str | None:
        """Name of the first field that differs from ``other``, or None when compatible."""
        for f in fields(self):
            if getattr(self, f.name) != getattr(other, f.name):
                return f.name
        return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextIdentity:
        """Strict inverse of ``to_dict``: missing or unknown keys raise ``ValueError``."""
        names = {f.name for f in fields(cls)}
        missing = names - data.keys()
        unknown = data.keys() - names
        if missing or unknown:
            raise ValueError(
                f"context identity: missing {sorted(missing)}, unknown {sorted(unknown)}"
            )
        return cls(**{name: data[name] for name in names})

    def digest(self) -> str:
        """Stable sha256 over all fields (canonical JSON), identical across processes."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()
