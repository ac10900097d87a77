"""Language server: initialization, document sync, bad input, path safety, shutdown.

Real server process over stdio (pytest-lsp), real files (a copy of the stdlib ``json``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcMethodNotFound,
)
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from test_lsp_support import (
    SERVER_COMMAND,
    apply_edit,
    change_doc,
    copy_stdlib_json,
    make_client,
    open_doc,
    raw_request,
    request,
    server_env,
    start_client,
    stop_client,
    wait_until,
)

# These servers never need a warm model: keep them from competing for the CPU.
IDLE = {"prefillOnIdle": False}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("proto"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def nvim(workspace: Path) -> AsyncIterator[LanguageClient]:
    client = await start_client(workspace, "neovim", IDLE)
    yield client
    await stop_client(client)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def vscode(workspace: Path) -> AsyncIterator[LanguageClient]:
    client = await start_client(workspace, "visual-studio-code", IDLE)
    yield client
    await stop_client(client)


async def test_initialize_neovim_negotiates_utf8(nvim: LanguageClient) -> None:
    # Neovim 0.11 offers utf-8 first: the server must pick it.
    caps = await _server_caps(nvim)
    assert caps["positionEncoding"] == "utf-8"
    assert caps["textDocumentSync"]["change"] == types.TextDocumentSyncKind.Incremental.value


async def test_initialize_vscode_defaults_to_utf16(vscode: LanguageClient) -> None:
    caps = await _server_caps(vscode)
    assert caps["positionEncoding"] == "utf-16"
    assert caps["executeCommandProvider"]["commands"]
    assert {"contenox.explain", "contenox.fix", "contenox.docstring", "contenox.pin",
            "contenox.unpin"} <= set(caps["executeCommandProvider"]["commands"])


@pytest.mark.parametrize("client_name", ["nvim", "vscode"])
async def test_incremental_edits_with_non_ascii_round_trip(
    client_name: str, request_fixture: Any, workspace: Path
) -> None:
    client: LanguageClient = request_fixture(client_name)
    enc = "utf-8" if client_name == "nvim" else "utf-16"
    path = workspace / "json" / f"unicode_{client_name}.py"
    text = 'NAME = "café"\n# 😀 emoji line\nx = 1\n'
    path.write_text(text, encoding="utf-8")
    uri = open_doc(client, path, text)
    edits = [
        # after "caf\u00e9" on line 0 (the é is 2 units in utf-8, 1 in utf-16)
        (0, _u('NAME = "café', enc), 0, _u('NAME = "café', enc), " crème brûlée"),
        # replace the emoji (4 utf-8 units, 2 utf-16 units) with a CJK string
        (1, _u("# ", enc), 1, _u("# 😀", enc), "漢字"),
        # multi-line insert spanning a line break, ending in a non-BMP char
        (2, 0, 2, 1, "y𝄞\nz"),
        # delete across lines
        (0, _u('NAME = "café crème', enc), 1, _u("# 漢", enc), ""),
    ]
    expected = text
    version = 1
    for e in edits:
        version += 1
        change_doc(client, uri, version, [e])
        expected = apply_edit(expected, e, enc)
    state = await request(client, "contenox/document", {"textDocument": {"uri": uri}})
    assert state["positionEncoding"] == enc
    assert state["version"] == version
    assert state["text"] == expected


async def test_malformed_params_are_invalid_params(nvim: LanguageClient, workspace: Path) -> None:
    decoder = (workspace / "json" / "decoder.py").as_uri()
    cases: list[tuple[str, Any]] = [
        ("contenox/ask", None),
        ("contenox/ask", {"question": 5}),
        ("contenox/ask", {"question": "why?", "maxTokens": "ten"}),
        ("contenox/ask", {"question": "why?", "maxTokens": True}),
        ("contenox/ask", {"question": "why?", "textDocument": "file:///x"}),
        ("contenox/ask", {"question": "why?", "textDocument": {"uri": decoder},
                          "range": {"start": {"line": -1, "character": 0},
                                    "end": {"line": 0, "character": 0}}}),
        ("contenox/ask", [1, 2]),
        ("contenox/explainContext", {"position": {"line": "a"}}),
        ("contenox/pin", {}),
        ("contenox/pin", {"uri": 7}),
        ("contenox/unpin", "x"),
        ("contenox/snapshot", {"action": "explode"}),
        ("contenox/snapshot", {}),
        # Typed LSP requests with bad params must be answered too (pygls alone drops them).
        ("textDocument/codeAction", {"textDocument": {"uri": 3}}),
        ("workspace/executeCommand", {"command": "contenox.explain", "arguments": ["nope"]}),
        ("workspace/executeCommand", {"command": "contenox.fix"}),
    ]
    for method, params in cases:
        with pytest.raises(JsonRpcInvalidParams) as info:
            await raw_request(nvim, method, params, timeout=30)
        assert "nvalid" in info.value.message, (method, params, info.value.message)


async def test_requests_may_omit_params(nvim: LanguageClient) -> None:
    """JSON-RPC allows a request without a "params" member; the server must answer it."""
    for method in ("contenox/status", "contenox/listPins"):
        msg_id = f"no-params-{method}"
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        nvim.protocol._request_futures[msg_id] = fut
        nvim.protocol._send_data({"jsonrpc": "2.0", "id": msg_id, "method": method})
        result = await asyncio.wait_for(asyncio.wrap_future(fut), 60)
        assert result is not None, method
        if method == "contenox/status":
            assert result["state"] in {"cold", "warming", "warm", "busy", "error"}
    status = await request(nvim, "contenox/status", None)
    assert status["state"] in {"cold", "warming", "warm", "busy", "error"}


async def test_explain_context_fields_may_be_null(nvim: LanguageClient) -> None:
    params = {"textDocument": None, "position": None, "question": None, "includeText": None}
    result = await request(nvim, "contenox/explainContext", params, timeout=600)
    assert result["segments"]
    assert all("text" not in seg for seg in result["segments"])  # null = the default (false)


async def test_second_initialize_is_an_invalid_request(
    nvim: LanguageClient, tmp_path: Path
) -> None:
    """LSP allows one initialize: a second one must not re-root the workspace."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret.py").write_text("TOKEN = 1\n", encoding="utf-8")
    params = {"processId": None, "rootUri": elsewhere.as_uri(), "capabilities": {},
              "workspaceFolders": [{"uri": elsewhere.as_uri(), "name": "elsewhere"}]}
    with pytest.raises(JsonRpcInvalidRequest) as info:
        await raw_request(nvim, "initialize", params, timeout=30)
    assert info.value.code == -32600
    with pytest.raises(JsonRpcInvalidParams):  # still outside the (first) workspace
        await request(nvim, "contenox/pin", {"uri": (elsewhere / "secret.py").as_uri()},
                      timeout=30)
    assert (await request(nvim, "contenox/status", None))["state"]


