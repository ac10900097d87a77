"""``contenox-lsp eval next-edit``: replay commits against the real server, score its
next-edit suggestions.

Each task's hunks are typed as an editor's edit stream (``edit_replay``); after each, once the
edit has settled (the server's idle warm-up of the next-edit prompt done, or ``settle_s``
passed), one ``contenox/nextEdit`` at the cursor. A suggestion is an exact match when it turns
the document into the one with the next hunk applied; a reversal is one the server dropped
because it would undo the user's last step. The bench's next-edit section runs the same replay
and adds the baselines (``next_edit_trace``).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import IO, Any

from lsprotocol import types

from contenox_bench.edit_replay import (
    Hunk,
    apply_edit,
    apply_hunk,
    replay,
    write_workspace,
)
from contenox_bench.lspclient import EditorClient
from contenox_bench.trace import wait_ready

DIFF_KEYS = ("reversals", "lookupDrafted", "lookupAccepted", "warmUps", "truncated")


async def run_replay(tasks: list[dict[str, Any]], root: Path, options: dict[str, Any],
                     settle_s: float, err: IO[str]) -> dict[str, Any]:
    """One server on a workspace of the tasks' files; a row per request."""
    write_workspace(root, tasks)
    client = EditorClient(err)
    await client.start(root, options)
    rows: list[dict[str, Any]] = []
    try:
        await wait_ready(client, True, 900.0)
        for task in tasks:
            path = root / task["path"]

            async def ask(i: int, text: str, cursor: tuple[int, int], nxt: Hunk | None,
                          task: dict[str, Any] = task, path: Path = path) -> None:
                before = await _settle(client, settle_s)
                t0 = time.perf_counter()
                out = await client.request("contenox/nextEdit", {
                    "textDocument": {"uri": path.as_uri(), "version": client.versions[path]},
                    "position": {"line": cursor[0], "character": cursor[1]},
                    "context": {"triggerKind": 2}, "includePrompt": True}, 600)
                latency = (time.perf_counter() - t0) * 1000.0
                after = (await client.request("contenox/status", None))["nextEdit"]
                edit = out["edits"][0] if out.get("edits") else None
                rows.append(_row(task, i, text, edit, nxt, latency, before, after,
                                 out.get("prompt")))
                if edit is not None:  # the replay types the real next hunk instead
                    # Typed: the client converts the params of LSP's own methods.
                    await client.request(types.WORKSPACE_EXECUTE_COMMAND,
                                         types.ExecuteCommandParams(
                                             command="contenox.rejectNextEdit",
                                             arguments=edit["command"]["arguments"]))

            await replay(client, root, task, 0.0, ask)
        status = (await client.request("contenox/status", None))["nextEdit"]
    finally:
        await client.close()
    return {"rows": rows, "status": status}


async def _settle(client: EditorClient, settle_s: float) -> dict[str, Any]:
    """Wait until the edit has settled: the server idle with its next-edit prompt warmed
    (after the first request: the warm-up needs a next-edit client), at most ``settle_s``."""
    deadline = time.monotonic() + settle_s
    await asyncio.sleep(0.5)  # past the server's debounce
    st = (await client.request("contenox/status", None))
    first_warm = st["nextEdit"]["warmUps"]
    while time.monotonic() < deadline:
        ne = st["nextEdit"]
        idle = st["state"] == "warm" and not st.get("contextStale") \
            and st.get("pendingPrefillTokens") == 0
        if idle and (ne["requests"] == 0 or ne["warmUps"] > first_warm):
            break
        await asyncio.sleep(0.25)
        st = await client.request("contenox/status", None)
    return dict(st["nextEdit"])


def _row(task: dict[str, Any], i: int, text: str, edit: dict[str, Any] | None,
         nxt: Hunk | None, latency: float, before: dict[str, Any], after: dict[str, Any],
         prompt: dict[str, Any] | None) -> dict[str, Any]:
    exact = None
    if nxt is not None:
        exact = edit is not None and apply_edit(text, edit) == apply_hunk(text, nxt)
    d = {k: (after.get(k) or 0) - (before.get(k) or 0) for k in DIFF_KEYS}
    model_call = after["requests"] > before["requests"] and after["lastPromptTokens"] is not None
    return {
        "task": task["id"], "hunk": i, "latency_ms": latency,
        "shown": edit is not None, "exact": exact, "reversal": d["reversals"] > 0,
        "warm": d["warmUps"] > 0 or before["warmUps"] > 0,
        "new_tokens": after["lastNewTokens"] if model_call else None,
        "reused_tokens": after["lastReusedTokens"] if model_call else None,
        "prompt_tokens": after["lastPromptTokens"] if model_call else None,
        "decode_tokens": after["lastDecodeTokens"] if model_call else None,
        "region_tokens": after["lastRegionTokens"] if model_call else None,
        "lookup_drafted": d["lookupDrafted"], "lookup_accepted": d["lookupAccepted"],
        "edit": edit and {"range": edit["range"], "text": edit["text"]},
        "prompt": prompt,
    }


def summarize(rows: list[dict[str, Any]], n_tasks: int) -> dict[str, Any]:
    scored = [r for r in rows if r["exact"] is not None]
    lat = [r["latency_ms"] for r in rows]
    return {
        "tasks": n_tasks,
        "requests": len(rows),
        "scored": len(scored),  # requests with a next hunk to compare against
        "shown": sum(r["shown"] for r in rows),
        "exact": sum(bool(r["exact"]) for r in scored),
        "exact_rate": round(sum(bool(r["exact"]) for r in scored) / len(scored), 4)
        if scored else None,
        "reversals": sum(r["reversal"] for r in rows),
        "reversal_rate": round(sum(r["reversal"] for r in rows) / len(rows), 4) if rows else None,
        "latency_ms_p50": round(statistics.median(lat), 1) if lat else None,
    }


def run(tasks: list[dict[str, Any]], out: Path, options: dict[str, Any],
        settle_s: float) -> dict[str, Any]:
    """The eval: replay, score, write ``next-edit-eval.json`` into ``out``."""
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="next-edit-eval-") as tmp, \
            open(out / "next-edit-server.log", "w", encoding="utf-8") as err:
        result = asyncio.run(run_replay(tasks, Path(tmp) / "ws", options, settle_s, err))
    rows = [{k: v for k, v in r.items() if k != "prompt"} for r in result["rows"]]
    doc = {"summary": summarize(rows, len(tasks)), "format": result["status"].get("format"),
           "rows": rows}
    (out / "next-edit-eval.json").write_text(json.dumps(doc, indent=1) + "\n", "utf-8")
    return doc


def format_table(doc: dict[str, Any]) -> str:
    s = doc["summary"]

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    return (f"next-edit eval ({doc.get('format')} format): {s['tasks']} tasks, "
            f"{s['requests']} requests ({s['scored']} with a next hunk)\n"
            f"  suggestions shown   {s['shown']}\n"
            f"  exact-region match  {s['exact']}/{s['scored']} ({pct(s['exact_rate'])})\n"
            f"  reversals dropped   {s['reversals']} ({pct(s['reversal_rate'])} of requests)\n"
            f"  latency p50         {s['latency_ms_p50']} ms\n")
