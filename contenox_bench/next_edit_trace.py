"""Section 11: the next-edit trace — real commits replayed as an editor's edit stream, with a
``contenox/nextEdit`` request after each hunk (``edit_replay``, ``next_edit_eval``).

a. this server over stdio: the idle time warms the next-edit prompt up to the region after
   each edit, so a request prefills the region (and whatever the warm-up did not reach);
   its per-request figures come from ``contenox/status``.
c. a fresh context per request: the same prompts (``includePrompt``), prefilled from nothing,
   the same number of tokens decoded.
d. one longest-common-prefix session fed the same prompts in order, without the idle warm-up
   (what llama-server's prompt cache gives a plugin that sends the same prompt).

Prompt lookup: on c's prompts, the rewrite decoded with prompt lookup and with the plain loop
(same prompt, same token count): the decode rates side by side and the count of tokens that
differ (a token computed inside a batch can round differently; engine README).

c and d run on an engine session of the same profile, after a's server has exited.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from contenox_bench.config import BenchConfig
from contenox_bench.edit_replay import load_tasks
from contenox_bench.next_edit_eval import run_replay, summarize
from contenox_bench.progress import Progress
from contenox_bench.stats import engine_costs, expected_ms, quantile, ratio, summary
from engine.lookup import REWRITE_DRAFT_TOKENS as LOOKUP_TOKENS

SYSTEMS = {
    "a": "contenox, next edit on the warm session (idle warm-up up to the region)",
    "c": "fresh context per request (same prompts)",
    "d": "longest-common-prefix session, same prompts, no idle warm-up",
}


def planned_units(cfg: BenchConfig) -> int:
    return 3


def run(cfg: BenchConfig, profile: Any, profile_file: Path, out_dir: Path, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    if profile.backend != "llama":
        return {"status": f"not applicable: the {profile.backend} backend (next-edit branches, "
                          "exact reuse and prompt lookup are llama.cpp's)"}
    nc = cfg.next_edit
    tasks = load_tasks(None)[:nc.tasks]
    options = {"profile": str(profile_file), "debounceMs": 300,
               "repoMapTokens": nc.repo_map_tokens, "logLevel": "warning"}
    progress.note("next edit a: replaying commits through the server")
    with open(out_dir / "next-edit-server.log", "w", encoding="utf-8") as err:
        a = asyncio.run(run_replay(tasks, tmp / "next-edit", options, nc.settle_s, err))
    progress.step("next edit a done")
    rows = [r for r in a["rows"] if r["prompt"] is not None and r["decode_tokens"]]
    c, d, lookup = _baselines(profile, rows, progress)
    return _report(a, rows, c, d, lookup, len(tasks))


def _tokens(session: Any, prompt: dict[str, Any], parts: tuple[str, ...]) -> list[int]:
    return [t for part in parts for text, special in prompt[part]
            for t in session.tokenize(text, add_bos=False, special=bool(special))]


def _baselines(profile: Any, rows: list[dict[str, Any]], progress: Progress
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    from engine import open_session

    c_rows: list[dict[str, Any]] = []
    d_rows: list[dict[str, Any]] = []
    lookup_rows: list[dict[str, Any]] = []
    with open_session(profile) as session:
        for r in rows:
            tokens = _tokens(session, r["prompt"], ("stable", "history", "region"))
            history = r["prompt"]["history"]
            r["step_tokens"] = len(session.tokenize(history[-1][0], add_bos=False,
                                                    special=bool(history[-1][1]))) \
                if history else 0
            n = int(r["decode_tokens"])
            session.reset()
            c_rows.append(_timed(session, tokens, n, LOOKUP_TOKENS))
            session.reset()
            plain = _timed(session, tokens, n, 0)
            lookup_rows.append({
                "tokens": n,
                "lookup_decode_ms": c_rows[-1]["decode_ms"], "plain_decode_ms": plain["decode_ms"],
                "drafted": c_rows[-1]["drafted"], "accepted": c_rows[-1]["accepted"],
                "differing_tokens": sum(x != y for x, y in zip(c_rows[-1]["tokens"],
                                                                plain["tokens"], strict=False))
                + abs(len(c_rows[-1]["tokens"]) - len(plain["tokens"])),
                "first_difference": next((i for i, (x, y) in enumerate(zip(
                    c_rows[-1]["tokens"], plain["tokens"], strict=False)) if x != y), None),
            })
        progress.step("next edit c done")
        session.reset()
        for r in rows:
            tokens = _tokens(session, r["prompt"], ("stable", "history", "region"))
            d_rows.append(_timed(session, tokens, int(r["decode_tokens"]), LOOKUP_TOKENS))
        progress.step("next edit d done")
    return c_rows, d_rows, lookup_rows


def _timed(session: Any, tokens: list[int], n: int, lookup: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    pre = session.prefill(tokens)
    gen = session.generate(n, lookup=lookup)
    stats = getattr(session, "last_lookup", None)
    return {"latency_ms": (time.perf_counter() - t0) * 1000.0, "prefill_ms": pre.prefill_ms,
            "new_tokens": pre.new_tokens, "prompt_tokens": len(tokens),
            "decode_tokens": gen.decode_tokens, "decode_ms": gen.decode_ms,
            "tokens": list(gen.tokens),
            "drafted": stats.drafted if stats else 0, "accepted": stats.accepted if stats else 0}


def _report(a: dict[str, Any], rows: list[dict[str, Any]], c: list[dict[str, Any]],
            d: list[dict[str, Any]], lookup: list[dict[str, Any]], n_tasks: int
            ) -> dict[str, Any]:
    lat_a = [r["latency_ms"] for r in rows]
    # The engine's own costs, from c (same prompts, same engine).
    costs = engine_costs(c)
    prefill_tok_ms, decode_tok_ms = costs
    expected = [expected_ms(r["new_tokens"], r["decode_tokens"], costs)
                for r in rows]
    # The prefill goal's bound per request: the region plus the newest history step (what the
    # last edit appended) plus 32.
    bounds = [r["region_tokens"] + r["step_tokens"] + 32 for r in rows]
    over = [float(r["new_tokens"]) - b for r, b in zip(rows, bounds, strict=True)]
    lookup_ms = sum(x["lookup_decode_ms"] for x in lookup)
    plain_ms = sum(x["plain_decode_ms"] for x in lookup)
    tokens = sum(x["tokens"] for x in lookup)
    p50_a, p50_d = quantile(lat_a, 0.5), quantile([x["latency_ms"] for x in d], 0.5)
    p50_expected = quantile(expected, 0.5)
    return {
        "status": "ok",
        "systems": SYSTEMS,
        "tasks": n_tasks,
        "requests": len(a["rows"]),
        "model_calls": len(rows),
        "warm_requests": sum(1 for r in rows if r["warm"]),
        "eval": summarize([{k: v for k, v in r.items() if k != "prompt"} for r in a["rows"]],
                          n_tasks),
        "a": {"latency_ms": summary(lat_a, "ms"),
              "new_tokens": summary([float(r["new_tokens"]) for r in rows], "tokens"),
              "prompt_tokens": summary([float(r["prompt_tokens"]) for r in rows], "tokens"),
              "decode_tokens": summary([float(r["decode_tokens"]) for r in rows], "tokens"),
              "lookup_drafted": sum(r["lookup_drafted"] for r in rows),
              "lookup_accepted": sum(r["lookup_accepted"] for r in rows)},
        "c": {"latency_ms": summary([x["latency_ms"] for x in c], "ms"),
              "new_tokens": summary([float(x["new_tokens"]) for x in c], "tokens")},
        "d": {"latency_ms": summary([x["latency_ms"] for x in d], "ms"),
              "new_tokens": summary([float(x["new_tokens"]) for x in d], "tokens")},
        "prefill_bound": {
            "median_new_tokens": quantile([float(r["new_tokens"]) for r in rows], 0.5),
            "median_bound": quantile([float(b) for b in bounds], 0.5),
            "median_over_bound": quantile(over, 0.5)},
        "engine": {"prefill_ms_per_token": prefill_tok_ms, "decode_ms_per_token": decode_tok_ms,
                   "expected_p50_ms": p50_expected},
        "lookup": {"tokens": tokens, "lookup_decode_ms": lookup_ms, "plain_decode_ms": plain_ms,
                   "speedup": ratio(plain_ms, lookup_ms),
                   "drafted": sum(x["drafted"] for x in lookup),
                   "accepted": sum(x["accepted"] for x in lookup),
                   "differing_tokens": sum(x["differing_tokens"] for x in lookup),
                   "requests_with_differences": sum(1 for x in lookup if x["differing_tokens"]),
                   "first_differences": [x["first_difference"] for x in lookup]},
        "ratios": {
            "a_p50_over_expected": ratio(p50_a, p50_expected),
            "d_p50_over_a_p50": ratio(p50_d, p50_a),
        },
        "server_next_edit_status": a["status"],
    }
