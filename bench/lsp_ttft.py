"""Measurement (opt-in): TTFT of an ask right after a function-body edit, idle pre-prefill on
versus off, on a temporary copy of ``json/`` + ``email/`` from the standard library with ~2k
tokens of stable context.

Run with ``CONTENOX_LSP_TTFT=1 pytest bench/lsp_ttft.py -s -p no:cacheprovider`` (add
``CONTENOX_LSP_TTFT_PROFILE=path.toml`` to use another engine profile). It prints the numbers
and asserts behaviour only: with pre-prefill on, the ask prefills just the user turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import pytest

# A measurement, not a test: it lives in bench/ and borrows the LSP test client helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_lsp_support import (
    change_doc,
    open_doc,
    request,
    start_client,
    stop_client,
    wait_until,
)

pytestmark = pytest.mark.skipif(
    os.environ.get("CONTENOX_LSP_TTFT") != "1", reason="measurement; set CONTENOX_LSP_TTFT=1"
)

QUESTION = "What does JSONDecoder.decode return?"
BODY_LINE = "        obj, end = self.raw_decode(s, idx=_w(s, 0).end())\n"
STABLE_KINDS = {"system", "tools", "policy", "instructions", "repo_map", "pinned"}
ROUNDS = int(os.environ.get("CONTENOX_LSP_TTFT_ROUNDS", "6"))
IDLE_S = 3.0  # the user's pause between the edit and the question (10x the debounce)


def _stdlib_copy(dest: Path) -> Path:
    src = Path(sysconfig.get_paths()["stdlib"])
    root = dest / "ws"
    for pkg in ("json", "email"):
        shutil.copytree(src / pkg, root / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return root


async def _run(root: Path, prefill_on: bool) -> dict[str, Any]:
    options: dict[str, Any] = {"prefillOnIdle": prefill_on, "repoMapTokens": 1300,
                               "debounceMs": 300, "maxTokens": 8, "logLevel": "warning"}
    if os.environ.get("CONTENOX_LSP_TTFT_PROFILE"):
        options["profile"] = os.environ["CONTENOX_LSP_TTFT_PROFILE"]
    client = await start_client(root, "neovim", options)
    try:
        await wait_until(lambda: request(client, "contenox/status", None),
                         lambda s: s["index"]["state"] == "ready" and s["model"], 300)
        path = root / "json" / "decoder.py"
        text = path.read_text(encoding="utf-8")
        uri = open_doc(client, path, text)
        # A session that has answered once (the prefix is warm), as in daily use.
        await request(client, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
        line = text.splitlines(keepends=True).index(BODY_LINE)
        explained = await request(client, "contenox/explainContext", None)
        stable = sum(s["tokens"] for s in explained["segments"] if s["kind"] in STABLE_KINDS)
        rows = []
        for i in range(ROUNDS):
            change_doc(client, uri, i + 2,
                       [(line, 0, line, 0, f"        _probe{i} = len(s)  # edit {i}\n")])
            t0 = time.monotonic()
            await asyncio.sleep(IDLE_S)
            if prefill_on:  # a slow machine may need longer than the pause: wait for it
                await wait_until(lambda: request(client, "contenox/status", None),
                                 lambda s: s["state"] == "warm", 300)
            idle = time.monotonic() - t0
            r = await request(client, "contenox/ask",
                              {"question": f"{QUESTION} ({i})", "maxTokens": 8})
            m = r["metrics"]
            rows.append({"ttftMs": round(m["ttftMs"]), "newTokens": m["newTokens"],
                         "reusedTokens": m["reusedTokens"], "prefillMs": round(m["prefillMs"]),
                         "idleS": round(idle, 1)})
        return {"prefillOnIdle": prefill_on, "stableTokens": stable, "rounds": rows,
                "medianTtftMs": statistics.median(r["ttftMs"] for r in rows),
                "loadavg": os.getloadavg()}
    finally:
        await stop_client(client)


async def test_ttft_after_body_edit_prefill_on_vs_off(tmp_path: Path) -> None:
    on = await _run(_stdlib_copy(tmp_path / "on"), True)
    off = await _run(_stdlib_copy(tmp_path / "off"), False)
    print("\n" + json.dumps({"on": on, "off": off}, indent=1))
    assert 1500 <= on["stableTokens"] <= 2600
    # Behaviour: pre-prefilled, only the user turn is new; without it, the diff is too.
    assert all(r["newTokens"] < 40 for r in on["rounds"])
    assert all(r["newTokens"] > 40 for r in off["rounds"])
