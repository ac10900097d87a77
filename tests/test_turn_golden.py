"""One turn pipeline: the CLI and the language server assemble the same prompt.

For a fixed workspace, file, line and question, ``contenox-lsp explain-context --json`` and the
server's ``contenox/explainContext`` report the same segments with the same token hashes (so
the same token ids), in the same schema; and a stable-prefix snapshot the CLI's ``ask`` saved
is listed and restored by the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pytest_lsp import LanguageClient
from test_lsp_support import (
    FAST_OPTIONS,
    open_doc,
    request,
    server_env,
    start_client,
    stop_client,
    wait_until,
    wait_warm,
)
from test_workspace_session import make_repo

QUESTION = "What does JSONObject return?"
LINE = 140  # 1-based, inside JSONObject in json/decoder.py


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("golden") / "ws")
    # An uncommitted edit, so the diff segment is not empty.
    init = root / "json" / "__init__.py"
    init.write_text(init.read_text("utf-8") + "\n# local note\n", "utf-8")
    return root


def _cli(root: Path, *args: str) -> dict[str, Any]:
    common = ("--workspace", str(root), "--file", str(root / "json" / "decoder.py"),
              "--line", str(LINE), "--map-tokens", str(FAST_OPTIONS["repoMapTokens"]),
              "--code-tokens", str(FAST_OPTIONS["codeTokens"]),
              "--max-tokens", str(FAST_OPTIONS["maxTokens"]), "--json")
    out = subprocess.run([sys.executable, "-m", "contenox_lsp", *args, *common],
                         capture_output=True, text=True, env=server_env(root), timeout=600)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def server(workspace: Path) -> AsyncIterator[LanguageClient]:
    # Automatic snapshots off: the CLI's ask is what saves the stable prefix here (the other
    # direction, the server saving and the CLI restoring, is the last test).
    client = await start_client(workspace, "neovim", {"autoSnapshots": False})
    open_doc(client, workspace / "json" / "decoder.py")
    await wait_warm(client)
    yield client
    await stop_client(client)


def _segments(explained: dict[str, Any]) -> list[tuple[str, str, int, str]]:
    return [(s["kind"], s["label"], s["tokens"], s["tokenHash"]) for s in explained["segments"]]


async def test_cli_and_server_assemble_the_same_tokens(
    workspace: Path, server: LanguageClient
) -> None:
    uri = (workspace / "json" / "decoder.py").as_uri()
    served = await request(server, "contenox/explainContext", {
        "textDocument": {"uri": uri}, "position": {"line": LINE - 1, "character": 0},
        "question": QUESTION,
    })
    cli = _cli(workspace, "explain-context", "--question", QUESTION)
    assert _segments(cli) == _segments(served)
    assert [s["kind"] for s in served["segments"]].count("diff") == 1
    for key in ("totalTokens", "userStart", "profileId", "backend", "nCtx",
                "reuseGranularity", "budget"):
        assert cli[key] == served[key], key
    # The one budget bounds what the doors built beside the question (diff, map and code).
    assert 0 < served["budget"]["besideQuestion"] <= served["budget"]["contextTokens"]
    # One schema: the CLI's document has every field the server's has.
    assert set(served) <= set(cli)
    assert set(served["segments"][0]) == set(cli["segments"][0])


async def test_a_snapshot_saved_by_the_cli_is_restored_by_the_server(
    workspace: Path, server: LanguageClient
) -> None:
    asked = _cli(workspace, "ask", QUESTION)
    assert asked["metrics"]["stableSnapshotSaved"] is True
    # Two prefill calls (the stable prefix alone, then the rest): the engine's TTFT spans both.
    m = asked["metrics"]
    assert m["prefillMs"] <= m["engineTtftMs"] <= m["ttftMs"]
    stable = asked["metrics"]["stableTokens"]
    listed = await request(server, "contenox/snapshot", {"action": "list"})
    assert stable in [s["tokens"] for s in listed["snapshots"]]
    loaded = await request(server, "contenox/snapshot", {"action": "load"})
    assert loaded["loaded"] is True
    assert loaded["snapshot"]["tokens"] == stable


async def test_the_cli_restores_the_stable_prefix_the_server_saved(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "ws")
    client = await start_client(root, "neovim")
    try:
        open_doc(client, root / "json" / "decoder.py")
        explained = await wait_warm(client)
        stable = explained["stableEnd"]
        await wait_until(lambda: request(client, "contenox/status", None),
                         lambda s: (s["snapshots"]["lastSaved"] or {}).get("tokens") == stable)
    finally:
        await stop_client(client)
    asked = _cli(root, "ask", QUESTION)
    assert asked["metrics"]["restoredFromSnapshot"] == stable > 0
    assert asked["metrics"]["stableSnapshotSaved"] is False  # it was there already
