"""The cache manifest: what makes a reused KV prefix valid, and how much of one is reusable.

A manifest is the profile identity (``ContextIdentity``) plus one record per segment with its
hashes and token range. Two manifests are compared to find the reusable token prefix: any
identity difference is a mandatory miss; otherwise reuse runs up to the first segment whose
tokens differ. Serialization is strict JSON: unknown or missing keys are errors.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from contextasm.errors import ManifestError
from contextasm.identity import ContextIdentity
from contextasm.segments import STABLE_KINDS, CacheClass, SegmentKind

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class SegmentRecord:
    """The manifest's view of one segment (no text, no tokens: hashes and ranges only).

    ``prefix_hash`` covers the identity digest and every token in ``[0, token_end)``: it is the
    key of the reusable prefix that ends with this segment. ``padding`` counts the neutral
    newline tokens appended to align the stable region to the cache block size.
    """

    kind: SegmentKind
    label: str
    byte_hash: str
    token_hash: str
    prefix_hash: str
    token_start: int
    token_end: int
    cache_class: CacheClass
    invalidation: str
    truncated: bool = False
    padding: int = 0

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "label": self.label,
            "byte_hash": self.byte_hash,
            "token_hash": self.token_hash,
            "prefix_hash": self.prefix_hash,
            "token_start": self.token_start,
            "token_end": self.token_end,
            "cache_class": self.cache_class.value,
            "invalidation": self.invalidation,
            "truncated": self.truncated,
            "padding": self.padding,
        }

    @classmethod
    def from_dict(cls, data: Any) -> SegmentRecord:
        d = _exact_keys(data, {f.name for f in fields(cls)}, "segment")
        try:
            kind = SegmentKind(_typed(d, "kind", str))
            cache_class = CacheClass(_typed(d, "cache_class", str))
        except ValueError as exc:
            raise ManifestError(f"manifest segment: {exc}") from None
        return cls(
            kind=kind,
            label=_typed(d, "label", str),
            byte_hash=_typed(d, "byte_hash", str),
            token_hash=_typed(d, "token_hash", str),
            prefix_hash=_typed(d, "prefix_hash", str),
            token_start=_typed(d, "token_start", int),
            token_end=_typed(d, "token_end", int),
            cache_class=cache_class,
            invalidation=_typed(d, "invalidation", str),
            truncated=_typed(d, "truncated", bool),
            padding=_typed(d, "padding", int),
        )


@dataclass(frozen=True)
class Manifest:
    """Identity + per-segment records of one assembled prompt.

    ``user_start`` is where segment I begins (everything before it can be prefilled ahead of
    the question); ``stable_end`` is the end of the highest/high region A–F, aligned to
    ``identity.block_size`` with neutral padding.
    """

    identity: ContextIdentity
    segments: tuple[SegmentRecord, ...]
    n_tokens: int
    user_start: int
    stable_end: int
    limit: int  # prompt token budget the assembly was fitted into
    max_new_tokens: int
    margin: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "segments", tuple(self.segments))
        _validate(self)

    @property
    def identity_digest(self) -> str:
        return self.identity.digest()

    def segment_at(self, token_index: int) -> SegmentRecord | None:
        """The segment holding token ``token_index`` (None past the end)."""
        for seg in self.segments:
            if seg.token_start <= token_index < seg.token_end:
                return seg
        return None

    def boundary(self, token_end: int) -> SegmentRecord | None:
        """The segment that ends exactly at ``token_end`` (a reusable prefix boundary)."""
        for seg in self.segments:
            if seg.token_end == token_end and seg.n_tokens > 0:
                return seg
        return None

    def prefix_class(self, token_end: int) -> CacheClass:
        """Cache class of the prefix ``[0, token_end)``: its least valuable segment's class."""
        classes = [s.cache_class for s in self.segments if s.token_start < token_end]
        return min(classes, key=lambda c: c.rank, default=CacheClass.HIGHEST)

    def reusable_prefix(self, other: Manifest) -> tuple[int, str]:
        """How many leading tokens of this prompt ``other``'s state holds, and why not more.

        ``other`` is the manifest of the resident or saved state. A profile difference gives
        ``(0, "profile field <name>")``; otherwise the count stops at the first segment whose
        tokens or range differ, and the reason names it.
        """
        field_name = self.identity.first_mismatch(other.identity)
        if field_name is not None:
            return 0, f"profile field {field_name}"
        for mine, theirs in zip(self.segments, other.segments, strict=False):
            if (
                mine.prefix_hash != theirs.prefix_hash
                or mine.token_start != theirs.token_start
                or mine.token_end != theirs.token_end
            ):
                if mine.label == theirs.label:
                    return mine.token_start, f"segment {mine.label} changed"
                return mine.token_start, f"segment {mine.label} replaces {theirs.label}"
        if len(self.segments) > len(other.segments):
            nxt = self.segments[len(other.segments)]
            return nxt.token_start, f"segment {nxt.label} not cached"
        if len(self.segments) < len(other.segments):
            gone = other.segments[len(self.segments)]
            return self.n_tokens, f"segment {gone.label} no longer in the prompt"
        return self.n_tokens, "identical"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "identity": self.identity.to_dict(),
            "identity_digest": self.identity_digest,
            "n_tokens": self.n_tokens,
            "user_start": self.user_start,
            "stable_end": self.stable_end,
            "limit": self.limit,
            "max_new_tokens": self.max_new_tokens,
            "margin": self.margin,
            "segments": [s.to_dict() for s in self.segments],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """Strict inverse of ``to_dict``: any unknown, missing or inconsistent field raises."""
        keys = {
            "schema_version",
            "identity",
            "identity_digest",
            "n_tokens",
            "user_start",
            "stable_end",
            "limit",
            "max_new_tokens",
            "margin",
            "segments",
        }
        d = _exact_keys(data, keys, "manifest")
        if _typed(d, "schema_version", int) != SCHEMA_VERSION:
            raise ManifestError(f"manifest schema_version {d['schema_version']} not supported")
        try:
            identity = ContextIdentity.from_dict(_typed(d, "identity", dict))
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"manifest identity: {exc}") from None
        if _typed(d, "identity_digest", str) != identity.digest():
            raise ManifestError("manifest identity_digest does not match its identity")
        segments = _typed(d, "segments", list)
        return cls(
            identity=identity,
            segments=tuple(SegmentRecord.from_dict(s) for s in segments),
            n_tokens=_typed(d, "n_tokens", int),
            user_start=_typed(d, "user_start", int),
            stable_end=_typed(d, "stable_end", int),
            limit=_typed(d, "limit", int),
            max_new_tokens=_typed(d, "max_new_tokens", int),
            margin=_typed(d, "margin", int),
        )

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ManifestError(f"manifest is not JSON: {exc}") from None
        return cls.from_dict(data)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    # Compare in chunks first: resident lists run to 100k+ tokens.
    step = 4096
    i = 0
    while i + step <= n and list(a[i : i + step]) == list(b[i : i + step]):
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _exact_keys(data: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ManifestError(f"{what} must be a JSON object")
    missing = keys - data.keys()
    unknown = data.keys() - keys
    if missing or unknown:
        raise ManifestError(f"{what}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return data


def _typed(d: dict[str, Any], key: str, typ: type) -> Any:
    value = d[key]
    # bool is an int subclass: a flag must not pass as a count or vice versa.
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise ManifestError(f"manifest field {key!r} must be {typ.__name__}")
    return value


def _validate(m: Manifest) -> None:
    pos = 0
    last_order = -1
    stable_end = 0
    user_start: int | None = None
    for seg in m.segments:
        if seg.token_start != pos or seg.token_end < seg.token_start:
            raise ManifestError(
                f"segment {seg.label}: range {seg.token_start}-{seg.token_end} not contiguous"
            )
        if seg.kind.order < last_order:
            raise ManifestError(f"segment {seg.label} is out of order")
        if not 0 <= seg.padding <= seg.n_tokens:
            raise ManifestError(f"segment {seg.label}: bad padding {seg.padding}")
        last_order = seg.kind.order
        pos = seg.token_end
        if seg.kind in STABLE_KINDS:
            stable_end = seg.token_end
        if seg.kind is SegmentKind.USER and user_start is None:
            user_start = seg.token_start
    if pos != m.n_tokens:
        raise ManifestError(f"segments cover {pos} tokens, manifest says {m.n_tokens}")
    if m.stable_end != stable_end:
        raise ManifestError(f"stable_end {m.stable_end} != end of segment F region {stable_end}")
    if m.user_start != (user_start if user_start is not None else m.n_tokens):
        raise ManifestError(f"user_start {m.user_start} is not where segment I starts")
    if m.limit < 0 or m.max_new_tokens < 0 or m.margin < 0:
        raise ManifestError("limit, max_new_tokens and margin must be >= 0")
