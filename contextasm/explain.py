"""explain-context: which segments of a prompt are cached, new, truncated or evicted.

``explain`` judges each segment against the number of prompt tokens the caller's best state
(live session or loaded snapshot) actually holds; it never guesses. ``format_explain_table``
renders the plain-text view::

    system:      900 tokens   cached
    tools:      4200 tokens   cached
    diff:       2200 tokens   new
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from contextasm.assembly import Assembly
from contextasm.segments import SegmentKind

#: Row statuses. A wholly reused segment is ``cached`` even if truncated (its cut version is
#: what is resident); otherwise ``evicted`` beats ``truncated`` beats ``new``.
STATUSES = ("cached", "new", "evicted", "truncated")


@dataclass(frozen=True)
class ExplainRow:
    """One segment of the explanation (``token_start``/``token_end`` are -1 when dropped)."""

    kind: SegmentKind
    label: str
    tokens: int
    status: str
    reused: int  # tokens of this segment covered by the reused prefix
    full_tokens: int  # untruncated size (what a truncated or evicted segment would need)
    token_start: int
    token_end: int
    byte_hash: str
    token_hash: str
    prefix_hash: str
    cache_class: str
    invalidation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "label": self.label,
            "tokens": self.tokens,
            "status": self.status,
            "reused": self.reused,
            "full_tokens": self.full_tokens,
            "token_start": self.token_start,
            "token_end": self.token_end,
            "byte_hash": self.byte_hash,
            "token_hash": self.token_hash,
            "prefix_hash": self.prefix_hash,
            "cache_class": self.cache_class,
            "invalidation": self.invalidation,
        }


@dataclass(frozen=True)
class ExplainTotals:
    total: int
    reused: int
    new: int
    estimated_prefill_ms: float | None  # None without a measured prefill rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "reused": self.reused,
            "new": self.new,
            "estimated_prefill_ms": self.estimated_prefill_ms,
        }


@dataclass(frozen=True)
class Explanation:
    rows: tuple[ExplainRow, ...]
    totals: ExplainTotals

    def to_dict(self) -> dict[str, Any]:
        return {"segments": [r.to_dict() for r in self.rows], "totals": self.totals.to_dict()}


def explain(
    assembly: Assembly,
    reused_tokens: int,
    *,
    evicted: Collection[str] = (),
    prefill_tokens_per_s: float | None = None,
) -> Explanation:
    """One row per segment (plus one per segment the budget dropped) and the totals.

    ``reused_tokens``: prompt tokens the best available state holds (from
    ``Manifest.reusable_prefix``, ``Assembly.reuse_against_resident`` or a found snapshot).
    A segment is ``cached`` when wholly inside it, else ``new``; ``truncated`` when the budget
    cut it down and it is not wholly cached; ``evicted`` when the budget left it out, or when
    its prefix hash is in ``evicted`` (state that existed and was evicted, e.g.
    ``SnapshotStore.evicted_prefix_hashes()``) and it is not cached.
    """
    reused = max(0, min(reused_tokens, assembly.n_tokens))
    rows: list[ExplainRow] = []
    for seg in assembly.segments:
        covered = max(0, min(reused, seg.token_end) - seg.token_start)
        whole = covered == seg.n_tokens
        if whole:
            status = "cached"
        elif seg.prefix_hash in evicted:
            status = "evicted"
        elif seg.truncated:
            status = "truncated"
        else:
            status = "new"
        rows.append(
            ExplainRow(
                kind=seg.kind,
                label=seg.label,
                tokens=seg.n_tokens,
                status=status,
                reused=covered,
                full_tokens=seg.full_tokens,
                token_start=seg.token_start,
                token_end=seg.token_end,
                byte_hash=seg.byte_hash,
                token_hash=seg.token_hash,
                prefix_hash=seg.prefix_hash,
                cache_class=seg.cache_class.value,
                invalidation=seg.invalidation,
            )
        )
    for d in assembly.dropped:
        rows.append(
            ExplainRow(
                kind=d.kind,
                label=d.label,
                tokens=0,
                status="evicted",
                reused=0,
                full_tokens=d.full_tokens,
                token_start=-1,
                token_end=-1,
                byte_hash="",
                token_hash="",
                prefix_hash="",
                cache_class=d.cache_class.value,
                invalidation=f"{d.invalidation}; left out by the context budget "
                f"({d.full_tokens} tokens)",
            )
        )
    rows.sort(key=lambda r: (r.kind.order, r.token_start if r.token_start >= 0 else 1 << 62))
    new = assembly.n_tokens - reused
    estimate = None
    if prefill_tokens_per_s is not None and prefill_tokens_per_s > 0:
        estimate = round(new / prefill_tokens_per_s * 1000.0, 1)
    totals = ExplainTotals(
        total=assembly.n_tokens, reused=reused, new=new, estimated_prefill_ms=estimate
    )
    return Explanation(rows=tuple(rows), totals=totals)


def format_explain_table(rows: Sequence[ExplainRow], totals: ExplainTotals | None = None) -> str:
    """The plain-text table: ``<label>:  <tokens> tokens   <status>`` per row, aligned."""
    if not rows:
        return ""
    label_w = max(len(r.label) + 1 for r in rows)
    num_w = max(len(str(r.tokens)) for r in rows)
    lines = [
        f"{(r.label + ':').ljust(label_w)}  {str(r.tokens).rjust(num_w)} tokens   {r.status}"
        + _detail(r)
        for r in rows
    ]
    if totals is not None:
        line = f"total {totals.total} tokens: {totals.reused} reused, {totals.new} new"
        if totals.estimated_prefill_ms is not None:
            line += f", ~{totals.estimated_prefill_ms:.0f} ms prefill"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _detail(row: ExplainRow) -> str:
    if row.status == "evicted" and row.token_start < 0:
        return f" (left out: {row.full_tokens} tokens over budget)"
    if row.status == "truncated":
        return f" (from {row.full_tokens})"
    return ""
