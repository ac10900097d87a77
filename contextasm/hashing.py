"""Canonical hashes: identical inputs give identical hex digests on every machine and process.

Token ids are packed as little-endian signed 32-bit integers, so the hash of a token list never
depends on the platform's byte order or on Python's ``hash()`` randomization.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence


def text_hash(text: str) -> str:
    """sha256 of the UTF-8 bytes of ``text``."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """The canonical byte encoding of a token list (little-endian int32)."""
    return struct.pack(f"<{len(tokens)}i", *tokens)


def token_hash(tokens: Sequence[int]) -> str:
    """sha256 of the canonical encoding of ``tokens``."""
    return hashlib.sha256(pack_tokens(tokens)).hexdigest()


def pieces_hash(pieces: Iterable[tuple[str, bool]]) -> str:
    """sha256 over (text, special-flag) pieces, length-prefixed so piece borders count."""
    h = hashlib.sha256()
    for text, special in pieces:
        data = text.encode("utf-8")
        h.update(b"S" if special else b"P")
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


class PrefixHasher:
    """Running hash over an identity digest followed by every token so far.

    ``digest()`` after feeding the tokens ``[0, n)`` is the key of the reusable prefix of
    length ``n``: equal only for the same identity and the same token ids.
    """

    def __init__(self, identity_digest: str) -> None:
        self._h = hashlib.sha256()
        self._h.update(b"contenox-prefix-v1\0")
        self._h.update(identity_digest.encode("ascii"))
        self._h.update(b"\0")

    def update(self, tokens: Sequence[int]) -> None:
        self._h.update(pack_tokens(tokens))

    def digest(self) -> str:
        return self._h.copy().hexdigest()


def prefix_hash(identity_digest: str, tokens: Sequence[int]) -> str:
    """Prefix key of ``tokens`` under the identity with ``identity_digest`` (one-shot form)."""
    hasher = PrefixHasher(identity_digest)
    hasher.update(tokens)
    return hasher.digest()
