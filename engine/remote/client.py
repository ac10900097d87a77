"""HTTP to an inference server, with every failure mapped to a structured engine error.

One ``httpx.Client`` per session (keep-alive on the loopback matters: a request costs ~1 ms
instead of a TCP handshake). Every call has a timeout, so a stuck or vanished server ends as an
error on the engine's worker thread, never as a hang of the language server.

Behind a team's router (docs/fleet.md) every request carries the developer's session key, and
a request that finds no server (a replica died and the router has not noticed yet: 502; a
server restarting: connection refused, 503) is tried again for up to ``remote.retry_s``, so a
failover costs one slower answer rather than an error.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import httpx

from engine.errors import (
    CancelledError,
    ContextOverflowError,
    RemoteError,
    RemoteTimeoutError,
    RemoteUnavailableError,
)
from engine.remote.session_key import SERVED_BY_HEADER, SESSION_HEADERS

T = TypeVar("T")
#: What a router or proxy answers when the replica it picked is gone or not ready; a server
#: loading its model answers 503 too. All are worth a retry: another replica may answer.
RETRY_STATUSES = frozenset({502, 503, 504})
#: How a Rust router (reqwest) says it could not reach the replica it picked.
ROUTER_UPSTREAM_FAILURE = "error sending request"

# httpx logs every request at INFO: at the server's default level that would be a line per
# token count. Its warnings still come through.
logging.getLogger("httpx").setLevel(logging.WARNING)
log = logging.getLogger(__name__)


class ServerClient:
    """JSON requests to one server (``base_url``), an optional bearer key from the environment."""

    def __init__(self, base_url: str, *, api_key_env: str = "", connect_timeout_s: float = 5.0,
                 timeout_s: float = 120.0, session_key: str = "", retry_s: float = 0.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.session_key = session_key
        self.retry_s = retry_s
        #: Requests tried again since the session opened, and the replica that served the last
        #: one when the router or proxy names it (``X-Served-By``).
        self.retries = 0
        self.served_by: str | None = None
        headers = {"Content-Type": "application/json"}
        if session_key:
            headers.update({name: session_key for name in SESSION_HEADERS})
        if api_key_env:
            key = os.environ.get(api_key_env, "")
            if not key:
                raise RemoteUnavailableError(
                    f"remote.api_key_env names {api_key_env!r}, which is not set in the "
                    "environment", url=self.base_url, api_key_env=api_key_env,
                )
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
        )

    def close(self) -> None:
        self._http.close()

    def get(self, path: str) -> Any:
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._call("POST", path, body)

    def retry_budget(self) -> RetryBudget:
        return RetryBudget(self.retry_s)

    def note_retry(self, exc: Exception, delay: float) -> None:
        self.retries += 1
        log.info("%s: %s; sending the request again in %.1f s", self.base_url, exc, delay)

    def retrying(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, tried again while it fails in a way another try may not (no server
        reachable, a router's 502/503/504), for up to ``retry_s`` seconds in all."""
        budget = self.retry_budget()
        while True:
            try:
                return attempt()
            except (RemoteUnavailableError, RemoteError) as exc:
                delay = budget.next_delay() if is_retryable(exc) else None
                if delay is None:
                    raise
                self.note_retry(exc, delay)
                time.sleep(delay)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        return self.retrying(lambda: self._call_once(method, path, body))

    def _call_once(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path) from None
        self._note_served_by(response)
        if response.status_code >= 400:
            raise self._status_error(response.status_code, response.text, path)
        try:
            return response.json()
        except ValueError:
            raise RemoteError(
                f"{self.base_url}{path} answered with something that is not JSON",
                url=self.base_url, path=path, status=response.status_code,
            ) from None

    def events(self, path: str, body: dict[str, Any],
               cancelled: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        """POST ``body`` and yield the server-sent events' JSON objects as they arrive.

        ``cancelled`` is polled between events; when it says so the stream is closed (the server
        stops the request when its client goes away) and ``CancelledError`` is raised. Leaving
        the iterator early closes the stream too."""
        try:
            # Connection: close — llama-server may drop a connection after an event stream;
            # one reused from the pool afterwards fails as "disconnected" on the next request.
            with self._http.stream("POST", path, json=body,
                                   headers={"Connection": "close"}) as response:
                self._note_served_by(response)
                if response.status_code >= 400:
                    response.read()
                    raise self._status_error(response.status_code, response.text, path)
                for line in response.iter_lines():
                    if cancelled():
                        raise CancelledError("remote request cancelled", stage=path)
                    if not line.startswith("data: "):
                        continue  # blank separators, comments
                    payload = line[len("data: "):]
                    if payload.strip() == "[DONE]":
                        return
                    try:
                        event = json.loads(payload)
                    except ValueError:
                        raise RemoteError(
                            f"{self.base_url}{path} sent an event that is not JSON",
                            url=self.base_url, path=path,
                        ) from None
                    if isinstance(event, dict) and "error" in event:
                        err = event["error"]
                        raise self._status_error(
                            int(err.get("code", 500)) if isinstance(err, dict) else 500,
                            json.dumps(event), path,
                        )
                    yield event
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, path) from None

    def _note_served_by(self, response: httpx.Response) -> None:
        self.served_by = response.headers.get(SERVED_BY_HEADER)

    def _transport_error(self, exc: httpx.HTTPError, path: str) -> Exception:
        if isinstance(exc, httpx.TimeoutException):
            return RemoteTimeoutError(
                f"{self.base_url}{path} did not answer in time ({type(exc).__name__}); the "
                "server may be overloaded, or its slot busy with another client's request",
                url=self.base_url, path=path, reason=type(exc).__name__,
            )
        if isinstance(exc, httpx.ConnectError):
            return RemoteUnavailableError(
                f"cannot reach the inference server at {self.base_url}: {exc}",
                url=self.base_url, path=path,
            )
        return RemoteUnavailableError(
            f"the connection to {self.base_url} broke during {path}: {exc}",
            url=self.base_url, path=path, reason=type(exc).__name__,
        )

    def _status_error(self, status: int, text: str, path: str) -> Exception:
        message, kind = _server_message(text)
        if kind == "exceed_context_size_error":
            return ContextOverflowError(
                f"the server's context is too small for this prompt: {message}",
                url=self.base_url, status=status,
            )
        hint = {401: " (check remote.api_key_env)", 404: " (is this a llama-server?)",
                503: " (the server is loading its model or has no free slot)"}.get(status, "")
        return RemoteError(
            f"{self.base_url}{path} answered HTTP {status}: {message}{hint}",
            url=self.base_url, path=path, status=status, type=kind,
        )


