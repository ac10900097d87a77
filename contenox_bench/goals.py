"""The issue's goals, each judged from figures measured in this run.

Every goal has ``status``: ``"met"``, ``"not met"``, ``"not measured"`` (its section did not
run or measured nothing to judge) or ``"not evaluated"`` (the rows it depends on are not
applicable to this run's backend, see ``applicable``); ``met`` is True, False or None.
"""

from __future__ import annotations

from typing import Any

from contenox_bench.applicable import BARE_LOOP_BACKEND, is_not_applicable
from contenox_bench.stats import median, ratio

GOAL_STATUSES = ("met", "not met", "not measured", "not evaluated")

SNAPSHOT_GOAL_TOKENS = 2048


def evaluate(sections: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        _warm_suffix(sections.get("curve", {})),
        _trace(sections.get("trace", {})),
        _snapshot(sections.get("runtime", {})),
        _overhead(sections.get("runtime", {})),
        *_typing(sections.get("typing", {})),
        _restart(sections.get("restart", {})),
        _remote(sections.get("remote", {})),
        _remote_decode(sections.get("remote", {})),
        _schedule(sections.get("schedule", {})),
        *_next_edit(sections.get("next_edit", {})),
        *_fleet(sections.get("fleet", {})),
        *_bigrepo(sections.get("bigrepo", {})),
    ]


def _goal(gid: str, text: str, met: bool | None, measured: str,
          values: dict[str, Any], note: str = "", status: str | None = None) -> dict[str, Any]:
    if status is None:
        status = {True: "met", False: "not met", None: "not measured"}[met]
    return {"id": gid, "goal": text, "met": met, "status": status, "measured": measured,
            "values": values, "note": note}


def _not_measured(gid: str, text: str, section: dict[str, Any]) -> dict[str, Any]:
    return _goal(gid, text, None, f"not measured ({section.get('status', 'not run')})", {})


def not_evaluated(gid: str, text: str, why: str) -> dict[str, Any]:
    """A goal whose figures are not applicable to this run (``why``: the row's status)."""
    return _goal(gid, text, None, f"not evaluated ({why})", {}, status="not evaluated")


def _warm_suffix(curve: dict[str, Any]) -> dict[str, Any]:
    text = ("warm changed-suffix TTFT ≤ 1.2 × (changed ÷ total tokens) × cold TTFT "
            "+ one decode step")
    if curve.get("status") != "ok":
        return _not_measured("warm_suffix_ttft", text, curve)
    judged = [r for r in curve["rows"] if r["goal_met"] is not None]
    parts = [f"{r['changed_tokens']}: {median(r['warm_ttft_ms']):.0f} ms vs bound "
             f"{r['goal_bound_ms']:.0f} ms" for r in judged]
    met = all(r["goal_met"] for r in judged) if judged else None
    return _goal("warm_suffix_ttft", text, met, "; ".join(parts) or "no point with a bound",
                 {str(r["changed_tokens"]): {"warm_ms": median(r["warm_ttft_ms"]),
                                             "bound_ms": r["goal_bound_ms"],
                                             "met": r["goal_met"]} for r in judged},
                 "judged at every curve point with changed tokens > 0 (at 0 the bound is a "
                 "single decode step and the warm path re-decodes one token)")


def _trace(trace: dict[str, Any]) -> dict[str, Any]:
    text = "edit-trace median TTFT: a ≤ 1/10 of c and ≤ 1/5 of d"
    if trace.get("status") != "ok":
        return _not_measured("trace_ttft", text, trace)
    r, nr = trace["ratios"], trace.get("new_token_ratios", {})
    ac, ad = r["a_over_c"], r["a_over_d"]
    met = None if ac is None or ad is None else (ac <= 0.1 and ad <= 0.2)
    backend = trace.get("backend", BARE_LOOP_BACKEND)
    on = "" if backend == BARE_LOOP_BACKEND else (
        f"; c and d ran on the {backend} backend's engine session (see the trace section)")
    return _goal("trace_ttft", text, met,
                 f"a/c = {_f(ac)} (goal ≤ 0.10), a/d = {_f(ad)} (goal ≤ 0.20), "
                 f"b/d = {_f(r['b_over_d'])}", dict(r) | {"new_tokens": nr},
                 f"tokens prefilled at ask: a/c = {_f(nr.get('a_over_c'))}, "
                 f"a/d = {_f(nr.get('a_over_d'))}{on}")


