"""Summaries of repeated measurements: every figure carries n, median, min, max and samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def summary(samples: Sequence[float], unit: str) -> dict[str, Any]:
    """``{n, median, min, max, unit, samples}``; an empty list gives n = 0 and nulls."""
    xs = [float(x) for x in samples]
    if not xs:
        return {"n": 0, "median": None, "min": None, "max": None, "unit": unit, "samples": []}
    return {
        "n": len(xs),
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "unit": unit,
        "samples": [round(x, 4) for x in xs],
    }


def quantile(values: Sequence[float], q: float) -> float | None:
    """The sample at quantile ``q`` (0..1) of ``values`` (the nearest one, no interpolation);
    None for no samples."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def engine_costs(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """(ms per prefilled token, ms per decoded token after the first): the medians over
    in-process measurements (``prefill_ms``, ``new_tokens``, ``decode_ms``, ``decode_tokens``);
    0.0 where there is nothing to measure."""
    per_token = [x["prefill_ms"] / x["new_tokens"] for x in rows if x["new_tokens"]]
    per_decode = [x["decode_ms"] / (x["decode_tokens"] - 1) for x in rows
                  if x["decode_tokens"] > 1]
    return quantile(per_token, 0.5) or 0.0, quantile(per_decode, 0.5) or 0.0


def expected_ms(new_tokens: float, decode_tokens: float, costs: tuple[float, float]) -> float:
    """What prefilling ``new_tokens`` and decoding ``decode_tokens`` costs the engine."""
    return new_tokens * costs[0] + max(0.0, decode_tokens - 1) * costs[1]


def median(stat: dict[str, Any]) -> float | None:
    value = stat.get("median")
    return None if value is None else float(value)


def ratio(num: float | None, den: float | None) -> float | None:
    """num / den, or None when either side is missing or the denominator is zero."""
    if num is None or den is None or den == 0:
        return None
    return num / den


def check(ok: bool | None) -> str:
    """A warm == cold check as recorded in the report."""
    if ok is None:
        return "n/a"
    return "pass" if ok else "fail"


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (None when equal) — recorded with failed checks."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
