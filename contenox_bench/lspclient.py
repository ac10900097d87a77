"""Driving the real server over stdio as an editor would, with pygls's client."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from contenox_lsp.protocol import raw_converter

log = logging.getLogger(__name__)

#: Exactly what an editor runs (``contenox-lsp`` without arguments), on this interpreter.
SERVER_COMMAND = (sys.executable, "-m", "contenox_lsp")


def capabilities(inline_completion: bool = False) -> types.ClientCapabilities:
    """A plain editor: incremental sync, utf-16 positions, no work-done progress UI; and, if
    asked, one that shows inline completions (as VS Code does)."""
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=["utf-16"]),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
            inline_completion=(types.InlineCompletionClientCapabilities()
                               if inline_completion else None),
        ),
        workspace=types.WorkspaceClientCapabilities(workspace_folders=True),
    )


class EditorClient:
    """One server process; records when each streamed answer's first piece arrives."""

    def __init__(self, stderr_log: IO[str]) -> None:
        self.client = LanguageClient("contenox-bench", "1", converter_factory=raw_converter)
        self.first_piece: dict[str, float] = {}
        self.versions: dict[Path, int] = {}
        self.messages: list[str] = []
        self._stderr_log = stderr_log
        self._drain: asyncio.Task[None] | None = None

        # pygls 2 passes the client only to a first parameter named ``ls``: these take params.
        @self.client.feature(types.PROGRESS)
        def on_progress(params: Any) -> None:
            token = str(params.token)
            self.first_piece.setdefault(token, time.perf_counter())

        @self.client.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(params: Any) -> None:
            self.messages.append(str(params.message))

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(params: Any) -> None:
            pass

    async def start(self, root: Path, options: dict[str, Any],
                    env: dict[str, str] | None = None,
                    inline_completion: bool = False) -> dict[str, Any]:
        """Start a server on ``root``; ``env``: variables set for it (e.g. its cache dir);
        ``inline_completion``: the client declares LSP 3.18's inline completion."""
        extra: dict[str, Any] = {} if env is None else {"env": {**os.environ, **env}}
        await self.client.start_io(*SERVER_COMMAND, **extra)
        # pygls pipes the server's stderr and never reads it: drain it into a log file, or a
        # chatty server would block on a full pipe.
        server = getattr(self.client, "_server", None)
        if server is not None and server.stderr is not None:
            self._drain = asyncio.create_task(self._copy_stderr(server.stderr))
        uri = root.as_uri()
        result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
            capabilities=capabilities(inline_completion),
            # The server watches this pid: it exits if the bench dies without a shutdown.
            process_id=os.getpid(),
            root_uri=uri,
            workspace_folders=[types.WorkspaceFolder(uri=uri, name=root.name)],
            initialization_options=options,
        )), 120)
        self.client.initialized(types.InitializedParams())
        return {"server": str(getattr(result, "server_info", None))}

    async def _copy_stderr(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self._stderr_log.write(line.decode("utf-8", errors="replace"))

    async def request(self, method: str, params: Any, timeout: float = 120) -> Any:
        return await asyncio.wait_for(
            self.client.protocol.send_request_async(method, params), timeout
        )

    def did_open(self, path: Path, text: str) -> None:
        self.versions[path] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=text)))

    def did_change(self, path: Path, line: int, character: int, text: str) -> None:
        """Insert ``text`` at (line, character)."""
        self.did_replace(path, (line, character), (line, character), text)

    def did_replace(self, path: Path, start: tuple[int, int], end: tuple[int, int],
                    text: str) -> None:
        """Replace ``start``..``end`` (line, character) with ``text``."""
        self.versions[path] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(
                uri=path.as_uri(), version=self.versions[path]),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=start[0], character=start[1]),
                                  end=types.Position(line=end[0], character=end[1])),
                text=text)],
        ))

    async def cursor_moved(self, path: Path, line: int, timeout: float = 120) -> list[Any]:
        """What VS Code sends when the cursor settles: ``textDocument/codeAction`` at the empty
        range there (for its light bulb). The server takes it as where the user is."""
        pos = types.Position(line=line, character=0)
        result = await self.request("textDocument/codeAction", types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=path.as_uri()),
            range=types.Range(start=pos, end=pos),
            context=types.CodeActionContext(
                diagnostics=[], trigger_kind=types.CodeActionTriggerKind.Automatic)), timeout)
        return list(result or [])

    async def ask(self, token: str, question: str, path: Path, line: int, max_tokens: int,
                  timeout: float, conversation_id: str | None = None
                  ) -> tuple[dict[str, Any], float, float]:
        """(result, client ms to the first streamed piece, client ms to the response)."""
        pos = {"line": line, "character": 0}
        params: dict[str, Any] = {
            "question": question,
            "textDocument": {"uri": path.as_uri()},
            "range": {"start": pos, "end": pos},
            "maxTokens": max_tokens,
            "partialResultToken": token,
        }
        if conversation_id is not None:
            params["conversationId"] = conversation_id
        t0 = time.perf_counter()
        result = await self.request("contenox/ask", params, timeout)
        t1 = time.perf_counter()
        first = self.first_piece.get(token, t1)  # an empty answer streams nothing
        return result, (first - t0) * 1000.0, (t1 - t0) * 1000.0

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 60)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 60)
        except Exception:
            log.warning("the server did not shut down cleanly; terminating it", exc_info=True)
            server = getattr(self.client, "_server", None)
            if server is not None and server.returncode is None:
                server.terminate()
                await server.wait()
        if self._drain is not None:
            await asyncio.wait_for(self._drain, 30)


def first_item_text(result: Any) -> str | None:
    """The first item's text of an inline completion answer (the client converts the typed
    result; a raw JSON object is taken as well)."""
    if isinstance(result, dict):
        items = result.get("items") or []
        return items[0].get("insertText") if items else None
    items = getattr(result, "items", None) or []
    return getattr(items[0], "insert_text", None) if items else None