async def test_unknown_method_is_method_not_found(nvim: LanguageClient) -> None:
    with pytest.raises(JsonRpcMethodNotFound):
        await request(nvim, "contenox/doesNotExist", {}, timeout=30)


async def test_paths_outside_the_workspace_are_rejected(
    nvim: LanguageClient, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 1\n")
    # A symlink inside the workspace that points outside must not work either.
    link = workspace / "json" / "link_out.py"
    link.symlink_to(outside)
    try:
        for uri in (outside.as_uri(), link.as_uri(), (workspace / ".." / "x.py").as_uri(),
                    "https://example.com/a.py"):
            with pytest.raises(JsonRpcInvalidParams) as info:
                await request(nvim, "contenox/pin", {"uri": uri}, timeout=30)
            assert "outside the workspace" in info.value.message
            with pytest.raises(JsonRpcInvalidParams):
                await request(nvim, "contenox/ask",
                              {"question": "?", "textDocument": {"uri": uri}}, timeout=30)
            with pytest.raises(JsonRpcInvalidParams):
                await request(nvim, "contenox/explainContext",
                              {"textDocument": {"uri": uri}}, timeout=30)
    finally:
        link.unlink()


async def test_pin_unpin_list(nvim: LanguageClient, workspace: Path) -> None:
    uri = (workspace / "json" / "scanner.py").as_uri()
    r = await request(nvim, "contenox/pin", {"uri": uri})
    assert r["pinned"] is True
    again = await request(nvim, "contenox/pin", {"uri": uri})
    assert again["pinned"] is False
    ranged = await request(nvim, "contenox/pin", {
        "uri": uri, "range": {"start": {"line": 2, "character": 0},
                              "end": {"line": 5, "character": 0}}})
    assert ranged["pin"]["range"]["start"]["line"] == 2
    pins = (await request(nvim, "contenox/listPins", None))["pins"]
    assert [p["uri"] for p in pins] == [uri, uri]
    assert (await request(nvim, "contenox/unpin", {"uri": uri}))["removed"] == 2
    assert (await request(nvim, "contenox/listPins", None))["pins"] == []


async def test_workspace_folders_added_and_removed(
    nvim: LanguageClient, tmp_path: Path
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "helpers.py").write_text("def helper():\n    return 1\n", encoding="utf-8")
    uri = (extra / "helpers.py").as_uri()
    with pytest.raises(JsonRpcInvalidParams):
        await request(nvim, "contenox/pin", {"uri": uri}, timeout=30)
    files_before = (await request(nvim, "contenox/status", None))["index"]["files"]
    folder = types.WorkspaceFolder(uri=extra.as_uri(), name="extra")
    nvim.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[folder], removed=[])))
    added = await wait_until(lambda: request(nvim, "contenox/status", None),
                             lambda s: s["index"]["state"] == "ready"
                             and s["index"]["files"] > files_before, timeout=60)
    assert (await request(nvim, "contenox/pin", {"uri": uri}))["pinned"] is True
    assert (await request(nvim, "contenox/unpin", {"uri": uri}))["removed"] == 1
    nvim.workspace_did_change_workspace_folders(types.DidChangeWorkspaceFoldersParams(
        event=types.WorkspaceFoldersChangeEvent(added=[], removed=[folder])))
    await wait_until(lambda: request(nvim, "contenox/status", None),
                     lambda s: s["index"]["state"] == "ready"
                     and s["index"]["files"] == added["index"]["files"] - 1, timeout=60)
    with pytest.raises(JsonRpcInvalidParams):
        await request(nvim, "contenox/pin", {"uri": uri}, timeout=30)


