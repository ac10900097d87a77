"""``contenox/nextEdit`` on the real server and the real embedded model (a base model: the
``base`` layout; the answers show the machinery, not the quality): the request shape and its
Copilot aliases, an edit that prefills only what it appended, stale versions, bad input, the
accept/reject commands and the status counters."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from pygls.exceptions import JsonRpcInvalidParams
from pytest_lsp import LanguageClient
from test_lsp_support import (
    change_doc,
    copy_stdlib_json,
    open_doc,
    raw_request,
    request,
    start_client,
    stop_client,
    wait_until,
    wait_warm,
)

from contenox_lsp.next_edit.history import PAUSE_S

SOURCE = ("def area(width, height):\n    return width * height\n\n\n"
          "def volume(width, height, depth):\n    return width * height * depth\n")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_stdlib_json(tmp_path_factory.mktemp("next-edit"))
    (root / "geo.py").write_text(SOURCE, "utf-8")
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(workspace: Path) -> AsyncIterator[LanguageClient]:
    c = await start_client(workspace, "neovim")
    c.doc_uri = open_doc(c, workspace / "geo.py", SOURCE)  # type: ignore[attr-defined]
    await wait_warm(c)
    yield c
    await stop_client(c)


async def next_edit(client: LanguageClient, line: int, character: int, version: int | None,
                    method: str = "contenox/nextEdit") -> dict[str, Any]:
    td: dict[str, Any] = {"uri": client.doc_uri}  # type: ignore[attr-defined]
    if version is not None:
        td["version"] = version
    out: dict[str, Any] = await raw_request(client, method, {
        "textDocument": td, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}}, timeout=300)
    return out


async def status(client: LanguageClient) -> dict[str, Any]:
    return dict((await request(client, "contenox/status", None))["nextEdit"])


async def test_the_server_advertises_next_edits(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert caps.experimental["contenoxNextEdit"]["methods"] == [
        "contenox/nextEdit", "textDocument/copilotInlineEdit"]


async def test_an_edit_then_a_next_edit_request_prefills_only_what_it_appended(
        client: LanguageClient) -> None:
    uri = client.doc_uri  # type: ignore[attr-defined]
    # Rename a parameter in the first function: the model may propose the same in its body.
    change_doc(client, uri, 2, [(0, 9, 0, 14, "w")])
    first = await next_edit(client, 0, 10, version=2)
    assert isinstance(first["edits"], list)
    for edit in first["edits"]:
        assert edit["textDocument"] == {"uri": uri, "version": 2}
        assert edit["command"]["command"] == "contenox.acceptNextEdit"
        assert edit["text"] is not None and edit["range"]["start"]["line"] >= 0
    st = await status(client)
    assert st["requests"] == 1 and st["format"] == "base"
    assert st["historySteps"] == 1 and st["lastDecodeTokens"] >= 1
    # One more keystroke in the same word after a pause (a pause ends a step): a new history
    # step. The repository part, the file window and the first step stay; the new step and
    # the region are prefilled.
    await asyncio.sleep(PAUSE_S + 0.2)
    change_doc(client, uri, 3, [(0, 10, 0, 10, "d")])
    await next_edit(client, 0, 11, version=3)
    st = await status(client)
    assert st["requests"] == 2 and st["historySteps"] == 2
    assert st["lastReusedTokens"] > 0
    assert st["lastNewTokens"] < st["lastPromptTokens"] // 2
    assert st["lastNewTokens"] == st["lastPromptTokens"] - st["lastReusedTokens"]


async def test_after_an_edit_settles_a_request_prefills_only_the_region(
        client: LanguageClient) -> None:
    """The idle warm-up prefills the prompt up to the region (the new history step included)
    and parks it: the request after it prefills the region and at most a micro-batch more."""
    uri = client.doc_uri  # type: ignore[attr-defined]
    before = (await status(client))["warmUps"]
    change_doc(client, uri, 4, [(4, 11, 4, 16, "w")])  # volume(width -> volume(w
    await wait_until(lambda: status(client), lambda st: st["warmUps"] > before, 300)
    await next_edit(client, 4, 12, version=4)
    st = await status(client)
    assert st["lastRegionTokens"] > 0
    assert st["lastNewTokens"] <= st["lastRegionTokens"] + 32


async def test_the_copilot_alias_answers_in_the_same_shape(client: LanguageClient) -> None:
    out = await next_edit(client, 0, 11, version=4, method="textDocument/copilotInlineEdit")
    assert set(out) == {"edits"} and isinstance(out["edits"], list)
    client.protocol.notify("textDocument/didShowInlineEdit", {"item": {}})
    assert (await status(client))["requests"] == 4


async def test_include_prompt_returns_the_prompt_the_model_saw(client: LanguageClient) -> None:
    out: dict[str, Any] = await raw_request(client, "contenox/nextEdit", {
        "textDocument": {"uri": client.doc_uri, "version": 4},  # type: ignore[attr-defined]
        "position": {"line": 4, "character": 12}, "includePrompt": True}, timeout=300)
    prompt = out["prompt"]
    assert set(prompt) == {"stable", "history", "region"}
    region = "".join(text for text, _special in prompt["region"])
    assert "def volume(w, height, depth):" in region  # the document as it is now
    assert any("volume(w" in text for text, _ in prompt["history"])  # the step that did it
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, "contenox/nextEdit", {
            "textDocument": {"uri": client.doc_uri},  # type: ignore[attr-defined]
            "position": {"line": 0, "character": 0}, "includePrompt": "yes"})


async def test_a_stale_version_gets_nothing_and_bad_input_is_invalid_params(
        client: LanguageClient, workspace: Path) -> None:
    before = (await status(client))["requests"]
    assert await next_edit(client, 0, 0, version=1) == {"edits": []}
    assert (await status(client))["requests"] == before  # no model call for old text
    for line, character in ((40, 0), (0, 400)):
        with pytest.raises(JsonRpcInvalidParams):
            await next_edit(client, line, character, version=None)
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, "contenox/nextEdit", {
            "textDocument": {"uri": (workspace / "absent.py").as_uri()},
            "position": {"line": 0, "character": 0}})
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, "contenox/nextEdit", {"position": {"line": 0}})


async def test_accepting_or_rejecting_an_unknown_suggestion_counts_nothing(
        client: LanguageClient) -> None:
    for cmd in ("contenox.acceptNextEdit", "contenox.rejectNextEdit"):
        out = await raw_request(client, "workspace/executeCommand",
                                {"command": cmd, "arguments": [{"id": 999999}]})
        assert out == {"counted": False}
    st = await status(client)
    assert st["accepted"] == 0 and st["rejected"] == 0
