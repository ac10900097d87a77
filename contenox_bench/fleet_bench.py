"""Section 12 ``fleet``: a team on shared replicas (docs/fleet.md). Default mode only.

N developers (``FleetConfig.developers``, 4), each with a workspace of their own (a different
real source file as the stable context) and an edit trace: per step an edit appended to the
context, the idle pre-prefill of the edited context, then an ask (the context plus a question,
a few tokens answered) — the request pattern the language server sends, from one
``llama-server``-backend session per developer, all running at once, started staggered.

Rows, each on fresh servers, in one run:

- ``single``: one developer alone on a private llama-server (the baseline);
- ``affinity``: the N developers on 2 replicas behind vllm-router, ``consistent_hash`` on
  their session keys;
- ``round_robin``: the same behind the router's round-robin (a plain load balancer);
- ``kill``: ``affinity`` with the replica serving developer 0 killed once the first asks are
  done: every ask must be answered; the misses it caused are counted.

Per row: median tokens prefilled at an ask, median ask TTFT, failed asks, reported misses.
Skipped, with the reason, where llama-server or vllm-router is not installed.
"""

from __future__ import annotations

import sysconfig
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contenox_bench import fleet as fleet_mod
from contenox_bench import llama_server
from contenox_bench.config import BenchConfig
from contenox_bench.progress import Progress
from contenox_bench.stats import median, ratio, summary

ROWS = ("single", "affinity", "round_robin", "kill")
#: Real source files, one per developer's workspace (their text is the stable context).
SOURCES = ("json/decoder.py", "textwrap.py", "shlex.py", "difflib.py", "fnmatch.py",
           "bisect.py", "heapq.py", "calendar.py")
QUESTION = "\n# Question: what does the function edited last return, and when does it raise?\n"
CHUNK = 32


def planned_units(cfg: BenchConfig) -> int:
    return len(ROWS) if cfg.fleet.enabled else 1


def run(cfg: BenchConfig, profile: Any, tmp: Path, progress: Progress) -> dict[str, Any]:
    fc = cfg.fleet
    if not fc.enabled:
        progress.step("fleet: skipped")
        return {"status": "skipped: default mode only (four developers on two replicas)"}
    reason = fleet_mod.unavailable_reason()
    if reason is not None:
        progress.step("fleet: skipped", planned_units(cfg))
        return {"status": f"skipped: {reason}"}
    from engine.model_files import resolve_model_path

    model = resolve_model_path(profile)
    rows: dict[str, dict[str, Any]] = {}
    server = llama_server.start(model, log_path=tmp / "fleet-single.log", n_ctx=fc.n_ctx,
                                slots=fc.slots, threads=1)
    try:
        rows["single"] = _drive(server.url, 1, fc, None)
    finally:
        server.stop()
    progress.step("fleet: single developer")
    for row, policy in (("affinity", "consistent_hash"), ("round_robin", "round_robin"),
                        ("kill", "consistent_hash")):
        with fleet_mod.running_fleet(model, tmp / f"fleet-{row}", replicas=fc.replicas,
                                     policy=policy, n_ctx=fc.n_ctx, slots=fc.slots,
                                     threads=1) as fleet:
            kill = (lambda asks, f=fleet: _kill_under(f, asks)) if row == "kill" else None
            rows[row] = _drive(fleet.url, fc.developers, fc, kill)
            rows[row]["policy"] = policy
        progress.step(f"fleet: {row}")
    single = rows["single"]["median_ask_new_tokens"]
    return {
        "status": "ok",
        "developers": fc.developers,
        "replicas": fc.replicas,
        "slots_per_replica": fc.slots,
        "steps": fc.steps,
        "rows": rows,
        "ratios": {
            "affinity_over_single": ratio(rows["affinity"]["median_ask_new_tokens"], single),
            "round_robin_over_single": ratio(rows["round_robin"]["median_ask_new_tokens"],
                                             single),
            "round_robin_ttft_over_affinity": ratio(rows["round_robin"]["median_ask_ttft_ms"],
                                                    rows["affinity"]["median_ask_ttft_ms"]),
        },
    }


def _context(index: int, chars: int) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = (stdlib / SOURCES[index % len(SOURCES)]).read_text(encoding="utf-8")
    return f"# workspace {index}\n{text[:chars]}"


def _kill_under(fleet: fleet_mod.Fleet, asks: list[dict[str, Any]]) -> None:
    """Kill the replica that serves developer 0 (found by the slot their key picks), so that
    at least one developer loses their replica, wherever the router's ring put them."""
    slot = next(a["slot"] for a in asks if a["developer"] == 0)
    serving = fleet.replicas_using(int(slot))
    fleet.kill_replica(serving[0] if serving else 0)