async def test_invalid_initialization_options_warn_and_use_defaults(workspace: Path) -> None:
    client = await start_client(workspace, "neovim", {"debounceMs": "soon", "bogus": 1,
                                                      "maxTokens": 0, **IDLE})
    try:
        async def warnings() -> list[str]:
            return [m.message for m in client.messages if m.type == types.MessageType.Warning]

        for _ in range(100):
            if len(await warnings()) >= 3:
                break
            await asyncio.sleep(0.05)
        msgs = await warnings()
        assert any("debounceMs" in m for m in msgs)
        assert any("bogus" in m for m in msgs)
        assert any("maxTokens" in m for m in msgs)
        status = await request(client, "contenox/status", None)
        assert status["debounceMs"] == 300  # the default, not the invalid value
    finally:
        await stop_client(client)


async def test_engine_errors_carry_their_stable_code(workspace: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model.gguf"
    client = await start_client(workspace, "neovim", {"model": str(missing), **IDLE})
    try:
        status = await wait_until(lambda: request(client, "contenox/status", None),
                                  lambda s: s["state"] == "error", timeout=60)
        assert status["error"]
        with pytest.raises(JsonRpcException) as info:
            await request(client, "contenox/ask", {"question": "hello?"}, timeout=60)
        assert -32099 <= info.value.code <= -32000
        data = info.value.data
        assert isinstance(data, dict) and data["code"] == "model_not_found"
        assert any(m.type == types.MessageType.Error for m in client.messages)
    finally:
        await stop_client(client)


async def test_shutdown_and_exit(workspace: Path) -> None:
    client = await start_client(workspace, "neovim", IDLE)
    await wait_until(lambda: request(client, "contenox/status", None),
                     lambda st: st["index"]["state"] == "ready", timeout=120)
    # The repo index is cached under $CONTENOX_CACHE_DIR (the test's), never elsewhere.
    caches = list((workspace.parent / "contenox-cache" / "repo-index").glob("repo-index-*.bin"))
    assert caches  # one per set of workspace folders seen in this module
    built = {c: c.stat().st_mtime_ns for c in caches}
    await asyncio.wait_for(client.shutdown_async(None), 60)
    # After shutdown, requests are refused (not left hanging).
    with pytest.raises(JsonRpcException):
        await request(client, "contenox/status", None, timeout=30)
    client.exit(None)
    server = client._server
    assert server is not None
    code = await asyncio.wait_for(server.wait(), 60)
    assert code == 0
    await client.stop()
    # Saved again on the way out (edits and the map's state survive a restart).
    assert any(c.stat().st_mtime_ns > t for c, t in built.items())


async def test_watched_files_registered_dynamically(vscode: LanguageClient) -> None:
    # VS Code declares dynamic registration for didChangeWatchedFiles; Neovim 0.11 does not.
    regs = vscode.registrations  # type: ignore[attr-defined]
    methods = [r.method for r in regs]
    assert types.WORKSPACE_DID_CHANGE_WATCHED_FILES in methods


async def test_server_exits_when_the_editor_process_dies(workspace: Path) -> None:
    editor = await asyncio.create_subprocess_exec("sleep", "600")
    config = ClientServerConfig(server_command=SERVER_COMMAND, client_factory=make_client,
                                server_env=server_env(workspace))
    client = await config.start()
    assert isinstance(client, LanguageClient)
    try:
        uri = workspace.as_uri()
        await client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("neovim"), process_id=editor.pid, root_uri=uri,
            workspace_folders=[types.WorkspaceFolder(uri=uri, name="ws")],
            initialization_options=IDLE,
        ))
        editor.kill()
        await editor.wait()
        server = client._server
        assert server is not None
        # stdin stays open: only the processId watchdog can make the server leave.
        code = await asyncio.wait_for(server.wait(), 120)
        assert code != 0
    finally:
        if editor.returncode is None:
            editor.kill()
        await client.stop()


# -- helpers ----------------------------------------------------------------------------------

@pytest.fixture
def request_fixture(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue


def _u(prefix: str, enc: str) -> int:
    from test_lsp_support import units

    return units(prefix, enc)


async def _server_caps(client: LanguageClient) -> dict[str, Any]:
    from pygls.protocol import default_converter

    result = client.init_result  # type: ignore[attr-defined]
    caps: dict[str, Any] = default_converter().unstructure(result.capabilities)
    return caps
