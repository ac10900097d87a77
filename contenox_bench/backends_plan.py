"""Prompts and schedule of the backends section: one plan, run unchanged by each backend.

A prompt is a ``PromptSpec`` — a nonce, how many pinned lines, which code around the cursor
and how many lines of it — and
``build_inputs`` turns it into the same ``ContextInputs`` in any process (the text is the
running interpreter's standard library). Each backend's child assembles those inputs through
its own session, so the token ids it feeds its model are the assembler's, and the parent
checks they are identical on both backends.

The nonce opens the system prompt (segment A), so a prompt with a fresh nonce shares no whole
KV block — and on llama.cpp no more than the few format tokens before it — with anything
prefilled earlier: that is what "cold" means here, on both backends. The changed suffix is the
user turn (segment I: code around the cursor from another file, and the question), the part of
every request that is new.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from contenox_bench.config import BenchConfig
from contenox_bench.corpus import (
    CHANGE_FILES,
    STABLE_FILES,
    SYSTEM_TEXT,
    read_stdlib,
    repo_map_text,
)
from contextasm.inputs import ContextInputs, Pin, RepoMap, UserTurn

#: Lines of the repo map kept in every prompt (a small fixed segment; the pins fill the rest).
MAP_LINES = 16
QUESTION = "What does this code do?"
#: Variants of the changed suffix: the warm row primes with one and measures the other.
PRIME_VARIANT, WARM_VARIANT = 1, 2
KINDS = ("cold", "prime", "warm", "cold_same")


@dataclass(frozen=True)
class PromptSpec:
    nonce: int
    pin_lines: int  # lines of the pinned files (segment F), in STABLE_FILES order
    variant: int  # which CHANGE_FILES file the code around the cursor (segment I) comes from
    cursor_lines: int  # lines of it

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PromptSpec:
        return cls(int(d["nonce"]), int(d["pin_lines"]), int(d["variant"]),
                   int(d["cursor_lines"]))


@dataclass(frozen=True)
class Step:
    """One request of the schedule: prefill the prompt, then generate ``max_tokens``."""

    key: str  # unique within the schedule
    kind: str  # one of KINDS
    prompt: PromptSpec
    max_tokens: int
    size: int = 0  # nominal prompt size of a cold row

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        return cls(str(d["key"]), str(d["kind"]), PromptSpec.from_dict(d["prompt"]),
                   int(d["max_tokens"]), int(d.get("size", 0)))


@dataclass(frozen=True)
class SizePlan:
    """Line counts that give the mode's token sizes (found with one tokenizer, see ``fit``)."""

    warm_pin_lines: int
    cursor_lines: int
    cold_pin_lines: tuple[tuple[int, int], ...]  # (nominal size, pin lines)
    warmup_pin_lines: int = 0  # the warm-up prompt: as long as the longest cold one

    def to_dict(self) -> dict[str, Any]:
        return {"warm_pin_lines": self.warm_pin_lines, "cursor_lines": self.cursor_lines,
                "warmup_pin_lines": self.warmup_pin_lines,
                "cold_pin_lines": {str(k): v for k, v in self.cold_pin_lines}}


@functools.cache
def _stable_lines() -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((n, tuple(t.splitlines(keepends=True))) for n, t in read_stdlib(STABLE_FILES))


@functools.cache
def _change_files() -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((n, tuple(t.splitlines())) for n, t in read_stdlib(CHANGE_FILES))


@functools.cache
def _repo_map() -> str:
    lines = repo_map_text().split("\n")[2:]  # without its "# Repository map" title
    return "\n".join(lines[:MAP_LINES]) + "\n"


def max_pin_lines() -> int:
    return sum(len(lines) for _, lines in _stable_lines())


def max_cursor_lines() -> int:
    files = _change_files()
    if not files:
        return 0
    return min(len(files[v % len(files)][1]) for v in (PRIME_VARIANT, WARM_VARIANT))


def pins(n_lines: int) -> tuple[Pin, ...]:
    """The first ``n_lines`` lines of STABLE_FILES, one pin per file."""
    out: list[Pin] = []
    left = n_lines
    for name, lines in _stable_lines():
        if left <= 0:
            break
        k = min(left, len(lines))
        if k:
            out.append(Pin(name, 1, k, "".join(lines[:k])))
        left -= k
    return tuple(out)


def cursor_context(variant: int, n_lines: int) -> str | None:
    """The first ``n_lines`` lines of one CHANGE_FILES file (None for none)."""
    files = _change_files()
    if n_lines <= 0 or not files:
        return None
    return "\n".join(files[variant % len(files)][1][:n_lines]) + "\n"


def nonce_text(nonce: int) -> str:
    """Six digits, the last digit of ``nonce`` first: consecutive nonces differ at the first
    digit, so a new prompt shares nothing after the format tokens with the previous one."""
    return f"{nonce % 1_000_000:06d}"[::-1]