def _drive(url: str, developers: int, fc: Any,
           kill: Callable[[list[dict[str, Any]]], None] | None) -> dict[str, Any]:
    """Run ``developers`` edit traces at once against ``url``; ``kill`` (if any) runs once
    every developer has answered their first ask, with the asks so far."""
    asks: list[dict[str, Any]] = []
    failures: list[str] = []
    lock = threading.Lock()
    # With a kill: the developers and this thread meet once every first ask is answered.
    first_done = threading.Barrier(developers + 1) if kill is not None else None

    def developer(i: int) -> None:
        time.sleep(i * fc.stagger_s)
        try:
            _trace(url, i, fc, asks, lock, first_done)
        except Exception as exc:  # a failed ask is what this row counts
            with lock:
                failures.append(f"developer {i}: {type(exc).__name__}: {exc}")
            if first_done is not None:
                first_done.abort()

    threads = [threading.Thread(target=developer, args=(i,), daemon=True)
               for i in range(developers)]
    for t in threads:
        t.start()
    if kill is not None and first_done is not None:
        try:
            first_done.wait(timeout=fc.timeout_s)
            with lock:
                so_far = list(asks)
            kill(so_far)
        except threading.BrokenBarrierError:
            pass
    for t in threads:
        t.join(timeout=fc.timeout_s)
    planned = developers * fc.steps
    return {
        "asks": len(asks),
        "planned_asks": planned,
        "failed_asks": planned - len(asks),
        "failures": failures[:5],
        "median_ask_new_tokens": median(summary([a["new_tokens"] for a in asks], "tokens")),
        "median_ask_ttft_ms": median(summary([a["ttft_ms"] for a in asks], "ms")),
        "misses": sum(1 for a in asks if a["miss"]),
        # Misses of the idle pre-prefills (a replica lost between edits is noticed there).
        "idle_misses": sum(1 for a in asks if a["idle_miss"]),
        "retries": sum(a["retries"] for a in asks),
        "per_ask": asks,
    }


def _trace(url: str, index: int, fc: Any, asks: list[dict[str, Any]], lock: threading.Lock,
           first_done: threading.Barrier | None) -> None:
    from engine import load_profile, open_session

    profile = load_profile(None).with_overrides({
        "profile.backend": "llama-server", "remote.url": url, "remote.slot": -1,
        "remote.reuse_chunk": CHUNK, "remote.session_key": f"bench-developer-{index}",
        "remote.retry_s": 20.0, "remote.timeout_s": fc.timeout_s,
        "context.n_ctx": fc.n_ctx}, source="bench fleet")
    with open_session(profile) as session:
        retries = 0
        bos = [int(session.bos_token_id)] if session.bos_token_id is not None else []
        text = _context(index, fc.context_chars)
        for step in range(fc.steps):
            text += f"\nedited_{index}_{step} = {step}  # an edit\n"
            context = [*bos, *session.tokenize(text, special=False)]
            idle = session.prefill(context)  # the idle pre-prefill after the edit
            ask = [*context, *session.tokenize(QUESTION, special=False)]
            prefilled = session.prefill(ask)
            answer = session.generate(max_tokens=4)
            status = session.remote_status or {}
            total = int(status.get("retries", 0))
            retried, retries = total - retries, total
            with lock:
                asks.append({"developer": index, "step": step,
                             "new_tokens": prefilled.new_tokens,
                             "prompt_tokens": len(ask),
                             "ttft_ms": round(answer.ttft_ms, 1),
                             "miss": prefilled.miss_reason is not None,
                             "idle_miss": idle.miss_reason is not None,
                             "retries": retried,
                             "slot": status.get("slot")})
            if step == 0 and first_done is not None:
                first_done.wait(timeout=fc.timeout_s)


def markdown(sec: dict[str, Any]) -> list[str]:
    title = "12. A team on shared replicas"
    if sec.get("status") != "ok":
        return [f"## {title}", "", f"{sec.get('status', 'not run')}", ""]
    lines = [
        f"## {title}",
        "",
        f"{sec['developers']} developers at once (a workspace and {sec['steps']} edits each: "
        "the idle pre-prefill of the edited context, then an ask), on "
        f"{sec['replicas']} llama-server replicas ({sec['slots_per_replica']} slots each) "
        "behind vllm-router; `single`: one developer alone on a private llama-server. "
        "`kill`: one replica killed once every developer's first ask was answered.",
        "",
        "| row | policy | asks | failed | misses (ask / idle) | retries | tokens prefilled at "
        "ask (median) | ask TTFT ms (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ROWS:
        r = sec["rows"][name]
        new = "n/a" if r["median_ask_new_tokens"] is None else round(r["median_ask_new_tokens"])
        ttft = "n/a" if r["median_ask_ttft_ms"] is None else round(r["median_ask_ttft_ms"])
        lines.append(
            f"| {name} | {r.get('policy', 'private server')} | {r['asks']}/{r['planned_asks']} "
            f"| {r['failed_asks']} | {r['misses']} / {r['idle_misses']} | {r['retries']} "
            f"| {new} | {ttft} |")
    q = sec["ratios"]
    lines += ["", f"Ratios: affinity / single {_r2(q['affinity_over_single'])}, round-robin / "
                  f"single {_r2(q['round_robin_over_single'])} (tokens prefilled at ask); "
                  f"round-robin / affinity TTFT {_r2(q['round_robin_ttft_over_affinity'])}. "
                  "Retries: requests sent again after a router's 502 (a replica gone, or a "
                  "connection to a live one that llama-server had closed).", ""]
    return lines


def _r2(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"
