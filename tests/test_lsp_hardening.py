"""Hardening against the fuzz and fault run of issue 17, on the real server over stdio.

Each test starts from one of that run's reproducers (a malformed frame, a params key named
``jsonrpc``, a FIFO in the workspace, an untracked symlink to a file outside it, an edit
storm, ...) and checks what must hold: every request is answered, nothing outside the
workspace reaches a prompt, the process lives on, memory settles.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from raw_lsp import RawServer, framed, notification
from test_framing import BAD_BODY, REPRODUCERS
from test_framing import frame as frame_body
from test_lsp_support import copy_stdlib_json

IDLE = {"prefillOnIdle": False}
INVALID_REQUEST, INVALID_PARAMS = -32600, -32602


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("hardening"))


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[RawServer]:
    srv = RawServer(workspace, IDLE)
    yield srv
    srv.close()


def error_code(response: dict[str, Any]) -> int | None:
    return response["error"]["code"] if "error" in response else None


def status_after(server: RawServer, prefix: bytes) -> dict[str, Any]:
    """Send ``prefix`` raw, then a valid status request: its answer."""
    msg_id = server.new_id()
    body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": "contenox/status"}).encode()
    server.send_raw(prefix + frame_body(body))
    return server.response(msg_id, timeout=60)


@pytest.mark.parametrize("fault", sorted(REPRODUCERS))
def test_a_bad_frame_never_desynchronises_the_stream(server: RawServer, fault: str) -> None:
    reply = status_after(server, REPRODUCERS[fault])
    assert reply["result"]["state"] in {"cold", "warming", "warm", "busy", "error"}
    assert server.alive()


def test_an_oversized_message_gets_a_clear_error(server: RawServer) -> None:
    status_after(server, b"Content-Length: 99999999999999\r\n\r\n" + BAD_BODY)
    err = server.wait_for(lambda m: m.get("id") is None and "error" in m
                          and "exceeds the limit" in m["error"]["message"])
    assert err["error"]["code"] == INVALID_REQUEST


def test_params_keys_named_jsonrpc_are_data(server: RawServer, workspace: Path) -> None:
    uri = (workspace / "json" / "decoder.py").as_uri()
    status = server.request("contenox/status", {"jsonrpc": "2.0"}, timeout=60)
    assert status["result"]["state"]
    explain = server.request("contenox/explainContext",
                             {"textDocument": {"uri": uri, "jsonrpc": "2.0"}}, timeout=300)
    assert explain["result"]["segments"]
    actions = server.request("textDocument/codeAction", {
        "textDocument": {"uri": uri, "jsonrpc": "2.0"},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "context": {"diagnostics": []}}, timeout=60)
    assert isinstance(actions["result"], list)


def test_envelope_errors_are_invalid_request(server: RawServer) -> None:
    for bad_id in ({"a": 1}, [1], 1.5, True, None):
        server.send({"jsonrpc": "2.0", "id": bad_id, "method": "contenox/status"})
    server.send([{"jsonrpc": "2.0", "id": 1, "method": "contenox/status"}])
    server.send({"jsonrpc": "1.0", "id": "old-version", "method": "contenox/status"})
    server.send({"jsonrpc": "2.0", "id": "no-method"})
    reply = server.response("old-version", timeout=60)
    assert error_code(reply) == INVALID_REQUEST
    null_ids = server.wait_for(
        lambda m: "error" in m and m.get("id") is None and "batch" in m["error"]["message"])
    assert null_ids["error"]["code"] == INVALID_REQUEST
    assert error_code(server.response("no-method", timeout=60)) == INVALID_REQUEST
    assert server.request("contenox/status")["result"]["state"]


def test_text_that_is_not_unicode_is_invalid_params(server: RawServer) -> None:
    body = b'{"jsonrpc": "2.0", "id": "lone", "method": "contenox/ask", ' \
           b'"params": {"question": "why \\ud800?"}}'
    server.send_raw(frame_body(body))
    assert error_code(server.response("lone", timeout=60)) == INVALID_PARAMS


def _deep(depth: int) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for _ in range(depth):
        obj = {"a": obj}
    return obj


def test_wrong_types_and_outside_uris_are_invalid_params(
    server: RawServer, workspace: Path, tmp_path: Path
) -> None:
    uri = (workspace / "json" / "decoder.py").as_uri()
    pos = {"line": 0, "character": 0}
    rng = {"start": pos, "end": pos}
    outside = tmp_path / "secret.py"
    outside.write_text("TOKEN = 1\n", encoding="utf-8")
    diag = {"range": rng, "message": "boom"}
    cases: list[tuple[str, Any]] = [
        ("textDocument/codeAction", {"textDocument": {"uri": uri},
                                     "range": {"start": {"line": "5", "character": 0},
                                               "end": pos}, "context": {"diagnostics": []}}),
        ("textDocument/codeAction", {"textDocument": {"uri": True}, "range": rng,
                                     "context": {"diagnostics": []}}),
        ("textDocument/codeAction", {"textDocument": {"uri": outside.as_uri()}, "range": rng,
                                     "context": {"diagnostics": []}}),
        ("textDocument/codeAction", {"textDocument": {"uri": uri + "/../../../x.py"},
                                     "range": rng, "context": {"diagnostics": []}}),
        ("workspace/executeCommand", {"command": "contenox.fix", "arguments": [
            {"uri": uri, "range": "x", "diagnostic": diag}]}),
        ("workspace/executeCommand", {"command": "contenox.fix", "arguments": [
            {"uri": uri, "diagnostic": diag}]}),
        ("workspace/executeCommand", {"command": "contenox.fix", "arguments": [
            {"uri": uri, "diagnostic": {"range": {"start": {"line": 1.5, "character": 0},
                                                  "end": pos}, "message": "m"}}]}),
        ("workspace/executeCommand", {"command": "contenox.fix", "arguments": [
            {"uri": uri, "diagnostic": {"range": {"start": {"line": 2**40, "character": 0},
                                                  "end": pos}, "message": "m"}}]}),
        # Arrays must be arrays (cattrs made "x" into ["x"] and {} into []).
        *[("textDocument/codeAction", {"textDocument": {"uri": uri}, "range": rng,
                                       "context": ctx})
          for ctx in ({"diagnostics": [], "only": "x"}, {"diagnostics": [], "only": {}},
                      {"diagnostics": [], "only": _deep(50)}, {"diagnostics": {}},
                      {"diagnostics": "boom"})],
        ("contenox/pin", {"uri": (workspace / "json" / "a%00b.py").as_uri()}),
        ("contenox/pin", {"uri": "file:///etc/passwd%00"}),
        # outputs: an array of {kind, source?, text}, at most 8, kinds the client may send.
        *[(method, {"question": "q", "outputs": outputs})
          for method in ("contenox/ask", "contenox/explainContext")
          for outputs in ("x", [1], [{"kind": "turn", "text": "t"}], [{"text": "t"}],
                          [{"kind": "test"}], [{"kind": "test", "text": 5}],
                          [{"kind": "test", "text": "t", "source": 3}],
                          [{"kind": "test", "text": "t"}] * 9,
                          [{"kind": "test", "text": "x" * 200_001}])],
    ]
    for method, params in cases:
        reply = server.request(method, params, timeout=60)
        assert error_code(reply) == INVALID_PARAMS, (method, params, reply)


def test_malformed_notifications_are_shown_once_per_kind(server: RawServer) -> None:
    before = len(server.messages("window/showMessage"))
    for i in range(300):
        server.notify("textDocument/didChange", {"textDocument": {"uri": i}})
        server.notify("textDocument/didOpen", {"textDocument": None})
        server.send({"jsonrpc": "2.0", "method": 5})
    assert server.request("contenox/status")["result"]["state"]
    shown = server.messages("window/showMessage")[before:]
    kinds = {m["params"]["message"].split("(")[1].split(":")[0] for m in shown}
    assert len(shown) == len(kinds) <= 3, [m["params"]["message"] for m in shown]


# -- files that are not regular, or not inside ---------------------------------------------------

def test_a_fifo_in_the_workspace_is_never_read(server: RawServer, workspace: Path) -> None:
    fifo = workspace / "json" / "pipe.py"
    os.mkfifo(fifo)
    try:
        uri = fifo.as_uri()
        server.notify("workspace/didChangeWatchedFiles", {"changes": [{"uri": uri, "type": 1}]})
        explain = server.request("contenox/explainContext", {"textDocument": {"uri": uri}},
                                 timeout=300)
        assert "result" in explain or error_code(explain) == INVALID_PARAMS
        pin = server.request("contenox/pin", {"uri": uri}, timeout=60)
        assert error_code(pin) == INVALID_PARAMS
        assert server.request("contenox/status")["result"]["index"]["state"] == "ready"
    finally:
        fifo.unlink()


def test_untracked_symlinks_to_outside_never_reach_the_diff(tmp_path: Path) -> None:
    root = copy_stdlib_json(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=root, check=True)
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    canary = "CANARY_" + "7f3a" * 4
    (outside / "secret_mod.py").write_text(f"{canary} = 1\n", encoding="utf-8")
    (outside / "pkg" / "deep.py").write_text(f"{canary}_DEEP = 2\n", encoding="utf-8")
    (root / "link_out.py").symlink_to(outside / "secret_mod.py")
    (root / "linked_dir").symlink_to(outside / "pkg")
    (root / "json" / "rel_link.py").symlink_to(Path("..") / ".." / "outside" / "secret_mod.py")
    (root / "fresh.py").write_text("VISIBLE_UNTRACKED = 3\n", encoding="utf-8")
    srv = RawServer(root, IDLE)
    try:
        explain = srv.request("contenox/explainContext", {"includeText": True}, timeout=300)
        text = "\n".join(seg.get("text") or "" for seg in explain["result"]["segments"])
        assert "VISIBLE_UNTRACKED" in text  # the diff of untracked files is there...
        assert canary not in text  # ...without what the links point to
    finally:
        srv.close()


def test_a_traceback_in_the_outputs_shows_its_frames_code_and_nothing_outside(
    server: RawServer, workspace: Path, tmp_path: Path
) -> None:
    """``outputs`` of explainContext: the test output is segment H as sent, and the
    definitions its traceback ran through inside the workspace lead the question's code,
    innermost first; a frame outside the workspace is not read."""
    decoder = (workspace / "json" / "decoder.py").read_text(encoding="utf-8").split("\n")
    init = (workspace / "json" / "__init__.py").read_text(encoding="utf-8").split("\n")
    raw_decode = next(i for i, ln in enumerate(decoder) if "def raw_decode(" in ln)
    raising = next(i for i in range(raw_decode, len(decoder))
                   if "raise JSONDecodeError" in decoder[i]) + 1
    decode = next(i for i, ln in enumerate(decoder)
                  if "obj, end = self.raw_decode(" in ln) + 1
    loads = next(i for i, ln in enumerate(init) if "return _default_decoder.decode(s)" in ln) + 1
    outside = tmp_path / "elsewhere.py"
    outside.write_text("CANARY_OUTSIDE_FRAME = 1\n", encoding="utf-8")
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "{outside}", line 1, in <module>\n'
        f'  File "{workspace / "json" / "__init__.py"}", line {loads}, in loads\n'
        f'  File "json/decoder.py", line {decode}, in decode\n'
        f'  File "json/decoder.py", line {raising}, in raw_decode\n'
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
    )
    reply = server.request("contenox/explainContext", {
        "question": "Why does this fail?", "includeText": True,
        "outputs": [{"kind": "test", "source": "pytest", "text": trace}]}, timeout=300)
    segments = reply["result"]["segments"]
    output = next(s for s in segments if s["label"] == "test output pytest")
    assert "JSONDecodeError: Expecting value" in output["text"]
    code = next(s for s in segments if s["label"] == "code (question)")["text"]
    titles = re.findall(r"^json/\S+:\d+ (.+)$", code, re.M)
    # Shown whole, the traceback is their reason; one that did not fit leads the headers.
    assert titles[:2] == ["JSONDecoder.raw_decode (in the output's traceback)",
                          "JSONDecoder.decode (in the output's traceback)"]
    headers = code.split("Headers of more definitions (bodies left out):\n\n", 1)
    assert "loads (in the output's traceback)" in titles or (
        len(headers) == 2 and headers[1].startswith("json/__init__.py:"))
    text = "\n".join(s.get("text") or "" for s in segments)
    assert "CANARY_OUTSIDE_FRAME" not in text.replace(trace, "")


# -- edit storms -----------------------------------------------------------------------------------

def test_an_edit_storm_coalesces_and_memory_settles(tmp_path: Path) -> None:
    """10,000 incremental edits of a 25 KB file: the next explainContext is answered, the
    document text is exact, and RSS settles near its level before the storm."""
    root = copy_stdlib_json(tmp_path)
    path = root / "json" / "storm.py"
    base = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(900))[:25_000]
    path.write_text(base, encoding="utf-8")
    srv = RawServer(root, IDLE)
    try:
        uri = path.as_uri()
        srv.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": base}})
        ready = wait_status(srv, lambda s: s["model"] is not None
                            and s["index"]["state"] == "ready")
        assert ready["index"]["files"] > 0
        srv.request("contenox/explainContext", {"textDocument": {"uri": uri}}, timeout=300)
        rss_before = srv.rss_kib()
        expected = base
        chunk = []
        for i in range(10_000):
            line = 3 * (i % 266)  # a "def" line: never empty
            # Type a character at the start of a line; every 5th edit deletes one instead.
            if i % 5 == 4:
                change = {"range": {"start": {"line": line, "character": 0},
                                    "end": {"line": line, "character": 1}}, "text": ""}
            else:
                change = {"range": {"start": {"line": line, "character": 0},
                                    "end": {"line": line, "character": 0}}, "text": "#"}
            expected = apply(expected, change)
            chunk.append({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": i + 2}, "contentChanges": [change]}})
            if len(chunk) == 200:
                srv.send_raw(b"".join(frame(m) for m in chunk))
                chunk = []
        sent = time.monotonic()
        explain = srv.request("contenox/explainContext", {"textDocument": {"uri": uri}},
                              timeout=300)
        answered_s = time.monotonic() - sent
        assert explain["result"]["segments"]
        doc = srv.request("contenox/document", {"textDocument": {"uri": uri}})
        assert doc["result"]["text"] == expected
        assert doc["result"]["version"] == 10_001
        status = srv.request("contenox/status")["result"]
        rss_after = settled_rss(srv, rss_before)
        print(f"edit storm: explainContext answered {answered_s:.2f} s after the last edit; "
              f"RSS {rss_before // 1024} MB before, {rss_after // 1024} MB after; "
              f"folded {status['index'].get('foldedChanges')} of 10000 changes")
        assert rss_after <= 1.2 * rss_before
        assert status["index"]["foldedChanges"] > 0
    finally:
        srv.close()


def wait_status(srv: RawServer, ok: Any, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = srv.request("contenox/status")["result"]
        if ok(status) or time.monotonic() > deadline:
            assert ok(status), status
            return status
        time.sleep(0.2)


def settled_rss(srv: RawServer, target_kib: int, timeout: float = 60) -> int:
    """RSS once it is within 1.2x of ``target_kib`` (or the last reading at the timeout)."""
    deadline = time.monotonic() + timeout
    rss = srv.rss_kib()
    while rss > 1.2 * target_kib and time.monotonic() < deadline:
        time.sleep(0.5)
        rss = srv.rss_kib()
    return rss


def frame(message: dict[str, Any]) -> bytes:
    return frame_body(json.dumps(message).encode())


def apply(text: str, change: dict[str, Any]) -> str:
    lines = text.split("\n")
    start, end = change["range"]["start"], change["range"]["end"]

    def offset(p: dict[str, int]) -> int:
        return sum(len(ln) + 1 for ln in lines[: p["line"]]) + p["character"]

    return text[: offset(start)] + change["text"] + text[offset(end):]


def test_messages_sent_with_initialized_are_not_lost(tmp_path: Path) -> None:
    """An editor may send ``initialized``, a didOpen and a code action in one write (the three
    then reach the server in one read): the runtime exists before the next message is
    handled, so the cursor that code action gives is where the idle time warms an ask."""
    root = copy_stdlib_json(tmp_path)
    path = root / "json" / "decoder.py"
    text = path.read_text("utf-8")
    line = next(i for i, ln in enumerate(text.splitlines()) if "def raw_decode" in ln) + 1
    srv = RawServer(root, initialized=False)
    try:
        uri = path.as_uri()
        point = {"line": line, "character": 0}
        srv.send_raw(framed(
            notification("initialized", {}),
            notification("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": text}}),
            {"jsonrpc": "2.0", "id": "action", "method": "textDocument/codeAction", "params": {
                "textDocument": {"uri": uri}, "range": {"start": point, "end": point},
                "context": {"diagnostics": []}}}))
        assert "result" in srv.response("action")
        deadline = time.monotonic() + 300  # a hang guard
        while True:
            status = srv.request("contenox/status")["result"]
            if status["state"] == "warm" and not status["contextStale"] \
                    and status["index"]["state"] == "ready":
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        explained = srv.request("contenox/explainContext", {
            "textDocument": {"uri": uri}, "position": point,
            "question": "Why is this here?"})["result"]
        cursor = [s["status"] for s in explained["segments"] if s["label"] == "cursor context"]
        assert cursor == ["cached"], explained["segments"]
    finally:
        srv.close()
