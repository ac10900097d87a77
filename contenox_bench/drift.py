"""Section "drift": how far warm output is from cold output, per reuse path and reuse mode.

For each reuse path (live longest-common-prefix reuse after another answer, branch restore,
snapshot restore into a busy session, resume after a cancelled prefill, a follow-up that
repeats the previous answer) the warm run is compared with a cold run of the same full prompt
on the same session: whether the first sampled token agrees, how many of ``N`` greedy tokens
are identical before the first difference, and the largest absolute difference of the first
position's logits. Measured under exact reuse (the default: expected 0 everywhere) and with
``cache.exact_reuse = false`` (token-granular reuse on one shared KV pool, round 1's engine),
so the report shows what exact reuse buys on this machine's kernels.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contenox_bench import applicable
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import read_stdlib
from contenox_bench.progress import Progress
from engine import CancelledError, Session, open_session
from engine.profile import Profile

MODES = (("exact reuse", True), ("token-granular", False))
TEXT_FILES = ("json/decoder.py", "textwrap.py")


def planned_units(cfg: BenchConfig) -> int:
    return len(PATHS) * len(MODES)


def run(profile: Profile, cfg: BenchConfig, progress: Progress) -> dict[str, Any]:
    if profile.backend != applicable.BARE_LOOP_BACKEND:
        return {"status": applicable.not_applicable(
            "the reuse modes compared here are llama.cpp's (cache.exact_reuse)")}
    text = "".join(t for _, t in read_stdlib(TEXT_FILES))
    modes = []
    for label, exact in MODES:
        prof = profile.with_overrides({"cache.exact_reuse": exact}, source="bench drift")
        with open_session(prof) as session:
            rows = [_measure(session, path, text, cfg, prof.n_batch, progress)
                    for path in PATHS]
            modes.append({"mode": label, "exact_reuse": exact,
                          "reuse_granularity": session.reuse_granularity,
                          "schedule": session.exact_reuse, "rows": rows})
    return {"status": "ok", "n_tokens": cfg.drift_tokens, "prefix_tokens": cfg.drift_prefix,
            "modes": modes}


def _measure(s: Session, path: str, text: str, cfg: BenchConfig, n_batch: int,
             progress: Progress) -> dict[str, Any]:
    base = s.tokenize(text, add_bos=True)
    prefix = base[: cfg.drift_prefix]
    question = s.tokenize("\n# In one sentence, the code above:\n")
    warm_fn, full = _PATHS[path](s, base, prefix, question, n_batch)
    s.reset()
    s.prefill(full)
    cold = _read(s, cfg.drift_tokens)
    s.reset()
    reused = warm_fn()
    warm = _read(s, cfg.drift_tokens)
    progress.step(f"drift: {path}")
    same = 0
    for a, b in zip(warm[1], cold[1], strict=False):
        if a != b:
            break
        same += 1
    return {
        "path": path,
        "prompt_tokens": len(full),
        "reused_tokens": reused,
        "first_token_agrees": bool(warm[1][:1] == cold[1][:1]),
        "identical_prefix": same,
        "max_abs_dlogit": max(abs(x - y) for x, y in zip(warm[0], cold[0], strict=True)),
    }


def _read(s: Session, n: int) -> tuple[list[float], list[int]]:
    logits = list(s.next_token_logits())  # type: ignore[attr-defined]
    return logits, s.generate(max_tokens=n).tokens


Warm = tuple[Callable[[], int], list[int]]


def _live(s: Session, base: list[int], prefix: list[int], q: list[int],
          n_batch: int) -> Warm:
    def warm() -> int:
        s.prefill(prefix + s.tokenize("\n# something else\n"))
        s.generate(max_tokens=8)
        return s.prefill(prefix + q).reused_tokens
    return warm, prefix + q


def _follow_up(s: Session, base: list[int], prefix: list[int], q: list[int],
               n_batch: int) -> Warm:
    s.reset()
    s.prefill(prefix)
    answer = s.generate(max_tokens=12).tokens
    full = prefix + answer + q

    def warm() -> int:
        s.prefill(prefix)
        s.generate(max_tokens=12)
        return s.prefill(full).reused_tokens
    return warm, full


def _branch(s: Session, base: list[int], prefix: list[int], q: list[int],
            n_batch: int) -> Warm:
    def warm() -> int:
        s.prefill(prefix)
        s.branch_save("drift")
        s.prefill(base[:1] + base[len(prefix) // 2 : len(prefix) // 2 + len(prefix)])
        reused = s.prefill(prefix + q).reused_tokens
        s.branch_drop("drift")
        return reused
    return warm, prefix + q


def _snapshot(s: Session, base: list[int], prefix: list[int], q: list[int],
              n_batch: int) -> Warm:
    def warm() -> int:
        s.prefill(prefix)
        with tempfile.TemporaryDirectory(prefix="contenox-drift-") as tmp:
            snap = Path(tmp) / "prefix.snap"
            s.save_snapshot(snap)
            s.prefill(base[:1] + base[len(prefix) :][:200])
            s.load_snapshot(snap)
        return s.prefill(prefix + q).reused_tokens
    return warm, prefix + q


def _cancel(s: Session, base: list[int], prefix: list[int], q: list[int],
            n_batch: int) -> Warm:
    full = base[: n_batch + len(q) + 37]

    def warm() -> int:
        real = s._decode_fn  # type: ignore[attr-defined]
        calls = {"n": 0}

        def cancel_second(ctx: Any, batch: Any) -> int:
            calls["n"] += 1
            if calls["n"] == 2:
                s.cancel()
            return int(real(ctx, batch))

        s._decode_fn = cancel_second  # type: ignore[attr-defined]
        try:
            s.prefill(full)
        except CancelledError:
            pass
        finally:
            s._decode_fn = real  # type: ignore[attr-defined]
        return s.prefill(full).reused_tokens
    return warm, full


_PATHS: dict[str, Callable[..., Warm]] = {
    "live prefix": _live,
    "follow-up": _follow_up,
    "branch": _branch,
    "snapshot": _snapshot,
    "cancel resume": _cancel,
}
PATHS = tuple(_PATHS)