def build_inputs(spec: PromptSpec) -> ContextInputs:
    """The same inputs in every process: stable prefix A–F, then the user turn."""
    return ContextInputs(
        system_prompt=f"#{nonce_text(spec.nonce)}. {SYSTEM_TEXT.strip()}",
        repo_map=RepoMap(_repo_map(), "bench-backends-map"),
        pins=pins(spec.pin_lines),
        user=UserTurn(question=QUESTION,
                      cursor_context=cursor_context(spec.variant, spec.cursor_lines)),
    )


def largest_at_most(f: Callable[[int], int], target: int, lo: int, hi: int) -> int:
    """Largest ``k`` in ``[lo, hi]`` with ``f(k) <= target`` for a non-decreasing ``f``
    (``lo`` when even ``f(lo)`` is over). Gallops up from ``lo``, then bisects: few calls of
    ``f`` when the answer is small, and never a call far beyond it."""
    if hi <= lo or f(lo) > target:
        return lo
    good, step = lo, 1
    while True:
        probe = min(hi, good + step)
        if f(probe) > target:
            bad = probe
            break
        good = probe
        if probe == hi:
            return hi
        step *= 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if f(mid) <= target:
            good = mid
        else:
            bad = mid
    return good


#: ``count(spec) -> (prompt tokens, stable_end)`` of the assembled prompt.
Counter = Callable[[PromptSpec], tuple[int, int]]


def fit(count: Counter, cfg: BenchConfig) -> SizePlan:
    """Line counts for the mode's sizes: the warm row's stable prefix (A–F, block-aligned) at
    most ``backends_prefix`` tokens and its changed suffix (the user turn) at most
    ``backends_suffix``; each cold row's whole prompt at most its nominal size."""
    pin_hi, cursor_hi = max_pin_lines(), max_cursor_lines()
    warm_pins = largest_at_most(
        lambda k: count(PromptSpec(0, k, WARM_VARIANT, 1))[1], cfg.backends_prefix, 1, pin_hi)

    def suffix(d: int) -> int:
        total, stable = count(PromptSpec(0, warm_pins, WARM_VARIANT, d))
        return total - stable

    cursor_lines = largest_at_most(suffix, cfg.backends_suffix, 1, cursor_hi)
    cold = tuple(
        (size, largest_at_most(
            lambda k: count(PromptSpec(0, k, PRIME_VARIANT, cursor_lines))[0], size, 1, pin_hi))
        for size in cfg.backends_cold_sizes
    )
    return SizePlan(warm_pin_lines=warm_pins, cursor_lines=cursor_lines, cold_pin_lines=cold,
                    warmup_pin_lines=max((k for _, k in cold), default=warm_pins))


def warmup(plan: SizePlan) -> PromptSpec:
    """The warm-up prompt (nonce 0, never used by a step): as long as the longest cold prompt,
    so that OpenVINO's first-inference compilation and its KV cache growth, and llama.cpp's
    first large batch, are not charged to the first measured request."""
    return PromptSpec(0, plan.warmup_pin_lines, PRIME_VARIANT, plan.cursor_lines)


def schedule(plan: SizePlan, cfg: BenchConfig) -> list[Step]:
    """Every request of one backend, in order; each cold prompt has a nonce of its own.

    - ``cold``: per nominal size, ``cold_reps`` prompts under fresh nonces (prefill tokens/s).
    - per repetition of the warm row: ``prime`` (stable prefix + suffix variant 1, a cold
      request itself), then ``warm`` (same nonce, suffix variant 2: only the suffix is new;
      it also decodes ``decode_tokens``), then ``cold_same`` (the warm prompt under a fresh
      nonce: the cold TTFT of the same prompt).
    """
    nonce = 0

    def fresh() -> int:
        nonlocal nonce
        nonce += 1
        return nonce

    greedy = max(1, cfg.greedy_tokens)
    steps: list[Step] = []
    for size, pin_lines in plan.cold_pin_lines:
        for rep in range(cfg.cold_reps):
            steps.append(Step(f"cold_{size}_r{rep}", "cold",
                              PromptSpec(fresh(), pin_lines, PRIME_VARIANT, plan.cursor_lines),
                              1, size))
    for rep in range(cfg.reps):
        n = fresh()
        steps.append(Step(f"prime_r{rep}", "prime",
                          PromptSpec(n, plan.warm_pin_lines, PRIME_VARIANT, plan.cursor_lines), 1))
        steps.append(Step(f"warm_r{rep}", "warm",
                          PromptSpec(n, plan.warm_pin_lines, WARM_VARIANT, plan.cursor_lines),
                          max(greedy, cfg.decode_tokens)))
        steps.append(Step(f"cold_same_r{rep}", "cold_same",
                          PromptSpec(fresh(), plan.warm_pin_lines, WARM_VARIANT, plan.cursor_lines),
                          greedy))
    return steps


def n_steps(cfg: BenchConfig) -> int:
    return len(cfg.backends_cold_sizes) * cfg.cold_reps + 3 * cfg.reps