def _remote(sec: dict[str, Any]) -> dict[str, Any]:
    return _engine_vs_server(
        sec, "engine_vs_llama_server",
        "in-process cold prefill ≥ 0.95 × llama-server's tokens/s (same prompts, one run)",
        "cold_prefill_", 0.95, "{} tokens", "cold",
        "server: the cached native build of the same llama.cpp commit (see the section's note)")


def _remote_decode(sec: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in sec.get("rows", []) if r["name"].startswith("decode_at_")]
    return _engine_vs_server(
        sec, "decode_vs_llama_server",
        "in-process greedy decode ≥ llama-server's tokens/s at the same depth (one run)",
        "decode_at_", 1.0, "after {} tokens", "decode",
        f"{rows[0]['decode_tokens'] if rows else '?'} tokens after each cold prefill; "
        "llama-server's own timings, counted as the engine counts (the first token comes with "
        "the prompt)")


def _engine_vs_server(sec: dict[str, Any], gid: str, text: str, prefix: str, floor: float,
                      label: str, kind: str, note: str) -> dict[str, Any]:
    """A goal on the remote section's ``engine_over_server`` ratios of the rows named
    ``prefix<n>``: every one at least ``floor``."""
    if sec.get("status") != "ok":
        return _not_measured(gid, text, sec)
    ratios = {r["name"]: r["engine_over_server"] for r in sec["rows"]
              if r["name"].startswith(prefix)}
    met = all(v is not None and v >= floor for v in ratios.values()) if ratios else None
    measured = "; ".join(f"{label.format(n.removeprefix(prefix))}: {_f(v)}×"
                         for n, v in ratios.items())
    return _goal(gid, text, met, measured or f"no {kind} row", ratios, note=note)


def _schedule(sec: dict[str, Any]) -> dict[str, Any]:
    text = ("exact reuse at speed: a suffix at depth ≥ 2 × faster than round 2's landed "
            "schedule, cold prefill and decode ≥ 0.95 × the inexact engine's")
    if sec.get("status") != "ok":
        return _not_measured("exact_schedule_speed", text, sec)
    q = sec["ratios"]
    suffix, cold = q["suffix_speedup_over_landed"], q["cold_invariant_over_inexact"]
    decode = q["decode_invariant_over_inexact"]
    met = (None if None in (suffix, cold, decode)
           else suffix >= 2.0 and cold >= 0.95 and decode >= 0.95)
    return _goal("exact_schedule_speed", text, met,
                 f"suffix of {sec['suffix_tokens']} at {sec['depth']}: {_f(suffix)}× faster; "
                 f"cold {_f(cold)}×, decode {_f(decode)}× the inexact engine", dict(q),
                 "in-process, the same llama.cpp build, interleaved rounds")


def _restart(sec: dict[str, Any]) -> dict[str, Any]:
    text = "first ask after a restart: TTFT ≤ 2 × a warm ask's, at every stable-prefix size"
    if is_not_applicable(sec):
        return not_evaluated("restart_ttft", text, str(sec["status"]))
    if sec.get("status") != "ok":
        return _not_measured("restart_ttft", text, sec)
    rows = sec["rows"]
    judged = [r for r in rows if r["restart_over_warm"] is not None]
    met = all(r["restart_over_warm"] <= 2.0 for r in judged) if judged else None
    parts = [f"{r['stable_tokens']} stable: restart/warm = {_f(r['restart_over_warm'])}, "
             f"cold start/restart = {_f(r['cold_over_restart'])}" for r in rows]
    fu = sec.get("follow_up") or {}
    note = ""
    if fu:
        note = (f"follow-up prefilled {fu['follow_up']['new_tokens']} tokens vs "
                f"{fu['new_conversation']['new_tokens']} as a new conversation "
                f"(TTFT ratio {_f(fu['ttft_ratio'])})")
    return _goal("restart_ttft", text, met, "; ".join(parts),
                 {str(r["stable_tokens"]): r["restart_over_warm"] for r in rows}, note)


