"""A byte-level LSP client for fault tests: the real server process over stdio, with the
stream under the test's control (pytest-lsp's client only sends well-formed messages).

Server → client requests (registerCapability, workDoneProgress/create) are answered with
``null``; every server message is recorded.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_framing import frame
from test_lsp_support import FAST_OPTIONS, SERVER_COMMAND, server_env


def notification(method: str, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def framed(*messages: Any) -> bytes:
    """The messages framed back to back, for one write."""
    return b"".join(frame(json.dumps(m).encode("utf-8")) for m in messages)


class RawServer:
    def __init__(self, root: Path, options: dict[str, Any] | None = None, *,
                 initialized: bool = True) -> None:
        """Start the server and initialize it; ``initialized=False``: the test sends the
        ``initialized`` notification itself (with other messages in the same write)."""
        self.root = root
        self.log_path = root.parent / f"raw-server-{time.monotonic_ns()}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            SERVER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=server_env(root))
        self.received: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0
        result = self.request("initialize", {
            "processId": None, "rootUri": root.as_uri(), "capabilities": {},
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
            "initializationOptions": dict(FAST_OPTIONS, **(options or {})),
        })
        assert "result" in result, result
        if initialized:
            self.notify("initialized", {})

    # -- sending --------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: Any) -> None:
        self.send_raw(frame(json.dumps(message).encode("utf-8")))

    def notify(self, method: str, params: Any) -> None:
        self.send(notification(method, params))

    def new_id(self) -> str:
        self._next_id += 1
        return f"t{self._next_id}"

    def request(self, method: str, params: Any = None, timeout: float = 120) -> dict[str, Any]:
        """The response (``result`` or ``error``) to a well-formed request."""
        msg_id = self.new_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.response(msg_id, timeout)

    # -- receiving ------------------------------------------------------------------------------

    def response(self, msg_id: Any, timeout: float = 120) -> dict[str, Any]:
        return self.wait_for(lambda m: m.get("id") == msg_id and "method" not in m
                             and ("result" in m or "error" in m), timeout)

    def wait_for(self, match: Callable[[dict[str, Any]], bool],
                 timeout: float = 120) -> dict[str, Any]:
        """The first recorded message ``match`` accepts; the timeout is a hang guard."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for m in self.received:
                    if match(m):
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"no such message (server rc={self.proc.poll()}); "
                                         f"log: {self.log_path}")
                self._cond.wait(min(left, 0.5))

    def messages(self, method: str) -> list[dict[str, Any]]:
        with self._cond:
            return [m for m in self.received if m.get("method") == method]

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            assert length is not None
            message = json.loads(out.read(length))
            if "method" in message and "id" in message:  # a request from the server
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            with self._cond:
                self.received.append(message)
                self._cond.notify_all()

    # -- process --------------------------------------------------------------------------------

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.alive():
                self.request("shutdown", timeout=60)
                self.notify("exit", None)
                self.proc.wait(30)
        finally:
            if self.alive():
                self.proc.kill()
                self.proc.wait(30)
            self._log.close()
