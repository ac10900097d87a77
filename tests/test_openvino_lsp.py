"""``backend = "openvino"`` through everything above the engine: the language server over stdio
(pre-prefill, explainContext, ask, status, snapshot refusal) and the CLI's ask/explain-context.

Same converted model as ``test_openvino.py`` (the ``ov_model_dir`` fixture); skipped only when
``openvino_genai`` is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import openvino_profile_toml
from pygls.exceptions import JsonRpcException
from pytest_lsp import LanguageClient
from test_lsp_support import (
    change_doc,
    copy_stdlib_json,
    open_doc,
    request,
    start_client,
    stop_client,
    wait_until,
    wait_warm,
)

BLOCK = 32
QUESTION = "What does JSONDecoder.decode return?"
BODY_LINE = "        obj, end = self.raw_decode(s, idx=_w(s, 0).end())\n"


@pytest.fixture(scope="module")
def ov_profile(ov_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return openvino_profile_toml(ov_model_dir, tmp_path_factory.mktemp("ovp") / "ov.toml")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("ovlsp"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ov_server(workspace: Path, ov_profile: Path) -> AsyncIterator[LanguageClient]:
    client = await start_client(workspace, "neovim", {
        "profile": str(ov_profile),
        "snapshotDir": str(workspace.parent / "snapshots"),
    })
    await wait_warm(client)
    yield client
    await stop_client(client)


def _segments(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["label"]: s for s in result["segments"]}


async def test_status_reports_the_backend_and_its_capabilities(ov_server: LanguageClient) -> None:
    status = await request(ov_server, "contenox/status", None)
    assert status["state"] == "warm"
    assert status["backend"] == "openvino"
    assert status["model"].startswith("OpenVINO IR")
    caps = status["capabilities"]
    assert caps["snapshots"] is False and caps["branches"] is False
    assert caps["prefix_reuse"] is True


async def test_explain_counts_whole_blocks_after_pre_prefill(ov_server: LanguageClient) -> None:
    explained = await wait_warm(ov_server)
    assert explained["backend"] == "openvino"
    assert explained["reuseGranularity"] == BLOCK
    assert explained["capabilities"]["snapshots"] is False
    assert explained["pendingPrefillTokens"] == 0
    reused = explained["reusedTokens"]
    assert reused > 0 and reused % BLOCK == 0
    # Whole blocks only: the pre-prefilled prefix ends within one block of the user turn.
    assert explained["userStart"] - BLOCK < reused <= explained["userStart"]
    segs = _segments(explained)
    assert segs["system"]["status"] == "cached"
    assert segs["repo map"]["status"] == "cached"
    assert segs["user"]["status"] == "new"
    for seg in explained["segments"]:
        assert (seg["status"] == "cached") == (seg["tokenEnd"] <= reused)


async def test_ask_reuses_the_pre_prefilled_prefix(ov_server: LanguageClient) -> None:
    before = await wait_warm(ov_server)
    result = await request(ov_server, "contenox/ask", {"question": QUESTION, "maxTokens": 8})
    assert result["text"].strip(), json.dumps(result)
    m = result["metrics"]
    assert m["reusedTokens"] % BLOCK == 0
    assert m["reusedTokens"] >= before["reusedTokens"] > 0
    assert m["newTokens"] == m["promptTokens"] - m["reusedTokens"]
    assert 0 < m["decodeTokens"] <= 8
    # The same question again gives the same greedy answer.
    again = await request(ov_server, "contenox/ask", {"question": QUESTION, "maxTokens": 8})
    assert again["text"] == result["text"]


async def test_body_edit_invalidates_the_diff_then_pre_prefills_it(
    ov_server: LanguageClient, workspace: Path
) -> None:
    path = workspace / "json" / "decoder.py"
    text = path.read_text(encoding="utf-8")
    uri = open_doc(ov_server, path, text)
    await wait_warm(ov_server)
    before = _segments(await request(ov_server, "contenox/explainContext", None))
    line = text.splitlines(keepends=True).index(BODY_LINE)
    change_doc(ov_server, uri, 2, [(line, 0, line, 0, "        _probe = len(s)  # edited\n")])
    warmed = await wait_until(
        lambda: request(ov_server, "contenox/explainContext", None),
        lambda r: r["pendingPrefillTokens"] == 0 and "diff" in _segments(r),
        timeout=300,
    )
    segs = _segments(warmed)
    assert segs["repo map"]["tokenHash"] == before["repo map"]["tokenHash"]
    assert segs["repo map"]["status"] == "cached"
    assert warmed["reusedTokens"] > segs["diff"]["tokenStart"]
    result = await request(ov_server, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
    assert result["metrics"]["reusedTokens"] >= warmed["reusedTokens"]


async def test_snapshot_save_and_load_are_refused_without_side_effects(
    ov_server: LanguageClient, workspace: Path
) -> None:
    for action in ("save", "load"):
        with pytest.raises(JsonRpcException) as err:
            await request(ov_server, "contenox/snapshot", {"action": action})
        assert err.value.code == -32005
        assert err.value.data["code"] == "unsupported_capability"
        assert err.value.data["backend"] == "openvino"
    assert not (workspace.parent / "snapshots").exists()
    listed = await request(ov_server, "contenox/snapshot", {"action": "list"})
    assert listed["snapshots"] == []


def _cli(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "contenox_lsp", *args],
                         capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-4000:]
    return dict(json.loads(out.stdout))


def test_cli_ask_and_explain_context_on_openvino(
    ov_profile: Path, workspace: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cache")}
    common = ("--workspace", str(workspace), "--profile", str(ov_profile), "--map-tokens", "192")
    answer = _cli("ask", QUESTION, *common, "--max-tokens", "4", "--json", env=env)
    m = answer["metrics"]
    assert answer["text"].strip()
    # A new process holds no KV and this backend keeps no snapshots: everything is prefilled.
    assert m["reusedTokens"] == 0 and m["restoredFromSnapshot"] == 0
    assert m["stableSnapshotSaved"] is False
    assert not (tmp_path / "cache" / "snapshots").exists() or not any(
        (tmp_path / "cache" / "snapshots").rglob("*.snap")
    )
    explained = _cli("explain-context", *common, "--question", QUESTION, "--json", env=env)
    assert explained["cachedFrom"] == "none"
    assert {row["status"] for row in explained["segments"]} == {"new"}
