"""Automatic snapshots on the real server and the real model: the stable prefix is saved once
the idle prefill has made it resident, a restarted server restores it before prefilling, the
first ask after the restart answers exactly as a cold server does, and a corrupt snapshot at
start-up is skipped (and said so) without holding the server back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lsprotocol import types
from test_lsp_support import (
    copy_stdlib_json,
    request,
    start_client,
    stop_client,
    wait_until,
    wait_warm,
)

QUESTION = {"question": "What does the json package do?", "maxTokens": 8}


async def status_of(client: Any) -> dict[str, Any]:
    result: dict[str, Any] = await request(client, "contenox/status", None)
    return result


async def warm_server(root: Path, options: dict[str, Any] | None = None) -> Any:
    client = await start_client(root, "neovim", options)
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(
            uri=(root / "json" / "decoder.py").as_uri(), language_id="python", version=1,
            text=(root / "json" / "decoder.py").read_text(encoding="utf-8"))))
    return client


async def test_a_restarted_server_restores_the_stable_prefix(tmp_path: Path) -> None:
    root = copy_stdlib_json(tmp_path)
    first = await warm_server(root)
    try:
        explain = await wait_warm(first)
        stable = explain["stableEnd"]
        saved = await wait_until(lambda: status_of(first),
                                 lambda s: s["snapshots"]["lastSaved"] is not None)
        assert saved["snapshots"]["lastSaved"]["tokens"] == stable > 0
        assert saved["snapshots"]["restored"] is None  # nothing to restore on a first start
    finally:
        await stop_client(first)

    second = await warm_server(root)
    try:
        status = await wait_until(lambda: status_of(second),
                                  lambda s: s["snapshots"]["restored"] is not None)
        assert status["snapshots"]["restored"]["tokens"] == stable
        explain = await wait_warm(second)
        assert explain["stableEnd"] == stable
        warm = await request(second, "contenox/ask", QUESTION)
        assert warm["metrics"]["reusedTokens"] >= stable
    finally:
        await stop_client(second)

    cold = await warm_server(root, {"autoSnapshots": False, "prefillOnIdle": False})
    try:
        await wait_until(lambda: status_of(cold), lambda s: s["model"] is not None
                         and s["index"]["state"] == "ready" and not s["contextStale"])
        status = await status_of(cold)
        assert status["snapshots"]["auto"] is False and status["snapshots"]["restored"] is None
        reference = await request(cold, "contenox/ask", QUESTION)
        assert reference["metrics"]["reusedTokens"] < stable  # really cold
    finally:
        await stop_client(cold)
    assert warm["text"] == reference["text"]


async def test_a_corrupt_snapshot_at_start_up_is_skipped(tmp_path: Path) -> None:
    root = copy_stdlib_json(tmp_path)
    first = await warm_server(root)
    try:
        await wait_warm(first)
        await wait_until(lambda: status_of(first),
                         lambda s: s["snapshots"]["lastSaved"] is not None)
        listed = await request(first, "contenox/snapshot", {"action": "list"})
    finally:
        await stop_client(first)
    (entry,) = listed["snapshots"]
    path = Path(entry["path"])
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)  # zeros: the checksum no longer matches
    path.write_bytes(bytes(data))

    second = await warm_server(root)
    try:
        status = await wait_until(lambda: status_of(second),
                                  lambda s: s["snapshots"]["skipped"] is not None)
        assert "skipped" in status["snapshots"]["skipped"]
        assert status["snapshots"]["restored"] is None
        explain = await wait_warm(second)  # warms by prefilling instead
        assert explain["pendingPrefillTokens"] == 0
        again = await wait_until(lambda: status_of(second),
                                 lambda s: s["snapshots"]["lastSaved"] is not None)
        assert again["snapshots"]["lastSaved"]["tokens"] == explain["stableEnd"]
    finally:
        await stop_client(second)


def test_kill_9_at_any_moment_leaves_nothing_that_loads(tmp_path: Path) -> None:
    """Servers killed with SIGKILL while warming, right after a save and while saving the
    next stable prefix: each next start either restores a snapshot whole or skips it, never
    loads a broken one, and no temporary file survives a start."""
    from raw_lsp import RawServer

    root = copy_stdlib_json(tmp_path)
    store_dirs = tmp_path / "contenox-cache" / "snapshots"

    def status(srv: RawServer) -> dict[str, Any]:
        result: dict[str, Any] = srv.request("contenox/status")["result"]
        return result

    def poll(srv: RawServer, ok: Any, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            st = status(srv)
            if ok(st) or time.monotonic() > deadline:
                assert ok(st), st
                return st
            time.sleep(0.05)

    kills = [
        lambda srv: poll(srv, lambda s: s["state"] == "warming"),  # mid-prefill
        lambda srv: poll(srv, lambda s: s["snapshots"]["lastSaved"] is not None),  # after
        lambda srv: (srv.request("contenox/pin", {"uri": (root / "json" / "encoder.py")
                                                  .as_uri()}),
                     time.sleep(0.4)),  # while the new stable prefix is prefilled and saved
    ]
    for kill_when in kills:
        srv = RawServer(root)
        try:
            kill_when(srv)
        finally:
            srv.proc.kill()
            srv.proc.wait(30)
            srv.close()
    srv = RawServer(root)
    try:
        st = poll(srv, lambda s: s["state"] == "warm" and s["pendingPrefillTokens"] == 0
                  and not s["contextStale"])
        assert st["snapshots"]["skipped"] is None, st["snapshots"]
        assert st["snapshots"]["restored"] is not None  # the save before the 2nd kill
        # The store's temporary names (and the conversations file's); ".lock" is permanent.
        leftovers = [p.name for p in store_dirs.rglob("*") if p.name.startswith(
            (".tmp-", ".conversations-")) or (p.name.startswith(".") and p.suffix == ".tmp")]
        assert leftovers == []
    finally:
        srv.close()
