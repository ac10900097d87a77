"""Schema fuzz of every advertised request and command, on the real server over stdio.

Hypothesis (seeded, bounded) builds params from the field names the methods read, with
values of every JSON type, URIs inside and outside the workspace and positions in and out of
range. What must hold for each: an answer arrives, it is a result or a specific error (never
InternalError -32603), and the server keeps serving. Notifications with fuzzed params must
leave the server answering.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_lsp import RawServer
from test_lsp_support import copy_stdlib_json

FUZZ = settings(max_examples=120, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
INTERNAL_ERROR = -32603

REQUESTS = ["contenox/explainContext", "contenox/ask", "contenox/pin", "contenox/unpin",
            "contenox/listPins", "contenox/status", "contenox/document", "contenox/snapshot",
            "textDocument/codeAction", "textDocument/inlineCompletion",
            "workspace/executeCommand"]
COMMANDS = ["contenox.explain", "contenox.fix", "contenox.docstring", "contenox.pin",
            "contenox.unpin", "contenox.acceptCompletion", "contenox.nope"]
NOTIFICATIONS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didSave",
                 "textDocument/didClose", "workspace/didChangeWatchedFiles", "$/cancelRequest",
                 "$/setTrace", "initialized"]
KEYS = ["textDocument", "uri", "position", "range", "start", "end", "line", "character",
        "question", "includeText", "maxTokens", "action", "name", "command", "arguments",
        "context", "diagnostics", "diagnostic", "message", "triggerKind", "version", "text",
        "contentChanges", "changes", "type", "languageId", "jsonrpc", "id", "only",
        "selectedCompletionInfo", "formattingOptions", "partialResultToken",
        "workDoneToken", "accepted", "insertText", "outputs", "kind", "source"]

STATS: collections.Counter[str] = collections.Counter()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[RawServer]:
    # maxTokens 4: a fuzzed request that happens to be a valid ask stays cheap.
    srv = RawServer(workspace, {"prefillOnIdle": False, "maxTokens": 4})
    yield srv
    srv.close()
    print("\nfuzz answers:", dict(sorted(STATS.items())))


def uris(workspace: Path) -> st.SearchStrategy[str]:
    inside = [(workspace / "json" / n).as_uri() for n in ("decoder.py", "__init__.py", "nope.py")]
    return st.sampled_from([*inside, workspace.as_uri(), "file:///etc/passwd",
                            inside[0] + "/../../../../etc/passwd", "file:///a%00b",
                            "untitled:Untitled-1", "https://example.com/x.py", "", "file:"])


def json_values(workspace: Path) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-3, 5), st.sampled_from([2**31, 2**53, -2**40]),
        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
        uris(workspace), st.sampled_from(["save", "load", "list", "clear", "why?"]))
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=4)), inner,
                            max_size=5)),
        max_leaves=14)


def templates(workspace: Path) -> dict[str, Any]:
    """A valid params object of each request (what an editor sends)."""
    uri = (workspace / "json" / "decoder.py").as_uri()
    pos = {"line": 10, "character": 4}
    rng = {"start": {"line": 10, "character": 0}, "end": {"line": 12, "character": 0}}
    diag = {"range": rng, "message": "undefined name", "source": "lint", "code": "F821"}
    doc = {"uri": uri}
    return {
        "contenox/explainContext": {"textDocument": doc, "position": pos, "question": "why?",
                                    "includeText": False},
        "contenox/pin": {"uri": uri, "range": rng},
        "contenox/unpin": {"uri": uri},
        "contenox/document": {"textDocument": doc},
        "contenox/snapshot": {"action": "list"},
        "textDocument/codeAction": {"textDocument": doc, "range": rng,
                                    "context": {"diagnostics": [diag], "only": ["quickfix"]}},
        "textDocument/inlineCompletion": {
            "textDocument": {"uri": uri, "version": 0}, "position": pos,
            "context": {"triggerKind": 1}, "formattingOptions": {"tabSize": 4,
                                                                 "insertSpaces": True}},
        "workspace/executeCommand": {"command": "contenox.pin",
                                     "arguments": [{"uri": uri, "range": rng}]},
        "workspace/executeCommand#fix": {"command": "contenox.fix", "arguments": [
            {"uri": uri, "range": rng, "diagnostic": diag}]},
    }


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def check_answer(reply: dict[str, Any], method: str, params: Any) -> None:
    if "error" in reply:
        code = reply["error"]["code"]
        STATS[str(code)] += 1
        assert code != INTERNAL_ERROR, (method, params, reply["error"])
        assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]
    else:
        STATS["result"] += 1


@FUZZ
@given(data=st.data())
def test_every_request_answers_fuzzed_params(server: RawServer, workspace: Path,
                                             data: st.DataObject) -> None:
    method = data.draw(st.sampled_from(REQUESTS))
    params = data.draw(json_values(workspace))
    if method == "workspace/executeCommand" and data.draw(st.booleans()):
        params = {"command": data.draw(st.sampled_from(COMMANDS)),
                  "arguments": data.draw(st.lists(json_values(workspace), max_size=2))}
    msg_id = server.new_id()
    server.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    check_answer(server.response(msg_id, timeout=300), method, params)
    assert server.alive()


@FUZZ
@given(data=st.data())
def test_fuzzed_notifications_leave_the_server_answering(server: RawServer, workspace: Path,
                                                         data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(1, 4))):
        server.notify(data.draw(st.sampled_from(NOTIFICATIONS)), data.draw(json_values(workspace)))
    reply = server.request("contenox/status", timeout=300)
    assert reply["result"]["state"] in {"cold", "warming", "warm", "busy", "error"}


@FUZZ
@given(data=st.data())
def test_one_wrong_field_of_a_valid_request_is_answered(server: RawServer, workspace: Path,
                                                        data: st.DataObject) -> None:
    """Mutation fuzz: a valid request with one field (at any depth) replaced or removed."""
    table = templates(workspace)
    name = data.draw(st.sampled_from(sorted(table)))
    template = table[name]
    where = data.draw(st.sampled_from(paths_of(template)[1:]))
    if data.draw(st.integers(0, 4)) == 0:  # drop the field
        params = replaced(template, where[:-1], _without(_at(template, where[:-1]), where[-1]))
    else:
        params = replaced(template, where, data.draw(json_values(workspace)))
    method = name.split("#")[0]
    msg_id = server.new_id()
    server.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    check_answer(server.response(msg_id, timeout=300), method, params)
    assert server.alive()


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _without(container: Any, key: Any) -> Any:
    if isinstance(container, dict):
        return {k: v for k, v in container.items() if k != key}
    return [v for i, v in enumerate(container) if i != key]