def _typing(sec: dict[str, Any]) -> list[dict[str, Any]]:
    """The inline-completion goals of the typing trace (section 7)."""
    texts = {
        "completion_latency": "typing trace p50 latency ≤ 1.5 × (prefill of the new tokens + "
                              "decode of the returned tokens) on the same engine",
        "completion_vs_lcp": "typing trace p50 latency ≥ 3× lower than d (llama.vscode request "
                             "shape on a longest-common-prefix session)",
        "completion_prefill": "median tokens prefilled per completion request ≤ 32",
    }
    if sec.get("status") != "ok":
        return [_not_measured(gid, text, sec) for gid, text in texts.items()]
    over = sec["ratios"]["a_p50_over_expected"]
    d_over_a = sec["ratios"]["d_p50_over_a_p50"]
    new = median(sec["a"]["new_tokens"])
    return [
        _goal("completion_latency", texts["completion_latency"],
              None if over is None else over <= 1.5,
              f"a p50 / expected p50 = {_f(over)} (expected "
              f"{_f(sec['engine']['expected_p50_ms'])} ms)", dict(sec["engine"])),
        _goal("completion_vs_lcp", texts["completion_vs_lcp"],
              None if d_over_a is None else d_over_a >= 3.0,
              f"d p50 / a p50 = {_f(d_over_a)}", {"d_over_a": d_over_a}),
        _goal("completion_prefill", texts["completion_prefill"],
              None if new is None else new <= 32,
              f"median {new} tokens", {"median_new_tokens": new},
              f"{sec['typed_through']} of {sec['requests']} requests answered by "
              "typed-through without a model call"),
    ]


