"""The key of a reusable prefix: identity + prefix hash + length."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class SnapshotKey:
    """Identifies a KV prefix: the profile identity's digest, the prefix hash (over that digest
    and the prefix's tokens) and the number of tokens. Equal keys mean interchangeable state."""

    identity_digest: str
    prefix_hash: str
    n_tokens: int

    def to_dict(self) -> dict[str, str | int]:
        return {
            "identity_digest": self.identity_digest,
            "prefix_hash": self.prefix_hash,
            "n_tokens": self.n_tokens,
        }
