"""Quick engine figures on the embedded model (the numbers issue 2 asks for).

    python bench/engine_quick.py [--prefix 2048] [--suffix 32] [--reps 3]

Prints a JSON object: cold prefill tokens/s for the prefix, warm TTFT for a new suffix after
the cached prefix (versus cold TTFT of the same full prompt), and snapshot size and save/load ms
versus re-prefilling the prefix. Medians of ``--reps`` repetitions, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from engine import load_profile, open_session


def _corpus() -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    names = ("json/decoder.py", "json/encoder.py", "ast.py")
    return "\n".join((root / name).read_text("utf-8") for name in names)


def _stat(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", type=int, default=2048)
    ap.add_argument("--suffix", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    with open_session(load_profile(None)) as s:
        toks = s.tokenize(_corpus(), add_bos=True)
        prefix = toks[: args.prefix]
        suffix = toks[args.prefix : args.prefix + args.suffix]
        full = prefix + suffix
        cold_prefill, cold_ttft, warm_ttft, save_ms, load_ms, sizes = [], [], [], [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            snap = Path(tmp) / "prefix.snap"
            for _ in range(args.reps):
                s.reset()
                r = s.prefill(prefix)
                cold_prefill.append(r.new_tokens / (r.prefill_ms / 1000.0))
                saved = s.save_snapshot(snap)
                save_ms.append(saved.ms)
                sizes.append(saved.bytes)
                s.prefill(full)
                warm_ttft.append(s.generate(max_tokens=1).ttft_ms)
                s.reset()
                t0 = time.perf_counter()
                s.load_snapshot(snap)
                load_ms.append((time.perf_counter() - t0) * 1000.0)
                s.reset()
                s.prefill(full)
                cold_ttft.append(s.generate(max_tokens=1).ttft_ms)
        reprefill_ms = statistics.median([args.prefix / tps * 1000.0 for tps in cold_prefill])
        report = {
            "prefix_tokens": len(prefix),
            "suffix_tokens": len(suffix),
            "cold_prefill_tokens_per_s": _stat(cold_prefill),
            "cold_ttft_ms_full_prompt": _stat(cold_ttft),
            "warm_ttft_ms_suffix_after_cached_prefix": _stat(warm_ttft),
            "snapshot_bytes": sizes[0],
            "snapshot_save_ms": _stat(save_ms),
            "snapshot_load_ms": _stat(load_ms),
            "reprefill_prefix_ms": reprefill_ms,
            "restore_speedup_vs_reprefill": reprefill_ms / statistics.median(load_ms),
        }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
