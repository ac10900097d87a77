"""Child process of the backends section: one backend runs the plan's steps.

``python -m contenox_bench.backends_child --profile P.toml --plan plan.json --out r.json``

Each backend runs in a process of its own so that its peak memory is its own (VmHWM of this
process, written to the result at exit; the parent also reads it from ``/proc/<pid>/status`` at
every step). The child loads the profile's model, warms it up on the plan's warm-up prompt,
then for each step assembles the step's inputs through its session (so the token ids are the
assembler's for this backend), prefills them and generates. Progress goes to stdout as
``PROGRESS`` lines for the parent's bar; logs go to stderr; the result (timings, token ids,
greedy output) goes to ``--out``, also when a step fails (with ``error`` set, exit status 1).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRESS = "@@contenox-bench-progress "

log = logging.getLogger("contenox.bench.backends")


def proc_status_bytes(field: str, pid: str = "self") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``: peak RSS, ``VmRSS``) in bytes."""
    try:
        text = Path(f"/proc/{pid}/status").read_text("utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            parts = line.split()
            try:
                return int(parts[1]) * 1024
            except (IndexError, ValueError):
                return None
    return None


def finish_child(phase: Callable[[], None], result: dict[str, Any], out: str,
                 failed: tuple[logging.Logger, str], rss_key: str) -> int:
    """A child process's end: run ``phase`` (it fills ``result``); a failure becomes
    ``result["error"]`` (logged on ``failed``'s logger with its message) and exit status 1;
    the peak RSS goes under ``rss_key``; ``result`` is written to ``out`` either way."""
    rc = 0
    try:
        phase()
    except Exception as exc:
        failed[0].exception(failed[1])
        result["error"] = f"{type(exc).__name__}: {exc}"
        rc = 1
    result[rss_key] = proc_status_bytes("VmHWM")
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return rc


def _progress(label: str) -> None:
    sys.stdout.write(PROGRESS + label + "\n")
    sys.stdout.flush()


def run(profile: Any, plan: dict[str, Any], result: dict[str, Any]) -> None:
    from contenox_bench.backends_plan import PromptSpec, Step, build_inputs
    from contextasm.assembly import assemble
    from engine import open_session

    steps = [Step.from_dict(d) for d in plan["steps"]]
    max_new = int(plan["max_new_tokens"])
    t0 = time.perf_counter()
    with open_session(profile) as session:
        result["load_s"] = time.perf_counter() - t0
        result["model"] = str(getattr(session, "model_description", profile.model))
        result["rss_after_load_bytes"] = proc_status_bytes("VmRSS")
        # Warm-up on a prompt no step shares a block with (OpenVINO compiles kernels on its
        # first inference and grows its KV cache; llama.cpp's first large batch is slower).
        t0 = time.perf_counter()
        warm = assemble(build_inputs(PromptSpec.from_dict(plan["warmup"])), session,
                        session.identity, max_new_tokens=max_new)
        session.prefill(warm.tokens)
        session.generate(2)
        result["warmup_ms"] = (time.perf_counter() - t0) * 1000.0
        result["warmup_tokens"] = len(warm.tokens)
        _progress(f"{session.backend} loaded")
        for step in steps:
            asm = assemble(build_inputs(step.prompt), session, session.identity,
                           max_new_tokens=max_new)
            r = session.prefill(asm.tokens)
            g = session.generate(step.max_tokens)
            result["steps"][step.key] = {
                "kind": step.kind,
                "prompt_tokens": len(asm.tokens),
                "stable_end": asm.stable_end,
                "reused_tokens": r.reused_tokens,
                "new_tokens": r.new_tokens,
                "prefill_ms": r.prefill_ms,
                "ttft_ms": g.ttft_ms,
                "decode_tokens": g.decode_tokens,
                "decode_tok_s": g.decode_tok_s,
                "output": list(g.tokens),
            }
            result["prompt_ids"][step.key] = list(asm.tokens)
            _progress(f"{session.backend} {step.key}")
        result["rss_end_bytes"] = proc_status_bytes("VmRSS")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m contenox_bench.backends_child")
    ap.add_argument("--profile", required=True, help="profile TOML (backend, model, sizes)")
    ap.add_argument("--plan", required=True, help="plan JSON written by the backends section")
    ap.add_argument("--out", required=True, help="result JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Known llama.cpp notices (the full-size SWA cache) are not news here.
    logging.getLogger("contenox.llama_cpp").setLevel(logging.ERROR)

    from engine import load_profile

    result: dict[str, Any] = {"steps": {}, "prompt_ids": {}}

    def phase() -> None:
        profile = load_profile(args.profile)
        result["backend"] = profile.backend
        run(profile, json.loads(Path(args.plan).read_text("utf-8")), result)

    return finish_child(phase, result, args.out, (log, "backend child failed"),
                        "peak_rss_self_bytes")


if __name__ == "__main__":
    raise SystemExit(main())