class RetryBudget:
    """Backoff delays (0.1 s doubling to 1 s) while they fit in ``seconds`` from now."""

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds
        self._delay = 0.1

    def next_delay(self) -> float | None:
        """How long to wait before the next try; None: the budget is spent."""
        delay = self._delay
        if time.monotonic() + delay > self._deadline:
            return None
        self._delay = min(delay * 2, 1.0)
        return delay


def is_retryable(exc: Exception) -> bool:
    """Whether a request that failed this way may succeed on another try: the server was not
    reached or the connection broke, or a router said its replica is gone (502/503/504, or
    vllm-router's 500 for the paths it answers itself, e.g. ``/v1/models``, whose message is
    its HTTP client's "error sending request for url")."""
    if isinstance(exc, RemoteUnavailableError):
        return True
    if not isinstance(exc, RemoteError):
        return False
    status = exc.data.get("status")
    return status in RETRY_STATUSES or (
        status == 500 and ROUTER_UPSTREAM_FAILURE in str(exc.message))


def _server_message(text: str) -> tuple[str, str]:
    """The message and type of an error body (llama-server: ``{"error": {code, message,
    type}}``); the raw text, shortened, when it is not that shape."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text.strip()[:300] or "(no body)", ""
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict):
        return str(err.get("message", ""))[:300], str(err.get("type", ""))
    return text.strip()[:300], ""