def _next_edit(sec: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of the next-edit trace (section 11)."""
    texts = {
        "next_edit_prefill": "next edit: median tokens prefilled ≤ the appended history step + "
                             "region + 32",
        "next_edit_latency": "next edit p50 latency ≤ 1.5 × (prefill of those tokens + decode "
                             "of the output) on the same engine",
        "next_edit_vs_lcp": "next edit p50 latency ≥ 3× lower than d (the same prompts on a "
                            "longest-common-prefix session, no idle warm-up)",
        "next_edit_lookup": "prompt-lookup decoding ≥ 2× the plain decode rate on the rewrites",
    }
    if sec.get("status") != "ok":
        return [_not_measured(gid, text, sec) for gid, text in texts.items()]
    pb, lk = sec["prefill_bound"], sec["lookup"]
    over = sec["ratios"]["a_p50_over_expected"]
    d_over_a = sec["ratios"]["d_p50_over_a_p50"]
    speedup = lk["speedup"]
    return [
        _goal("next_edit_prefill", texts["next_edit_prefill"],
              None if pb["median_over_bound"] is None else pb["median_over_bound"] <= 0,
              f"median {_f(pb['median_new_tokens'], 0)} tokens, bound "
              f"{_f(pb['median_bound'], 0)}", dict(pb)),
        _goal("next_edit_latency", texts["next_edit_latency"],
              None if over is None else over <= 1.5,
              f"a p50 / expected p50 = {_f(over)} (expected "
              f"{_f(sec['engine']['expected_p50_ms'])} ms)", dict(sec["engine"])),
        _goal("next_edit_vs_lcp", texts["next_edit_vs_lcp"],
              None if d_over_a is None else d_over_a >= 3.0,
              f"d p50 / a p50 = {_f(d_over_a)}", {"d_over_a": d_over_a}),
        _goal("next_edit_lookup", texts["next_edit_lookup"],
              None if speedup is None else speedup >= 2.0,
              f"{_f(speedup)}× ({lk['accepted']}/{lk['drafted']} drafted tokens accepted)",
              dict(lk), f"{lk['differing_tokens']} tokens differ from the plain loop"),
    ]


def _fleet(sec: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals of the team fleet (section 12, default mode)."""
    texts = {
        "fleet_affinity": "fleet: with session-affinity routing, the median tokens prefilled at "
                          "an ask ≤ 1.2 × a single developer's on a private server "
                          "(round-robin shown beside it)",
        "fleet_failover": "fleet: a replica killed mid-run: 0 failed asks",
    }
    if sec.get("status") != "ok":
        return [_not_measured(gid, text, sec) for gid, text in texts.items()]
    q, rows = sec["ratios"], sec["rows"]
    aff = q["affinity_over_single"]
    kill = rows["kill"]
    return [
        _goal("fleet_affinity", texts["fleet_affinity"], None if aff is None else aff <= 1.2,
              f"affinity / single = {_f(aff)}; round-robin / single = "
              f"{_f(q['round_robin_over_single'])}", dict(q)),
        _goal("fleet_failover", texts["fleet_failover"], kill["failed_asks"] == 0,
              f"{kill['failed_asks']} failed of {kill['planned_asks']}; reported misses "
              f"{kill['misses']} at asks, {kill['idle_misses']} at idle pre-prefills; "
              f"{kill['retries']} retried requests",
              {k: kill[k] for k in ("failed_asks", "planned_asks", "misses", "idle_misses",
                                    "retries")}),
    ]


def _bigrepo(sec: dict[str, Any]) -> list[dict[str, Any]]:
    """The repository index on a big workspace (section 13), judged at its largest size."""
    from contenox_bench import bigrepo

    texts = {f"bigrepo_{k}": f"{bigrepo.GOAL_FILES:,}-file workspace: {v}"
             for k, v in bigrepo.GOAL_TEXTS.items() if k != "first_answer"}
    row = bigrepo.goal_row(sec)
    if row is None:
        return [_not_measured(gid, text, sec) for gid, text in texts.items()]
    note = "" if row["files"] >= bigrepo.GOAL_FILES else (
        f"measured on {row['files']:,} files, not the goal's {bigrepo.GOAL_FILES:,}")
    sig = row["signature"]
    measured = {
        "bigrepo_cold_build": (f"{row['cold_build_s']:.1f} s", row["cold_build_s"]),
        "bigrepo_restart": (f"{row['restart_build_s']:.2f} s", row["restart_build_s"]),
        "bigrepo_signature_map": (f"p95 {_f(sig['map_p95_ms'], 1)} ms (p50 "
                                  f"{_f(sig['map_p50_ms'], 1)} ms, {sig['n']} edits)",
                                  sig["map_p95_ms"]),
        "bigrepo_rss": (f"{row['peak_rss_bytes'] / 2**20:,.0f} MiB"
                        if row["peak_rss_bytes"] is not None else "not measured",
                        row["peak_rss_bytes"]),
    }
    return [_goal(gid, text, row["goals"][gid.removeprefix("bigrepo_")], measured[gid][0],
                  {"value": measured[gid][1], "files": row["files"]}, note)
            for gid, text in texts.items()]


def _snapshot(runtime: dict[str, Any]) -> dict[str, Any]:
    text = "snapshot restore of a 2k-token prefix ≥ 50× faster than re-prefilling it"
    if runtime.get("status") != "ok":
        return _not_measured("snapshot_restore", text, runtime)
    row = next(r for r in runtime["rows"] if r["name"] == "snapshot_restore")
    if is_not_applicable(row):
        return not_evaluated("snapshot_restore", text, row["status"])
    speedup = ratio(median(row["reprefill_ms"]), median(row["ms"]))
    size = runtime["prefix_tokens"]
    note = "" if size == SNAPSHOT_GOAL_TOKENS else (
        f"measured on a {size}-token prefix, not the goal's {SNAPSHOT_GOAL_TOKENS}")
    return _goal("snapshot_restore", text, None if speedup is None else speedup >= 50.0,
                 f"{_f(speedup, 0)}× ({median(row['reprefill_ms']):.0f} ms re-prefill vs "
                 f"{median(row['ms']):.1f} ms restore, {size} tokens)",
                 {"speedup": speedup, "prefix_tokens": size}, note)


def _overhead(runtime: dict[str, Any]) -> dict[str, Any]:
    text = "engine prefill tokens/s within 5% of a bare llama-cpp-python low-level loop"
    oh = runtime.get("overhead")
    if runtime.get("status") != "ok" or not oh:
        return _not_measured("engine_overhead", text, runtime)
    if is_not_applicable(oh):
        return not_evaluated("engine_overhead", text, oh["status"])
    eng = median(oh["engine_tokens_per_s"])
    bare = median(oh["bare_tokens_per_s"])
    paired = median(oh["engine_over_bare_time"])  # engine ms / bare ms, per interleaved pair
    overhead = None if paired is None else paired - 1.0
    pct = None if overhead is None else overhead * 100
    # Best of n (fastest engine run ÷ fastest bare run): the least disturbed by other load.
    best = ratio(oh["engine_ms"]["min"], oh["bare_ms"]["min"])
    return _goal("engine_overhead", text, None if overhead is None else overhead <= 0.05,
                 f"engine {_f(eng, 1)} vs bare {_f(bare, 1)} tokens/s on {oh['tokens']} tokens; "
                 f"median paired time ratio {_f(paired, 3)} (overhead {_f(pct, 1)}%, "
                 f"{oh['pairs']} pairs)",
                 {"engine_tokens_per_s": eng, "bare_tokens_per_s": bare,
                  "paired_time_ratio": paired, "overhead": overhead, "best_of_ratio": best},
                 f"best-of-{oh['pairs']} time ratio {_f(best, 3)}; paired ratios ranged "
                 f"{_f(oh['engine_over_bare_time']['min'], 3)}–"
                 f"{_f(oh['engine_over_bare_time']['max'], 3)}")


def _f(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"
