"""The engine on a GPU build of llama.cpp: exactness and speed next to llama-server (issue 29).

Run by ``contenox_bench/scripts/gpu_check.sh`` on a machine with an NVIDIA GPU, after it has
built llama.cpp (the commit llama-cpp-python vendors) with CUDA and pointed llama-cpp-python
at it (``LLAMA_CPP_LIB_PATH``). Nothing in the test command depends on it.

For each engine setting below (all layers offloaded, ``context.n_gpu_layers = -1``), one
session after the other, ``--rounds`` rounds each (the first warms the kernels up and is left
out of the medians): cold prefill of 2,048 tokens (tokens/s, the logits read back, so the GPU
has finished), 256 new tokens after a 2,816-token prefix (ms), decode tokens/s at that depth,
and the exactness gate: the warm prefix + suffix's next-token logits and 16 greedy tokens
against the cold run's, bitwise. Then llama-server (the same build, ``-ngl 99``, its own batch
defaults) on the same cold prompts, and the batch-invariance probe the engine runs on CPUs
(``engine.llama.invariance``), here on the GPU: does a token's result stop depending on its
micro-batch from some size on? The engine does not run that probe with GPU offload; its
answer here says whether it could.

    python -m contenox_bench.gpu_check --model FILE.gguf --out DIR [--server BIN] [--only NAMES]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import llama_cpp

from contenox_bench import llama_server
from engine import load_profile, open_session
from engine.llama import invariance

GPU = {"context.n_gpu_layers": -1, "context.n_ctx": 8192}
SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("chunked32", "engine default with GPU offload: chunked schedule, micro-batches of 32", {}),
    ("chunked128", "chunked by 128", {"cache.exact_chunk": 128, "context.n_batch": 512}),
    ("chunked512", "chunked by 512", {"cache.exact_chunk": 512, "context.n_batch": 512}),
    ("inexact", "exact reuse off, the profile's micro-batches (128)", {"cache.exact_reuse": False}),
)
COLD, DEPTH, SUFFIX, N_GEN = 2048, 2816, 256, 16
TEXT_FILES = ("argparse.py", "textwrap.py", "json/decoder.py", "shlex.py")


def _text() -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    return "\n".join((root / name).read_text("utf-8") for name in TEXT_FILES)


def _timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000.0, out


def _engine_round(s: Any, toks: list[int]) -> dict[str, Any]:
    """One round of the measurements on one session; ``toks`` has DEPTH + SUFFIX tokens."""
    s.reset()
    cold_ms, _ = _timed(lambda: (s.prefill(toks[:COLD]), s.next_token_logits()))
    s.reset()
    s.prefill(toks[:DEPTH])
    s.next_token_logits()
    suffix_ms, res = _timed(lambda: (s.prefill(toks), s.next_token_logits()))
    warm_logits = res[1].tobytes()
    gen_ms, gen = _timed(lambda: s.generate(max_tokens=N_GEN))
    s.reset()
    s.prefill(toks)
    cold_logits = s.next_token_logits().tobytes()
    cold_gen = s.generate(max_tokens=N_GEN)
    return {"cold_tok_s": COLD / (cold_ms / 1000.0), "suffix_ms": suffix_ms,
            "reused": res[0].reused_tokens, "decode_tok_s": N_GEN / (gen_ms / 1000.0),
            "logits_equal": warm_logits == cold_logits,
            "tokens_equal": list(gen.tokens) == list(cold_gen.tokens)}


def _probe(s: Any) -> dict[str, Any]:
    """The invariance probe per candidate size: do all splits give the reference result? In
    micro-batches of at most ``n_ubatch``, none under the candidate, as the engine's own
    probe (``invariance.find_min_batch``): a longer batch would be split by llama.cpp into
    micro-batches whose remainders can be smaller than the size probed."""
    max_batch = int(s.profile.get("context.n_ubatch"))
    probe = s.tokenize(invariance.PROBE_TEXT, add_bos=True)
    out: dict[str, Any] = {"max_batch": max_batch}
    first_sizes = invariance.within([invariance.probe_length(8)], max_batch, 8)
    first = s._probe_run(probe, first_sizes)
    out["deterministic"] = first == s._probe_run(probe, first_sizes)
    for k in invariance.CANDIDATES:
        if max_batch < 2 * k:
            break
        n = invariance.probe_length(k)
        reference = s._probe_run(probe, invariance.within([n], max_batch, k))
        out[str(k)] = all(s._probe_run(probe, invariance.within(sizes, max_batch, k)) == reference
                          for sizes in invariance.splits(k, n))
    return out


def _server(binary: str, model: Path, prompts: list[list[int]], log: Path) -> dict[str, Any]:
    os.environ[llama_server.BINARY_ENV] = binary
    rates = []
    with llama_server.running(model, log, ubatch=None, extra=("-ngl", "99")) as server:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for toks in prompts:
                doc = http.post("/completion", json={"prompt": toks, "n_predict": 0,
                                                     "cache_prompt": False}).json()
                rates.append(float(doc["timings"]["prompt_per_second"]))
    return {"cold_tok_s": rates, "median": statistics.median(rates)}


def run(model: Path, out: Path, server: str | None, rounds: int,
        only: Sequence[str] = ()) -> dict[str, Any]:
    report: dict[str, Any] = {
        "system_info": llama_cpp.llama_print_system_info().decode(),
        "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "sizes": {"cold": COLD, "depth": DEPTH, "suffix": SUFFIX}, "settings": {}}
    base = load_profile(None).with_overrides({**GPU, "model.path": str(model)}, source="gpu")
    # One session at a time (each is measured alone; a GPU is not shared with other jobs).
    toks: list[int] = []
    for name, label, overrides in SETTINGS:
        if only and name not in only:
            continue
        with open_session(base.with_overrides(overrides, source=name)) as opened:
            s: Any = opened  # a llama session: its schedule and probe hooks are read
            toks = toks or s.tokenize(_text(), add_bos=True)[: DEPTH + SUFFIX]
            assert len(toks) == DEPTH + SUFFIX, len(toks)
            report["settings"][name] = {
                "label": label, "overrides": overrides, "schedule": s.schedule.to_dict(),
                "rounds": [_engine_round(s, toks) for _ in range(rounds)]}
            if name == "inexact":
                report["probe"] = _probe(s)
    for entry in report["settings"].values():
        rs = entry["rounds"][1:] or entry["rounds"]  # the first round warms the kernels up
        entry["median"] = {k: statistics.median(r[k] for r in rs)
                           for k in ("cold_tok_s", "suffix_ms", "decode_tok_s")}
        entry["exact_every_round"] = all(r["logits_equal"] and r["tokens_equal"]
                                         for r in entry["rounds"])
    if server:
        prompts = [toks[i * 64:][:COLD] for i in range(rounds)]
        prompts = [p for p in prompts if len(p) == COLD]
        report["llama_server"] = _server(server, model, prompts, out / "llama-server.log")
    filename = "gpu_check" + "".join(f"-{n}" for n in only) + ".json"
    (out / filename).write_text(json.dumps(report, indent=1))
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = ["| setting | schedule | cold prefill tok/s | 256 after 2,816 (ms) | decode tok/s |"
             " warm == cold |", "|---|---|---|---|---|---|"]
    for name, e in report["settings"].items():
        m = e["median"]
        sch = e["schedule"]
        lines.append(f"| {name} | {sch['kind']} {sch['chunk']} | {m['cold_tok_s']:.0f} | "
                     f"{m['suffix_ms']:.1f} | {m['decode_tok_s']:.0f} | "
                     f"{'yes' if e['exact_every_round'] else 'NO'} |")
    if "llama_server" in report:
        srv = report["llama_server"]["median"]
        lines.append(f"| llama-server -ngl 99 (its defaults) | - | {srv:.0f} | | | |")
    if "probe" in report:
        lines.append(f"\nprobe on the GPU (micro-batch size: invariant?): {report['probe']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m contenox_bench.gpu_check")
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--server", help="a llama-server binary of the same build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated setting names (default: all)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args.model, args.out, args.server, args.rounds,
                 [n for n in args.only.split(",") if n])
    text = markdown(report)
    print(text, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
