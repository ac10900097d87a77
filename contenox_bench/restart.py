"""Section 8: restart and follow-up — warm across restarts and across turns.

For each stable-prefix size (the repo map plus pinned files, grown until ``stableEnd`` reaches
the size):

- warm: a server warms up on the bench workspace (its idle prefill saves the stable prefix as
  a snapshot) and is asked the question three times, at other cursor lines (so each ask's
  cursor context is new, as after a restart): the median warm ask's TTFT;
- restart: that server is shut down, a new one starts on the same workspace and caches, and
  is asked the same question as soon as the model is loaded and the index built (not waiting
  for warm): TTFT and reused tokens of the first ask after a restart;
- cold start: the same with ``autoSnapshots`` off and a fresh cache, as before automatic
  snapshots.

Follow-up (the first size): on the restarted server, a first question in a conversation, then
a follow-up in it once the idle prefill has warmed the answer, against the same follow-up
asked as a new conversation: prefilled tokens and TTFT of each.

TTFT is client-side: from sending ``contenox/ask`` to the first streamed piece.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from contenox_bench import applicable
from contenox_bench.config import BenchConfig
from contenox_bench.lspclient import EditorClient
from contenox_bench.progress import Progress
from contenox_bench.stats import ratio
from contenox_bench.trace import wait_ready
from contenox_bench.trace_script import copy_stdlib_part

QUESTION = "What does this module do, in one sentence?"
FOLLOW_UP = "Which function should I read first?"
FIRST_IN_CONVERSATION = "What does JSONDecoder.raw_decode return?"
OPEN_FILE = "json/decoder.py"
#: Warm asks measured (the median is reported), each with a new cursor context.
WARM_ASKS = 3
#: The cursor line of the asks after a restart (0-based).
ASK_LINE = 40
#: Pinned in this order until the stable prefix reaches the size (the last one in part).
PIN_ORDER = ("json/decoder.py", "json/encoder.py", "textwrap.py", "shlex.py", "glob.py",
             "fnmatch.py", "json/scanner.py", "json/__init__.py")


def planned_units(cfg: BenchConfig) -> int:
    return 3 * len(cfg.restart.sizes) + 1


def run(cfg: BenchConfig, profile: Any, profile_file: Path, out_dir: Path, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    if profile.backend != "llama":
        return {"status": f"not applicable: the {profile.backend} backend has no snapshots"}
    with open(out_dir / "restart-server.log", "w", encoding="utf-8") as err:
        try:
            return _run(cfg, profile_file, tmp, progress, err)
        except SnapshotsRefused as exc:
            return {"status": applicable.not_applicable(
                f"the server refuses snapshots of the stable prefix on this CPU ({exc}), so a "
                "restart cannot restore it")}


class SnapshotsRefused(Exception):
    """The server refuses snapshots of the stable prefix (``exactReuse.snapshotsPastWindow``:
    this CPU restores a sliding window inexactly)."""


def _run(cfg: BenchConfig, profile_file: Path, tmp: Path, progress: Progress,
         err: Any) -> dict[str, Any]:
    rc = cfg.restart
    rows = []
    follow_up: dict[str, Any] | None = None
    for size in rc.sizes:
        root = copy_stdlib_part(tmp / f"restart-{size}")
        base = {"profile": str(profile_file), "debounceMs": 300, "logLevel": "warning",
                "maxTokens": rc.max_tokens}
        cache = tmp / f"restart-{size}-cache"
        progress.note(f"restart {size}: warming a server")
        warm = asyncio.run(_warm(root, base, cache, size, rc.timeout_s, err))
        progress.step(f"restart {size}: warm ask")
        progress.note(f"restart {size}: restarting it")
        again = asyncio.run(_first_ask(root, base, cache, warm["pins"], rc.timeout_s, err,
                                       follow=follow_up is None))
        follow_up = follow_up or again.pop("follow_up", None)
        progress.step(f"restart {size}: first ask after the restart")
        progress.note(f"restart {size}: a cold start")
        cold_cache = tmp / f"restart-{size}-cold-cache"
        cold = asyncio.run(_first_ask(root, base | {"autoSnapshots": False}, cold_cache,
                                      warm["pins"], rc.timeout_s, err, follow=False))
        progress.step(f"restart {size}: cold start")
        shutil.rmtree(cold_cache, ignore_errors=True)
        rows.append({
            "target_stable_tokens": size,
            "stable_tokens": warm["stable_tokens"],
            "prompt_tokens": warm["prompt_tokens"],
            "warm": warm["ask"],
            "restart": again["ask"],
            "cold_start": cold["ask"],
            "restored_tokens": again["restored_tokens"],
            "restart_over_warm": ratio(again["ask"]["ttft_ms"], warm["ask"]["ttft_ms"]),
            "cold_over_restart": ratio(cold["ask"]["ttft_ms"], again["ask"]["ttft_ms"]),
        })
    progress.step("restart: follow-up")
    return {"status": "ok", "rows": rows, "follow_up": follow_up,
            "ttft_definition": "client-side, from sending contenox/ask to the first streamed "
                               "piece"}


async def _client(root: Path, options: dict[str, Any], cache: Path, err: Any) -> EditorClient:
    client = EditorClient(err)
    await client.start(root, options, env={"CONTENOX_CACHE_DIR": str(cache)})
    path = root / OPEN_FILE
    client.did_open(path, path.read_text("utf-8"))
    return client


async def _warm(root: Path, options: dict[str, Any], cache: Path, size: int, timeout: float,
                err: Any) -> dict[str, Any]:
    client = await _client(root, options, cache, err)
    try:
        await wait_ready(client, True, timeout)
        pins = await _grow_stable(client, root, size, timeout)
        explain = await client.request("contenox/explainContext", None, timeout)
        await _wait_saved(client, explain["stableEnd"], timeout)
        asks = []
        for i in range(WARM_ASKS):
            # Each at another line: its cursor context is new, as the restart ask's is.
            asks.append(await _ask(client, root, f"warm-{i}", QUESTION, None, timeout,
                                   line=ASK_LINE + 24 * (i + 1)))
            await wait_ready(client, True, timeout)
        ask = sorted(asks, key=lambda a: a["ttft_ms"])[len(asks) // 2]  # the median ask
        return {"pins": pins, "stable_tokens": explain["stableEnd"],
                "prompt_tokens": ask["prompt_tokens"], "ask": ask}
    finally:
        await client.close()


async def _grow_stable(client: EditorClient, root: Path, size: int,
                       timeout: float) -> list[dict[str, Any]]:
    """Pin files (the last one in part) until the stable prefix holds about ``size`` tokens;
    returns the pin requests, to repeat on the next server (pins are not kept)."""
    pins: list[dict[str, Any]] = []
    explain = await client.request("contenox/explainContext", None, timeout)
    for rel in PIN_ORDER:
        need = size - explain["stableEnd"]
        if need <= 0:
            break
        uri = (root / rel).as_uri()
        pinned = await client.request("contenox/pin", {"uri": uri}, timeout)
        tokens = pinned["pin"]["tokens"] or 0
        request: dict[str, Any] = {"uri": uri}
        if tokens > need:  # only part of this file: its first lines, in proportion
            await client.request("contenox/unpin", {"uri": uri}, timeout)
            n_lines = len((root / rel).read_text("utf-8").splitlines())
            last = max(1, n_lines * need // tokens)
            request["range"] = {"start": {"line": 0, "character": 0},
                                "end": {"line": last, "character": 0}}
            await client.request("contenox/pin", request, timeout)
        pins.append(request)
        await asyncio.sleep(0.5)
        await wait_ready(client, True, timeout)
        explain = await client.request("contenox/explainContext", None, timeout)
    return pins


async def _first_ask(root: Path, options: dict[str, Any], cache: Path,
                     pins: list[dict[str, Any]],
                     timeout: float, err: Any, *, follow: bool) -> dict[str, Any]:
    """Start a server with ``pins`` and ask as soon as it is loaded and indexed."""
    client = await _client(root, options, cache, err)
    try:
        for pin in pins:
            await client.request("contenox/pin", pin, timeout)
        await wait_ready(client, False, timeout)
        ask = await _ask(client, root, "first", QUESTION, None, timeout)
        status = await client.request("contenox/status", None, timeout)
        restored = (status.get("snapshots") or {}).get("restored") or {}
        out: dict[str, Any] = {"ask": ask, "restored_tokens": restored.get("tokens", 0)}
        if follow:
            out["follow_up"] = await _follow_up(client, root, timeout)
        return out
    finally:
        await client.close()


async def _follow_up(client: EditorClient, root: Path, timeout: float) -> dict[str, Any]:
    await wait_ready(client, True, timeout)
    first = await _ask(client, root, "conv-1", FIRST_IN_CONVERSATION, "bench", timeout)
    await asyncio.sleep(0.5)
    await wait_ready(client, True, timeout)  # the idle prefill warms the answer
    follow = await _ask(client, root, "conv-2", FOLLOW_UP, "bench", timeout)
    await wait_ready(client, True, timeout)
    fresh = await _ask(client, root, "conv-new", FOLLOW_UP, f"bench-{time.time()}", timeout)
    return {"first": first, "follow_up": follow, "new_conversation": fresh,
            "new_tokens_ratio": ratio(follow["new_tokens"], fresh["new_tokens"]),
            "ttft_ratio": ratio(follow["ttft_ms"], fresh["ttft_ms"])}


async def _ask(client: EditorClient, root: Path, tag: str, question: str,
               conversation: str | None, timeout: float, line: int = 0) -> dict[str, Any]:
    token = f"restart-{tag}-{time.monotonic_ns()}"
    result, ttft_ms, total_ms = await client.ask(
        token, question, root / OPEN_FILE, line or ASK_LINE, 8, timeout,
        conversation_id=conversation)
    m = result["metrics"]
    return {"ttft_ms": ttft_ms, "total_ms": total_ms, "prompt_tokens": m["promptTokens"],
            "reused_tokens": m["reusedTokens"], "new_tokens": m["newTokens"]}


async def _wait_saved(client: EditorClient, stable: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await client.request("contenox/status", None, timeout)
        saved = (status.get("snapshots") or {}).get("lastSaved") or {}
        if saved.get("tokens") == stable:
            return
        window = (status.get("exactReuse") or {}).get("snapshotsPastWindow") or ""
        if window.startswith("refused"):
            raise SnapshotsRefused(window)
        await asyncio.sleep(0.25)
    raise TimeoutError("the server saved no snapshot of the stable prefix")
