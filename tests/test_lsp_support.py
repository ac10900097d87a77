"""Helpers for the language-server tests: a recording test client and a real workspace."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import sys
import sysconfig
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.protocol import JsonRPCRequestMessage
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
from pytest_lsp import client as lsp_client_mod

from contenox_lsp.protocol import raw_converter

#: Exactly what editors run (``contenox-lsp`` with no arguments), via the interpreter under test.
SERVER_COMMAND = [sys.executable, "-m", "contenox_lsp"]

#: Small budgets so the whole prompt stays around 1k tokens on the embedded model.
FAST_OPTIONS: dict[str, Any] = {
    "debounceMs": 150,
    "repoMapTokens": 192,
    "codeTokens": 384,  # small prompts keep the suite fast (the default is 1536)
    # The question's code part not bounded by this machine's prefill rate: the same prompt on
    # every machine, and the CLI's (tests/test_turn_golden.py).
    "questionCodeMs": 0,
    "maxTokens": 16,
    "logLevel": "info",
}


def copy_stdlib_json(dest: Path) -> Path:
    """A real package to work on: the interpreter's own ``json/`` (no tests, no caches)."""
    src = Path(sysconfig.get_paths()["stdlib"]) / "json"
    root = dest / "ws"
    shutil.copytree(src, root / "json", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # json/tool.py is CLI glue; drop it to keep the repo map small.
    (root / "json" / "tool.py").unlink(missing_ok=True)
    return root


def server_env(root: Path) -> dict[str, str]:
    """The server's environment: its caches (repo index, digests, snapshots) beside the test
    workspace, not in the user's cache dir."""
    return {**os.environ, "CONTENOX_CACHE_DIR": str(root.parent / "contenox-cache")}


def make_client() -> LanguageClient:
    """pytest-lsp's client, plus partial-result capture and a recording applyEdit handler."""
    client = LanguageClient(converter_factory=raw_converter)
    for method, fn in lsp_client_mod.DEFAULT_CLIENT_FEATURES.items():
        if method != types.PROGRESS:
            client.feature(method)(fn)
    client.partial_results = {}  # type: ignore[attr-defined]
    client.applied_edits = []  # type: ignore[attr-defined]
    client.registrations = []  # type: ignore[attr-defined]

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def on_register(ls: LanguageClient, params: types.RegistrationParams) -> None:
        ls.registrations.extend(params.registrations)  # type: ignore[attr-defined]

    @client.feature(types.PROGRESS)
    def on_progress(ls: LanguageClient, params: types.ProgressParams) -> None:
        value = params.value
        if isinstance(value, dict) and value.get("kind") in ("begin", "report", "end"):
            ls.progress_reports.setdefault(params.token, [])
            lsp_client_mod.progress(ls, params)
        else:
            ls.partial_results.setdefault(params.token, []).append(value)  # type: ignore[attr-defined]

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def on_apply_edit(
        ls: LanguageClient, params: types.ApplyWorkspaceEditParams
    ) -> types.ApplyWorkspaceEditResult:
        ls.applied_edits.append(params)  # type: ignore[attr-defined]
        return types.ApplyWorkspaceEditResult(applied=True)

    return client


async def start_client(
    root: Path,
    capabilities: str = "neovim",
    options: dict[str, Any] | None = None,
    inline_completion: bool = False,
) -> LanguageClient:
    """The server over stdio, initialized as the editor ``capabilities`` names (plus LSP
    3.18's inline-completion capability, which no recorded editor has, if asked)."""
    config = ClientServerConfig(server_command=SERVER_COMMAND, client_factory=make_client,
                                server_env=server_env(root))
    client = await config.start()
    assert isinstance(client, LanguageClient)
    uri = root.as_uri()
    caps = client_capabilities(capabilities)
    if inline_completion:
        assert caps.text_document is not None
        caps.text_document.inline_completion = types.InlineCompletionClientCapabilities()
    client.init_result = await client.initialize_session(  # type: ignore[attr-defined]
        types.InitializeParams(
            capabilities=caps,
            root_uri=uri,
            workspace_folders=[types.WorkspaceFolder(uri=uri, name=root.name)],
            initialization_options=dict(FAST_OPTIONS, **(options or {})),
        )
    )
    return client


async def stop_client(client: LanguageClient) -> None:
    try:
        await asyncio.wait_for(client.shutdown_session(), 60)
    finally:
        await client.stop()


async def request(client: LanguageClient, method: str, params: Any,
                  timeout: float = 300) -> Any:
    return await asyncio.wait_for(client.protocol.send_request_async(method, params), timeout)


async def raw_request(client: LanguageClient, method: str, params: Any,
                      timeout: float = 60) -> Any:
    """Send ``params`` as-is, even for typed LSP methods (to test malformed input)."""
    msg_id = f"raw-{uuid.uuid4().hex}"
    fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
    client.protocol._request_futures[msg_id] = fut
    client.protocol._send_data(
        JsonRPCRequestMessage(id=msg_id, method=method, jsonrpc="2.0", params=params)
    )
    return await asyncio.wait_for(asyncio.wrap_future(fut), timeout)


async def wait_until(
    probe: Callable[[], Awaitable[Any]],
    ok: Callable[[Any], bool],
    timeout: float = 300,
    interval: float = 0.2,
) -> Any:
    """Poll ``probe`` until ``ok(result)``; the timeout is a hang guard, not a measurement."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if ok(last):
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not reached; last result: {last!r}")


async def wait_warm(client: LanguageClient, timeout: float = 300) -> dict[str, Any]:
    """Wait until the model is loaded, the index built, no change is waiting for
    re-assembly, and the idle prefix of a fresh assembly is in KV."""

    async def status() -> Any:
        return await request(client, "contenox/status", None)

    await wait_until(
        status,
        lambda s: s["state"] == "warm" and not s["contextStale"]
        and s["index"]["state"] == "ready",
        timeout,
    )

    async def explain() -> Any:
        return await request(client, "contenox/explainContext", None)

    result: dict[str, Any] = await wait_until(
        explain, lambda r: r["pendingPrefillTokens"] == 0, timeout
    )
    return result


def open_doc(client: LanguageClient, path: Path, text: str | None = None,
             version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=version,
                text=path.read_text(encoding="utf-8") if text is None else text,
            )
        )
    )
    return uri


def change_doc(client: LanguageClient, uri: str, version: int,
               edits: list[tuple[int, int, int, int, str]]) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(
                    range=types.Range(
                        start=types.Position(line=a, character=b),
                        end=types.Position(line=c, character=d),
                    ),
                    text=t,
                )
                for a, b, c, d, t in edits
            ],
        )
    )


def units(text: str, encoding: str) -> int:
    """Length of ``text`` in LSP position units of ``encoding``."""
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def apply_edit(text: str, edit: tuple[int, int, int, int, str], encoding: str) -> str:
    """Reference implementation of one incremental change (for the round-trip test)."""
    a, b, c, d, new = edit
    lines = text.splitlines(keepends=True)

    def offset(line: int, col: int) -> int:
        base = sum(len(x) for x in lines[:line])
        if line >= len(lines):
            return base
        s = lines[line]
        i = 0
        u = 0
        while i < len(s) and u < col:
            u += units(s[i], encoding)
            i += 1
        return base + i

    start, end = offset(a, b), offset(c, d)
    return text[:start] + new + text[end:]
