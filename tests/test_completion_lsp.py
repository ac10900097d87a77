"""``textDocument/inlineCompletion`` on the real server and the real embedded model: a
completion is returned, a keystroke prefills only the new tokens, typed-through answers
without the model, stale versions and superseded requests get nothing, bad input is
InvalidParams, and chat and completion keep their prefixes resident side by side."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
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

SOURCE = "import json\n\n\ndef load_config(path):\n    with open(path) as f:\n        return "
LINE, COL = 5, len("        return ")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_stdlib_json(tmp_path_factory.mktemp("completion"))
    (root / "config.py").write_text(SOURCE, "utf-8")
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def client(workspace: Path) -> AsyncIterator[LanguageClient]:
    c = await start_client(workspace, "neovim")
    c.doc_uri = open_doc(c, workspace / "config.py", SOURCE)  # type: ignore[attr-defined]
    await wait_warm(c)
    yield c
    await stop_client(c)


async def complete(client: LanguageClient, line: int, character: int,
                   version: int | None = None) -> dict[str, Any]:
    td: dict[str, Any] = {"uri": client.doc_uri}  # type: ignore[attr-defined]
    if version is not None:
        td["version"] = version
    result: dict[str, Any] = await raw_request(client, "textDocument/inlineCompletion", {
        "textDocument": td, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}, "formattingOptions": {"tabSize": 4, "insertSpaces": True},
    }, timeout=300)
    return result


async def completion_status(client: LanguageClient) -> dict[str, Any]:
    status: dict[str, Any] = await request(client, "contenox/status", None)
    return dict(status["completion"])


def end_of(text: str) -> dict[str, int]:
    """The LSP position at the end of ``text``."""
    lines = text.split("\n")
    return {"line": len(lines) - 1, "character": len(lines[-1])}


async def invoke_completion(client: LanguageClient, uri: str,
                            point: dict[str, int]) -> dict[str, Any]:
    """An inline completion the user invoked at ``point``; the completion status after it."""
    await raw_request(client, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": point, "context": {"triggerKind": 1}},
        timeout=300)
    return await completion_status(client)


async def warm_completion_at(client: LanguageClient, uri: str,
                             point: dict[str, int]) -> dict[str, Any]:
    """Tell the server where the cursor is (a code action there) and wait until the idle
    time has warmed the completion prompt (the ``completion`` branch); its status then."""
    await raw_request(client, "textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": point, "end": point},
        "context": {"diagnostics": []}})

    async def warmed() -> dict[str, Any]:
        await wait_warm(client)
        return await completion_status(client)

    return await wait_until(warmed, lambda s: "completion" in s["residentBranches"], 300)


async def test_the_server_advertises_inline_completion(client: LanguageClient) -> None:
    caps = client.init_result.capabilities  # type: ignore[attr-defined]
    assert caps.inline_completion_provider


async def test_a_completion_then_a_keystroke_prefills_only_the_new_tokens(
    client: LanguageClient,
) -> None:
    first = await complete(client, LINE, COL, version=1)
    assert len(first["items"]) == 1
    item = first["items"][0]
    assert item["insertText"].strip()
    assert "\n" not in item["insertText"]  # a single-line trigger stops at the line's end
    assert item["range"]["start"] == {"line": LINE, "character": COL}
    assert item["command"]["command"] == "contenox.acceptCompletion"
    st = await completion_status(client)
    assert st["shown"] == 1 and st["mode"] == "prefix" and st["fim"] is False
    explained = await request(client, "contenox/explainContext", None)
    assert explained["completionMode"] == "prefix"  # the embedded base model has no FIM tokens

    # One more character, not the start of the suggestion: a model call that reuses the
    # whole prompt except its last reuse block and the new character.
    typed = "z" if not item["insertText"].startswith("z") else "q"
    change_doc(client, client.doc_uri, 2,  # type: ignore[attr-defined]
               [(LINE, COL, LINE, COL, typed)])
    await complete(client, LINE, COL + 1, version=2)
    st = await completion_status(client)
    explained = await request(client, "contenox/explainContext", None)
    # What a warm prefill recomputes beside the new tokens: the reuse block, or the invariant
    # schedule's minimum micro-batch (contenox/status exactReuse).
    exact = (await request(client, "contenox/status", None))["exactReuse"] or {}
    granularity = max(explained["reuseGranularity"], exact.get("minBatch", 1))
    assert st["requests"] == 2
    assert st["lastReusedTokens"] >= st["lastContextTokens"]  # the repo-level prefix is warm
    assert st["lastNewTokens"] <= granularity + 4
    assert st["lastNewTokens"] == st["lastPromptTokens"] - st["lastReusedTokens"]


async def test_typing_the_start_of_the_suggestion_answers_the_rest(
    client: LanguageClient,
) -> None:
    col = COL + 1
    shown = await complete(client, LINE, col, version=2)
    if not shown["items"]:
        pytest.fail("no completion to type through")
    text = shown["items"][0]["insertText"]
    before = await completion_status(client)
    change_doc(client, client.doc_uri, 3,  # type: ignore[attr-defined]
               [(LINE, col, LINE, col, text[0])])
    rest = await complete(client, LINE, col + 1, version=3)
    after = await completion_status(client)
    if len(text) == 1:
        return  # nothing left to offer
    assert rest["items"][0]["insertText"] == text[1:]
    assert after["typedThrough"] == before["typedThrough"] + 1
    assert after["requests"] == before["requests"]  # no model call


async def test_a_keystroke_starts_the_completion_the_editor_asks_for_next(
    client: LanguageClient, workspace: Path,
) -> None:
    """While the user types with completions on, a keystroke starts the completion at the
    cursor it leaves as background work; the request that follows the editor's debounce takes
    it over (no second model call) and gets what asking afresh there gives."""
    path = workspace / "speculate.py"
    path.write_text(SOURCE, "utf-8")
    uri = open_doc(client, path, SOURCE)

    async def ask(character: int, version: int) -> dict[str, Any]:
        result: dict[str, Any] = await raw_request(client, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri, "version": version},
            "position": {"line": LINE, "character": character},
            "context": {"triggerKind": 2}}, timeout=300)
        return result

    await ask(COL, 1)  # the user is typing with completions on
    before = await completion_status(client)
    change_doc(client, uri, 2, [(LINE, COL, LINE, COL, "c")])
    await wait_until(lambda: completion_status(client),
                     lambda st: st["speculated"] > before["speculated"])
    taken = await ask(COL + 1, 2)
    after = await completion_status(client)
    assert after["speculationHits"] == before["speculationHits"] + 1
    assert after["requests"] == before["requests"] + 1
    assert after["lastNewTokens"] == after["lastPromptTokens"] - after["lastReusedTokens"]
    afresh = await ask(COL + 1, 2)  # nothing speculated for it now: a model call
    final = await completion_status(client)
    assert final["speculationHits"] == after["speculationHits"]
    assert final["requests"] == after["requests"] + 1
    assert [i["insertText"] for i in taken["items"]] == [i["insertText"] for i in afresh["items"]]


async def test_a_stale_version_gets_an_empty_list(client: LanguageClient) -> None:
    assert (await complete(client, LINE, COL, version=1))["items"] == []


async def test_a_new_request_supersedes_the_running_one(client: LanguageClient) -> None:
    doc = await request(client, "contenox/document",
                        {"textDocument": {"uri": client.doc_uri}})  # type: ignore[attr-defined]
    line = doc["text"].split("\n")[LINE]
    # Sent back to back: the second arrives while the first is still on the engine.
    first = asyncio.ensure_future(complete(client, LINE, len(line) - 1))
    second = asyncio.ensure_future(complete(client, LINE, len(line)))
    try:
        superseded = await first
    except JsonRpcRequestCancelled:
        superseded = {"items": []}
    assert superseded == {"items": []}
    # The newer request is served, not skipped as "busy" behind the one it superseded.
    before = await completion_status(client)
    assert isinstance((await second)["items"], list)
    after = await completion_status(client)
    assert after["skippedBusy"] == before["skippedBusy"] == 0


#: Places where a completion is to be expected (the model may still see nothing to add at one:
#: the first that shows something is accepted).
ACCEPT_PLACES = ("import json\n\n\ndef load_config(path):\n    with open(",
                 "import json\n\n\ndef save_config(path, config):\n    with open(path, ",
                 "def area(width, height):\n    return ")


async def test_accepting_is_counted(client: LanguageClient, workspace: Path) -> None:
    shown: dict[str, Any] = {"items": []}
    for n, text in enumerate(ACCEPT_PLACES):
        uri = open_doc(client, workspace / f"accept_{n}.py", text)
        shown = await raw_request(client, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": end_of(text),
            "context": {"triggerKind": 1}}, timeout=300)
        if shown["items"]:
            break
    if not shown["items"]:
        pytest.fail(f"no completion to accept at any of {len(ACCEPT_PLACES)} places")
    cmd = shown["items"][0]["command"]
    before = await completion_status(client)
    result = await raw_request(client, "workspace/executeCommand",
                               {"command": cmd["command"], "arguments": cmd["arguments"]})
    assert result == {"counted": True}
    assert (await completion_status(client))["accepted"] == before["accepted"] + 1


async def test_chat_and_completion_stay_resident_side_by_side(
    client: LanguageClient,
) -> None:
    doc = await request(client, "contenox/document",
                        {"textDocument": {"uri": client.doc_uri}})  # type: ignore[attr-defined]
    line = doc["text"].split("\n")[LINE]
    await complete(client, LINE, len(line))
    await wait_warm(client)  # the idle prefill restored the chat prefix
    st = await completion_status(client)
    assert set(st["residentBranches"]) >= {"chat", "completion"}
    explained = await request(client, "contenox/explainContext", None)
    assert explained["pendingPrefillTokens"] == 0
    # The next completion there finds its own prefix again.
    await complete(client, LINE, len(line))
    st = await completion_status(client)
    assert st["lastReusedTokens"] >= st["lastContextTokens"]


@pytest.mark.parametrize("params", [
    {"position": {"line": 999, "character": 0}},
    {"position": {"line": LINE, "character": 999}},
    {"position": {"line": -1, "character": 0}},
    {"textDocument": {"uri": "file:///etc/passwd"}},
    {"textDocument": {"uri": "NOT OPEN"}},
    {"textDocument": {"uri": "x", "version": "1"}},
])
async def test_bad_input_is_invalid_params(client: LanguageClient, workspace: Path,
                                           params: dict[str, Any]) -> None:
    base: dict[str, Any] = {"textDocument": {"uri": client.doc_uri},  # type: ignore[attr-defined]
                            "position": {"line": 0, "character": 0}}
    base.update(params)
    if base["textDocument"].get("uri") == "NOT OPEN":
        base["textDocument"] = {"uri": (workspace / "json" / "decoder.py").as_uri()}
    with pytest.raises(JsonRpcInvalidParams):
        await raw_request(client, types.TEXT_DOCUMENT_INLINE_COMPLETION, base)


async def test_an_ask_where_a_completion_or_a_code_action_was_is_warm(
    client: LanguageClient, workspace: Path
) -> None:
    """The server learns where the user is from the requests an editor sends there (no edit
    needed): the idle prefill then warms the cursor context an ask at that line uses."""
    decoder = workspace / "json" / "decoder.py"
    text = decoder.read_text("utf-8")
    uri = open_doc(client, decoder, text)
    lines = text.split("\n")
    at_action = next(i for i, t in enumerate(lines) if "def raw_decode" in t) + 1
    at_completion = next(i for i, t in enumerate(lines) if "def decode(self" in t) + 1

    async def cursor_status(line: int) -> str:
        await wait_warm(client)
        explained = await request(client, "contenox/explainContext", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": 0},
            "question": "Why is this here?"})
        return str(next(s["status"] for s in explained["segments"]
                        if s["label"] == "cursor context"))

    point = {"line": at_action, "character": 0}
    await raw_request(client, "textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": {"start": point, "end": point},
        "context": {"diagnostics": []}})
    assert await cursor_status(at_action) == "cached"
    await raw_request(client, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri},
        "position": {"line": at_completion, "character": len(lines[at_completion])},
        "context": {"triggerKind": 2}}, timeout=300)
    assert await cursor_status(at_completion) == "cached"


async def test_idle_time_warms_the_completion_prompt_at_the_cursor(workspace: Path) -> None:
    """An editor that declares inline completion: once the chat prefix is resident, the idle
    time also prefills the completion prompt down to the cursor's line (the ``completion``
    branch) and gives the live sequence back to the chat prefix, so the very first completion
    there prefills only the line being typed."""
    c = await start_client(workspace, "neovim", inline_completion=True)
    try:
        uri = open_doc(c, workspace / "config.py", SOURCE)
        point = {"line": LINE, "character": COL}
        status = await warm_completion_at(c, uri, point)
        assert status["requests"] == 0  # no completion was asked for yet
        explained = await wait_warm(c)  # the chat prefix is live again: nothing pending
        assert explained["pendingPrefillTokens"] == 0
        first = await raw_request(c, "textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": point, "context": {"triggerKind": 1}},
            timeout=300)
        assert "items" in first
        after = await completion_status(c)
        assert after["lastReusedTokens"] >= after["lastContextTokens"] > 0
        assert after["lastNewTokens"] <= 40  # the last partial chunk and the line's tokens
        assert after["lastPromptTokens"] > 10 * after["lastNewTokens"]
    finally:
        await stop_client(c)


HELPERS = ('"""Helpers the loader uses."""\n\n\n'
           "def merge_defaults(config, defaults):\n"
           '    """The config with every key of ``defaults`` it lacks."""\n'
           "    merged = dict(defaults)\n    merged.update(config)\n    return merged\n")
LOADER = ("from helpers import merge_defaults\n\n\n"
          "def load(path, defaults):\n"
          "    data = read_file(path)\n"
          "    merged = merge_defaults(data, defaults)\n"
          "    return ")


async def complete_in_loader(client: LanguageClient, workspace: Path) -> dict[str, Any]:
    """Open loader.py, let the idle time warm its completion prompt at the end, complete
    there; the completion status after it."""
    uri = open_doc(client, workspace / "loader.py", LOADER)
    await warm_completion_at(client, uri, end_of(LOADER))
    return await invoke_completion(client, uri, end_of(LOADER))


async def test_the_prompt_carries_the_definitions_the_cursor_uses(workspace: Path) -> None:
    """The completion prompt's repository part is code: the definition of the function the
    code at the cursor calls (from another file) is in it, prefilled in idle time with the
    window, so the first completion there prefills only the line being typed."""
    (workspace / "helpers.py").write_text(HELPERS, "utf-8")
    c = await start_client(workspace, "neovim", inline_completion=True)
    try:
        status = await complete_in_loader(c, workspace)
        assert "helpers.py" in status["lastContextFiles"]
        assert "loader.py" not in status["lastContextFiles"]  # the window shows it already
        assert status["lastReusedTokens"] >= status["lastContextTokens"] > 0
        assert status["lastNewTokens"] <= 40  # the last partial chunk and the line's tokens
    finally:
        await stop_client(c)
        (workspace / "helpers.py").unlink()


TOKENS = ('"""Tokenizing."""\n\n\n'
          "def split_tokens(text):\n"
          '    """The words of ``text``."""\n    return text.split()\n')
PARSER = ("from tokens import split_tokens\n\n\n"
          "def parse(text):\n"
          "    parts = split_tokens(text)\n"
          "    return ")


async def test_a_completion_elsewhere_gets_its_places_code_not_the_last_ones(
        workspace: Path) -> None:
    """The repository part follows the cursor: a completion in another file right after one
    in loader.py carries the code chosen for its own place (the definition its line uses),
    not loader.py's. Keeping the last prompt's code while completions follow one another is
    for the lines typed near it only."""
    (workspace / "helpers.py").write_text(HELPERS, "utf-8")
    (workspace / "tokens.py").write_text(TOKENS, "utf-8")
    c = await start_client(workspace, "neovim", inline_completion=True)
    try:
        assert "helpers.py" in (await complete_in_loader(c, workspace))["lastContextFiles"]
        # At once (within the few seconds the last prompt's code is kept), another file:
        second = open_doc(c, workspace / "parser.py", PARSER)
        files = (await invoke_completion(c, second, end_of(PARSER)))["lastContextFiles"]
        assert "tokens.py" in files and "helpers.py" not in files, files
    finally:
        await stop_client(c)
        for name in ("helpers.py", "tokens.py", "parser.py"):
            (workspace / name).unlink(missing_ok=True)
