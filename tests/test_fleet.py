"""A team fleet (docs/fleet.md): two real llama-server replicas behind a real vllm-router
(``contenox_bench.fleet``), with the embedded model.

Two language servers with different session keys each keep their prefix on the replica the
router hashed them to; a replica killed under a developer costs one slower answer on the other
replica (a reported miss), never an error; the key and the cache salt go out with every
request. The salt's reader (vLLM) does not run here: a small recording proxy in front of the
real llama-server shows what the ``openai`` backend sends.

The tests that need the servers skip, with the reason, only where llama-server or vllm-router
is not installed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pytest_lsp import LanguageClient
from test_lsp_support import copy_stdlib_json, request, start_client, stop_client, wait_warm

from contenox_bench import fleet as fleet_mod
from contenox_bench import fleet_bench, goals, llama_server
from contenox_bench.config import DEFAULT, FleetConfig
from contenox_bench.progress import Progress
from engine import ContextOverflowError, ProfileError, load_profile, open_session
from engine.errors import RemoteError, RemoteUnavailableError
from engine.remote.client import RetryBudget, is_retryable
from engine.remote.llama_server import LlamaServerSession
from engine.remote.session_key import derive_session_key

N_CTX = 2048
CHUNK = 32


def _require_fleet() -> None:
    reason = fleet_mod.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


def _profile(url: str, **extra: Any) -> Any:
    overrides = {"profile.backend": "llama-server", "remote.url": url, "remote.slot": -1,
                 "remote.reuse_chunk": CHUNK, "context.n_ctx": N_CTX, "remote.timeout_s": 60.0,
                 "remote.retry_s": 20.0, **extra}
    return load_profile(None).with_overrides(overrides, source="test")


def _prompt(session: Any, text: str) -> list[int]:
    return [int(session.bos_token_id), *session.tokenize(text, special=False)]


# ----------------------------------------------------------------- keys and salts


def test_derived_session_keys_are_stable_distinct_and_name_nothing() -> None:
    key = derive_session_key("alice", "/home/alice/src/secret-project")
    assert key == derive_session_key("alice", "/home/alice/src/secret-project")
    assert key != derive_session_key("bob", "/home/alice/src/secret-project")
    assert key != derive_session_key("alice", "/home/alice/src/other")
    assert "alice" not in key and "secret" not in key and "/" not in key
    assert key.startswith("cx-") and len(key) == 3 + 32  # 128 bits: no team collides


@pytest.mark.parametrize("field", ["remote.session_key", "remote.cache_salt"])
@pytest.mark.parametrize("bad", ["two words", "line\nbreak", "x" * 300, "clé", 7])
def test_a_key_or_salt_that_cannot_travel_in_a_header_is_refused(field: str, bad: Any) -> None:
    with pytest.raises(ProfileError, match=field.replace(".", r"\.")):
        load_profile(None).with_overrides({field: bad}, source="test")


def test_keys_salts_and_retries_are_not_the_cache_identity() -> None:
    base = load_profile(None).with_overrides({"profile.backend": "llama-server"}, source="t")
    other = base.with_overrides({"remote.session_key": "dev-b", "remote.cache_salt": "s1",
                                 "remote.retry_s": 0.0}, source="t")
    assert other.profile_id == base.profile_id


def test_retries_back_off_within_their_budget_and_only_for_what_another_try_may_fix() -> None:
    budget = RetryBudget(30.0)
    assert [budget.next_delay() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert RetryBudget(0.0).next_delay() is None  # remote.retry_s = 0: never
    assert is_retryable(RemoteUnavailableError("refused", url="u"))
    for status in (502, 503, 504):
        assert is_retryable(RemoteError("gone", status=status))
    router_500 = RemoteError("u/v1/models answered HTTP 500: Request failed: error sending "
                             "request for url (http://replica/v1/models)", status=500)
    assert is_retryable(router_500)
    assert not is_retryable(RemoteError("u answered HTTP 500: model crashed", status=500))
    assert not is_retryable(RemoteError("bad request", status=400))
    assert not is_retryable(ContextOverflowError("too long"))


class _Recorder(ThreadingHTTPServer):
    """Forwards every request to ``upstream`` and keeps (path, headers, JSON body)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[tuple[str, dict[str, str], Any]] = []
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(BaseHTTPRequestHandler):
    server: _Recorder

    def _forward(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        self.server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()},
                                 json.loads(raw) if raw else None))
        answer = httpx.request(self.command, self.server.upstream + self.path, content=raw,
                               headers={"Content-Type": "application/json"}, timeout=60)
        self.send_response(answer.status_code)
        self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(answer.content)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = _forward

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(model_path: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[llama_server.RunningServer]:
    reason = llama_server.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    log = tmp_path_factory.mktemp("fleet-single") / "server.log"
    running = llama_server.start(Path(model_path), log_path=log, n_ctx=N_CTX, threads=2)
    yield running
    running.stop()


def test_the_key_and_the_cache_salt_go_out_with_every_request(
        server: llama_server.RunningServer) -> None:
    recorder = _Recorder(server.url)
    thread = threading.Thread(target=recorder.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    try:
        profile = _profile(url, **{"profile.backend": "openai", "remote.slot": 0,
                                   "remote.reuse_chunk": 0, "remote.session_key": "dev-a",
                                   "remote.cache_salt": "team-a.7f3"})
        with open_session(profile) as session:
            session.prefill(_prompt(session, "def answer():\n    return 42\n"))
            status = session.remote_status
    finally:
        recorder.shutdown()
        recorder.server_close()
    assert recorder.seen
    for path, headers, _ in recorder.seen:
        assert headers.get("x-session-id") == "dev-a", path
        assert headers.get("x-smg-routing-key") == "dev-a", path
    completions = [body for path, _, body in recorder.seen if path == "/v1/completions"]
    assert completions and all(body["cache_salt"] == "team-a.7f3" for body in completions)
    assert status is not None
    assert status["sessionKey"] == "dev-a" and status["cacheSalt"] is True
    assert status["endpoint"] == url
    # The salt itself is not shown; the server's own account of the prompt is.
    assert "team-a" not in json.dumps(status)
    assert status["serverComputedTokens"] is not None


# ----------------------------------------------------------------- a fleet


@pytest.fixture
def small_fleet(model_path: str, tmp_path: Path) -> Iterator[fleet_mod.Fleet]:
    _require_fleet()
    with fleet_mod.running_fleet(Path(model_path), tmp_path / "fleet", replicas=2,
                                 n_ctx=N_CTX, slots=2, threads=1) as running:
        yield running


def test_a_replica_killed_under_a_developer_is_one_reported_miss(
        small_fleet: fleet_mod.Fleet) -> None:
    with open_session(_profile(small_fleet.url, **{"remote.session_key": "dev-kill"})
                      ) as session:
        assert isinstance(session, LlamaServerSession)
        prompt = _prompt(session, "import json\n\ndef load(path):\n    return json.load(path)\n"
                                  * 12)
        session.prefill(prompt)
        warm = session.prefill(prompt)
        assert warm.reused_tokens == (len(prompt) - 1) // CHUNK * CHUNK
        slot = session.remote_status["slot"]  # type: ignore[index]
        holding = small_fleet.replicas_using(slot)
        assert len(holding) == 1
        small_fleet.kill_replica(holding[0])
        moved = session.prefill(prompt)  # the router's 502s are retried: no error
        assert moved.reused_tokens == 0
        assert moved.miss_reason is not None and "replica" in moved.miss_reason
        again = session.prefill(prompt)
        assert again.reused_tokens == warm.reused_tokens  # warm on the other replica
        assert small_fleet.replicas_using(slot) == [1 - holding[0]]
        out = session.generate(max_tokens=4)
        assert out.decode_tokens >= 1


def test_the_bench_section_runs_on_a_small_fleet(tmp_path: Path) -> None:
    """Section 12 as the default bench runs it, smaller: every row answers every ask, the
    kill row included, and its goals are judged from what it measured."""
    _require_fleet()
    from dataclasses import replace

    cfg = replace(DEFAULT, fleet=FleetConfig(developers=2, steps=2, context_chars=900))
    with open(tmp_path / "progress.txt", "w", encoding="utf-8") as stream:
        sec = fleet_bench.run(cfg, load_profile(None), tmp_path, Progress(4, stream))
    assert sec["status"] == "ok", sec["status"]
    for name in fleet_bench.ROWS:
        row = sec["rows"][name]
        assert row["failed_asks"] == 0 and row["asks"] == row["planned_asks"], (name, row)
    # With affinity every ask after the first reuses the developer's context on their replica.
    later = [a for a in sec["rows"]["affinity"]["per_ask"] if a["step"] > 0]
    assert later and all(not a["miss"] for a in later)
    kill = sec["rows"]["kill"]
    assert kill["misses"] + kill["idle_misses"] >= 1  # the killed replica's developers moved
    judged = {g["id"]: g for g in goals.evaluate({"fleet": sec})}
    assert judged["fleet_failover"]["met"] is True
    assert judged["fleet_affinity"]["met"] in (True, False)
    md = "\n".join(fleet_bench.markdown(sec))
    assert "12. A team on shared replicas" in md and "round_robin" in md


def test_a_replica_serving_another_model_is_a_reported_miss_never_its_cache(
        model_path: str, tmp_path: Path) -> None:
    """Replica 1 serves another model file (as far as the server says: another path, so
    another model identity). A developer moved onto it by a failover gets nothing from it
    but a reported identity miss."""
    _require_fleet()
    other = tmp_path / "other-model.gguf"
    other.symlink_to(model_path)
    with fleet_mod.running_fleet(Path(model_path), tmp_path / "fleet", replicas=2,
                                 n_ctx=N_CTX, slots=2, threads=1,
                                 models=[Path(model_path), other]) as running, \
            open_session(_profile(running.url, **{"remote.session_key": "dev-other"})
                         ) as session:
        prompt = _prompt(session, "def area(r):\n    return 3.14159 * r * r\n" * 10)
        session.prefill(prompt)
        assert session.prefill(prompt).reused_tokens > 0
        before = session.identity
        slot = session.remote_status["slot"]  # type: ignore[index]
        serving = running.replicas_using(slot)
        running.kill_replica(serving[0])
        moved = session.prefill(prompt)
        assert moved.reused_tokens == 0
        assert moved.miss_reason is not None and "server changed" in moved.miss_reason
        assert session.identity != before and session.identity.model_digest != \
            before.model_digest


# ----------------------------------------------------------------- two language servers


@pytest.fixture(scope="module")
def team_fleet(model_path: str, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[fleet_mod.Fleet]:
    _require_fleet()
    with fleet_mod.running_fleet(Path(model_path), tmp_path_factory.mktemp("team-fleet"),
                                 replicas=2, n_ctx=N_CTX, slots=2, threads=1) as running:
        yield running


def _workspace(root: Path, key: str, url: str) -> tuple[Path, Path]:
    ws = copy_stdlib_json(root)
    if key == "dev-d":  # another repository: another prefix
        (ws / "json" / "scanner.py").unlink()
    profile = root / "fleet.toml"
    profile.write_text(
        f'[profile]\nbackend = "llama-server"\n[remote]\nurl = "{url}"\nslot = -1\n'
        f'reuse_chunk = {CHUNK}\nsession_key = "{key}"\nretry_s = 20.0\n'
        f"[context]\nn_ctx = {N_CTX}\n", encoding="utf-8")
    return ws, profile


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def developers(team_fleet: fleet_mod.Fleet, tmp_path_factory: pytest.TempPathFactory
                     ) -> AsyncIterator[dict[str, LanguageClient]]:
    clients: dict[str, LanguageClient] = {}
    try:
        # Keys whose slots differ (sha256 mod 2: 0 and 1), wherever the router puts them: two
        # keys on one slot of one replica take turns (reported misses, docs/fleet.md).
        for key in ("dev-a", "dev-d"):
            root = tmp_path_factory.mktemp(key)
            ws, profile = _workspace(root, key, team_fleet.url)
            clients[key] = await start_client(ws, "neovim", {
                "profile": str(profile), "codeTokens": 256,
                "snapshotDir": str(root / "snapshots")})
        for client in clients.values():
            await wait_warm(client)
        yield clients
    finally:
        for client in clients.values():
            await stop_client(client)


QUESTION = "What does JSONDecoder.decode return?"


async def test_each_developer_reuses_their_prefix_on_their_replica(
        developers: dict[str, LanguageClient], team_fleet: fleet_mod.Fleet) -> None:
    where: dict[str, list[int]] = {}
    slots: dict[str, int] = {}
    for key, client in developers.items():
        explained = await wait_warm(client)
        answer = await request(client, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
        m = answer["metrics"]
        # The idle pre-prefill left this developer's stable prefix on their replica.
        assert m["reusedTokens"] >= explained["reusedTokens"] > 0, key
        assert m["missReason"] is None, key
        status = await request(client, "contenox/status", None)
        remote = status["remote"]
        assert remote["endpoint"] == team_fleet.url and remote["sessionKey"] == key
        # The server's account of the last request (the answer's, which sends the prompt
        # again: all but its last token from the slot).
        assert remote["serverCachedTokens"] + remote["serverComputedTokens"] == m["promptTokens"]
        assert remote["serverCachedTokens"] >= m["reusedTokens"]
        slots[key] = remote["slot"]
        where[key] = team_fleet.replicas_using(slots[key])
        assert len(where[key]) == 1, (key, where)
    for key, client in developers.items():  # asked again: the same replica, the prefix reused
        again = await request(client, "contenox/ask", {"question": QUESTION + " ", "maxTokens": 4})
        assert again["metrics"]["reusedTokens"] > 0 and again["metrics"]["missReason"] is None
        assert team_fleet.replicas_using(slots[key]) == where[key]
    assert slots["dev-a"] != slots["dev-d"]


async def test_a_killed_replica_costs_one_slower_answer_not_an_error(
        developers: dict[str, LanguageClient], team_fleet: fleet_mod.Fleet) -> None:
    client = developers["dev-a"]
    first = await request(client, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
    slot = (await request(client, "contenox/status", None))["remote"]["slot"]
    holding = team_fleet.replicas_using(slot)
    assert len(holding) == 1
    team_fleet.kill_replica(holding[0])
    moved = await request(client, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
    assert moved["metrics"]["missReason"] is not None  # the prefix was not on the new replica
    assert moved["metrics"]["reusedTokens"] < first["metrics"]["reusedTokens"]
    warmed = await wait_warm(client)  # the idle pre-prefill re-warms the other replica
    assert warmed["reusedTokens"] > 0
    after = await request(client, "contenox/ask", {"question": QUESTION, "maxTokens": 4})
    assert after["metrics"]["missReason"] is None
    assert after["metrics"]["reusedTokens"] >= warmed["reusedTokens"]
    assert team_fleet.replicas_using(slot) == [1 - holding[0]]
    status = await request(client, "contenox/status", None)
    assert status["error"] is None and status["remote"]["endpoint"] == team_fleet.url
