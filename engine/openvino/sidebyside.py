"""Side-by-side measurement: one assembler, one prompt, both backends.

``python -m engine.openvino.sidebyside --ov-model-dir DIR --out result.json``

For each backend (llama.cpp on the embedded GGUF, OpenVINO on its converted IR) and each of
``--reps`` repetitions, with a per-repetition nonce in the system prompt so the first request
of a repetition is really cold:

- cold: prefill the assembled prompt, generate 1 token → TTFT;
- warm (diff change): the same workspace with another diff → TTFT, reused tokens;
- warm (user change): another question → TTFT, reused tokens;

then a 32-token greedy decode for tokens/s and the greedy text of the first cold prompt. The
assembler's token lists are checked identical across backends. Results go to ``--out`` (JSON)
and a summary to stderr; nothing is printed to stdout.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from contextasm.assembly import assemble
from contextasm.inputs import ContextInputs, Pin, RepoInstructions, RepoMap, UserTurn
from engine import open_session
from engine.profile import default_profile

ROOT = Path(__file__).resolve().parents[2]


def _inputs(nonce: int, diff_variant: int, question: str) -> ContextInputs:
    src = (ROOT / "engine" / "llama" / "session.py").read_text().splitlines(keepends=True)
    pin_text = "".join(src[:220])
    readme = (ROOT / "README.md").read_text()
    repo_map = "\n".join(f"{p.relative_to(ROOT)}:" for p in sorted((ROOT / "engine").rglob("*.py")))
    diff = (
        "--- a/engine/session.py\n+++ b/engine/session.py\n@@ -60,3 +60,3 @@\n"
        f"-    profile = profile or load_profile(None)\n+    profile = profile or load_profile("
        f"{diff_variant})\n"
    )
    return ContextInputs(
        system_prompt=f"You are a careful coding assistant (session {nonce}).",
        repo_instructions=RepoInstructions(readme[:6000], "README.md"),
        repo_map=RepoMap(repo_map, f"map-{nonce}"),
        pins=(Pin("engine/llama/session.py", 1, 220, pin_text),),
        diff=diff,
        user=UserTurn(question=question),
    )


def _turn(session: Any, inputs: ContextInputs, max_tokens: int = 1) -> dict[str, Any]:
    asm = assemble(inputs, session, session.identity, max_new_tokens=32)
    r = session.prefill(asm.tokens)
    g = session.generate(max_tokens)
    return {
        "tokens": len(asm.tokens),
        "stable_end": asm.stable_end,
        "reused": r.reused_tokens,
        "new": r.new_tokens,
        "prefill_ms": round(r.prefill_ms, 1),
        "ttft_ms": round(g.ttft_ms, 1),
        "_prompt": asm.tokens,
        "_out": g.tokens,
        "_text": g.text,
        "_tok_s": g.decode_tok_s,
    }


def measure(profile: Any, reps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    session = open_session(profile)
    load_s = time.perf_counter() - t0
    try:
        # Warm-up (first inference compiles kernels on OpenVINO), unrelated to the prompts.
        session.prefill(session.tokenize("Hello there.", add_bos=True))
        session.generate(2)
        runs: list[dict[str, Any]] = []
        for rep in range(reps):
            cold = _turn(session, _inputs(rep, 1, "Where is the prompt assembled?"))
            warm_diff = _turn(session, _inputs(rep, 2, "Where is the prompt assembled?"))
            warm_user = _turn(session, _inputs(rep, 2, "How are decode errors reported?"))
            runs.append({"cold": cold, "warm_diff": warm_diff, "warm_user": warm_user})
        dec = _turn(session, _inputs(0, 2, "How are decode errors reported?"), max_tokens=32)
        greedy = _turn(session, _inputs(reps, 1, "Where is the prompt assembled?"), 16)
        out: dict[str, Any] = {
            "backend": session.backend,
            "load_s": round(load_s, 1),
            "prompt_tokens": runs[0]["cold"]["tokens"],
            "decode_tok_s": round(dec["_tok_s"], 1),
            "greedy_16": greedy["_text"],
            "greedy_16_ids": greedy["_out"],
            "prompt_ids_first_run": runs[0]["cold"]["_prompt"],
        }
        for kind in ("cold", "warm_diff", "warm_user"):
            ttfts = [r[kind]["ttft_ms"] for r in runs]
            out[kind] = {
                "ttft_ms_median": round(statistics.median(ttfts), 1),
                "ttft_ms_all": ttfts,
                "reused": [r[kind]["reused"] for r in runs],
                "new": [r[kind]["new"] for r in runs],
            }
        return out
    finally:
        session.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.openvino.sidebyside")
    ap.add_argument("--ov-model-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ov-kv", default="auto")
    ap.add_argument("--first", choices=["llama", "openvino"], default="llama")
    args = ap.parse_args(argv)
    base = default_profile()
    # One block size for both, so the assembler pads the stable region identically.
    llama = base.with_overrides({"cache.block_size": 32}, source="sidebyside")
    ov = base.with_overrides(
        {
            "profile.backend": "openvino",
            "openvino.model_dir": args.ov_model_dir,
            "openvino.kv_cache_precision": args.ov_kv,
            "cache.block_size": 32,
        },
        source="sidebyside",
    )
    order = [("llama", llama), ("openvino", ov)]
    if args.first == "openvino":
        order.reverse()
    results: dict[str, Any] = {name: measure(p, args.reps) for name, p in order}
    same = results["llama"].pop("prompt_ids_first_run") == results["openvino"].pop(
        "prompt_ids_first_run"
    )
    results["same_prompt_tokens"] = same
    Path(args.out).write_text(json.dumps(results, indent=2))
    for name in ("llama", "openvino"):
        r = results[name]
        print(
            f"{name:9s} prompt {r['prompt_tokens']} tok"
            f" | cold TTFT {r['cold']['ttft_ms_median']} ms"
            f" | warm diff TTFT {r['warm_diff']['ttft_ms_median']} ms (reused "
            f"{r['warm_diff']['reused'][0]}) | warm user TTFT {r['warm_user']['ttft_ms_median']} ms"
            f" (reused {r['warm_user']['reused'][0]}) | decode {r['decode_tok_s']} tok/s",
            file=sys.stderr,
        )
    print(f"same prompt tokens on both backends: {same}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
