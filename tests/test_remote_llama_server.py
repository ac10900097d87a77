"""``backend = "llama-server"`` against a real llama-server (built from the llama.cpp that
llama-cpp-python vendors; ``python -m contenox_bench.llama_server build``, which ``.ci/run``
runs) started on 127.0.0.1 with the embedded model: the engine seam (warm == cold, reuse as the
server reports it, cancel, restart, server down, bad answers) and the language server on it.

The tests that need the server skip, with the reason, only where the binary is not there (the
build failed or was not run); an unreachable server needs none.
"""

from __future__ import annotations

import sysconfig
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pytest_lsp import LanguageClient
from test_lsp_support import (
    change_doc,
    copy_stdlib_json,
    open_doc,
    raw_request,
    request,
    start_client,
    stop_client,
    wait_warm,
)

from contenox_bench import llama_server
from engine import (
    CancelledError,
    ContextOverflowError,
    ProfileMismatchError,
    load_profile,
    open_session,
)
from engine.errors import (
    RemoteError,
    RemoteUnavailableError,
    SnapshotCorruptError,
    SnapshotIncompatibleError,
    UnsupportedCapabilityError,
)
from engine.remote.client import ServerClient
from engine.remote.llama_server import LlamaServerSession
from engine.snapshot_file import read_snapshot, write_snapshot


def _require_binary() -> None:
    reason = llama_server.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)

N_CTX = 2048
CHUNK = 32  # remote.reuse_chunk = the test server's -ub


def _whole_chunks(n: int) -> int:
    return n // CHUNK * CHUNK
QUESTION = "What does JSONDecoder.decode return?"


def _profile(url: str, **extra: Any) -> Any:
    overrides = {"profile.backend": "llama-server", "remote.url": url, "remote.reuse_chunk": CHUNK,
                 "context.n_ctx": N_CTX, "remote.timeout_s": 60.0, **extra}
    return load_profile(None).with_overrides(overrides, source="test")


@pytest.fixture(scope="module")
def server(model_path: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[llama_server.RunningServer]:
    _require_binary()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    running = llama_server.start(Path(model_path), log_path=log, n_ctx=N_CTX, threads=2)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def remote(server: llama_server.RunningServer) -> Iterator[LlamaServerSession]:
    session = open_session(_profile(server.url))
    assert isinstance(session, LlamaServerSession)
    yield session
    session.close()


@pytest.fixture(scope="module")
def server_kernels() -> Iterator[Any]:
    """The in-process engine computing as the test server does: repacked weights (llama.cpp's
    default; not on AMX CPUs, where the server runs without) in micro-batches of CHUNK from
    position 0 (the chunked schedule)."""
    prof = load_profile(None).with_overrides(
        {"context.n_ctx": N_CTX, "context.repack_weights": llama_server.repacks(),
         "cache.exact_schedule": "chunked", "cache.exact_chunk": CHUNK}, source="test")
    with open_session(prof) as session:
        yield session


def _prompt(session: Any, suffix: str) -> list[int]:
    body = (Path(sysconfig.get_paths()["stdlib"]) / "json" / "decoder.py").read_text(
        encoding="utf-8")[:1400]
    return [int(session.bos_token_id), *session.tokenize(body + suffix, special=False)]


def test_tokens_are_the_in_process_engines(remote: LlamaServerSession, llama_session: Any
                                           ) -> None:
    text = "def decode(self, s):\n    return json.loads(s)  # <start_of_turn> stays text\n"
    assert remote.tokenize(text, special=False) == llama_session.tokenize(text, special=False)
    assert remote.tokenize("<start_of_turn>user\n") == llama_session.tokenize(
        "<start_of_turn>user\n")
    assert remote.bos_token_id == llama_session.bos_token_id
    assert remote.detokenize(remote.tokenize(text, special=False)) == text


def test_warm_equals_cold_and_the_in_process_engine(remote: LlamaServerSession,
                                                    server_kernels: Any) -> None:
    prompt = _prompt(remote, "\n# What does decode return?\n")
    other = _prompt(remote, "\n# Something else entirely, longer than the first.\n")
    remote.reset()
    cold_fill = remote.prefill(prompt)
    assert cold_fill.reused_tokens == 0 and cold_fill.new_tokens == len(prompt)
    cold = remote.generate(max_tokens=16)
    remote.prefill(other)
    remote.generate(max_tokens=8)
    warm_fill = remote.prefill(prompt)
    assert warm_fill.reused_tokens > len(prompt) // 2  # the shared file text came from the slot
    warm = remote.generate(max_tokens=16)
    assert warm.tokens == cold.tokens
    server_kernels.reset()
    server_kernels.prefill(prompt)
    local = server_kernels.generate(max_tokens=16)
    assert cold.tokens == local.tokens


def test_a_follow_up_that_holds_the_answer_is_warm_equals_cold(remote: LlamaServerSession
                                                                ) -> None:
    prompt = _prompt(remote, "\n# What does decode do?\n")
    remote.prefill(prompt)
    answer = remote.generate(max_tokens=12)
    follow = [*prompt, *answer.tokens, *remote.tokenize("\n# And raw_decode?\n", special=False)]
    warm_fill = remote.prefill(follow)
    warm = remote.generate(max_tokens=12)
    # The answer's tokens were decoded one by one: only the prompt's whole chunks are reused.
    assert warm_fill.reused_tokens == _whole_chunks(len(prompt) - 1)
    remote.reset()
    remote.prefill(follow)
    assert remote.generate(max_tokens=12).tokens == warm.tokens


def test_reuse_is_what_the_server_reported(remote: LlamaServerSession) -> None:
    prompt = _prompt(remote, "\n# one\n")
    remote.prefill(prompt)
    longer = [*prompt, *remote.tokenize(" two three four five", special=False)]
    result = remote.prefill(longer)
    timings = remote.metrics.extra["last_server_timings"]
    assert result.reused_tokens == timings["cache_n"]
    assert result.new_tokens == timings["prompt_n"]
    assert result.reused_tokens + result.new_tokens == len(longer)
    # Whole chunks of the previous prompt only: its partial last chunk is computed again.
    assert result.reused_tokens == _whole_chunks(len(prompt)) > 0
    assert result.miss_reason is None
    assert remote.warm_prefix(longer) == _whole_chunks(len(longer) - 1)


def test_without_chunks_the_server_reuses_any_common_prefix(
    server: llama_server.RunningServer,
) -> None:
    session = open_session(_profile(server.url, **{"remote.reuse_chunk": 0}))
    try:
        prompt = _prompt(session, "\n# granular\n")
        session.prefill(prompt)
        longer = [*prompt, *session.tokenize(" and more", special=False)]
        # The slot also holds the token the prefill generated, which may match " and".
        assert len(prompt) <= session.prefill(longer).reused_tokens <= len(prompt) + 1
        assert session.reuse_granularity == 1
    finally:
        session.close()


def test_cancel_mid_stream_ends_it_and_the_session_goes_on(remote: LlamaServerSession) -> None:
    prompt = _prompt(remote, "\n# Continue the code:\n")
    remote.prefill(prompt)
    stream = remote.stream(max_tokens=200)
    first = next(stream)
    assert isinstance(first, str)
    remote.cancel()
    with pytest.raises(CancelledError) as err:
        for _ in stream:
            pass
    assert err.value.data["stage"] == "decode"
    assert err.value.data["decoded_tokens"] < 200
    again = remote.prefill(prompt)
    assert again.reused_tokens == _whole_chunks(len(prompt) - 1)
    assert remote.generate(max_tokens=4).decode_tokens >= 1


def test_a_cancelled_prefill_keeps_the_prefix_it_was_to_reuse(remote: LlamaServerSession
                                                                ) -> None:
    """An idle prefill cancelled by a keystroke: the slot still holds the prefix the request
    was to reuse, and the session says so (else the next chunked prefill would start over and
    cut the slot back to its first step)."""
    prompt = _prompt(remote, "\n# cancelled\n")
    remote.prefill(prompt)
    longer = [*prompt, *remote.tokenize("\n# more text to compute\n" * 60, special=False)]
    requests = remote._request

    def cancel_at_first_progress(tokens: Any, n_predict: int, *, cache: bool = True) -> Any:
        for piece in requests(tokens, n_predict, cache=cache):
            remote.cancel()  # the first event of the request: at most one server batch done
            yield piece

    remote._request = cancel_at_first_progress  # type: ignore[method-assign]
    try:
        with pytest.raises(CancelledError) as err:
            remote.prefill(longer)
    finally:
        del remote._request
    kept = _whole_chunks(len(prompt) - 1)
    assert err.value.data["committed_tokens"] == kept == remote.n_resident
    assert remote.warm_prefix(longer) == kept
    again = remote.prefill(longer)
    assert again.reused_tokens >= kept and again.miss_reason is None
    warm = remote.generate(max_tokens=8).tokens
    remote.reset()
    remote.prefill(longer)
    assert remote.generate(max_tokens=8).tokens == warm  # the kept prefix: warm == cold


def test_over_context_is_refused_before_any_request(remote: LlamaServerSession) -> None:
    before = remote.metrics.prefill_calls
    with pytest.raises(ContextOverflowError):
        remote.prefill([remote.bos_token_id or 2] * (N_CTX + 1))
    assert remote.metrics.prefill_calls == before


def test_a_profile_context_larger_than_the_servers_slot_is_refused(
    server: llama_server.RunningServer,
) -> None:
    with pytest.raises(ProfileMismatchError) as err:
        open_session(_profile(server.url, **{"context.n_ctx": N_CTX * 2}))
    assert err.value.data == {"server_n_ctx": N_CTX, "n_ctx": N_CTX * 2}
    with pytest.raises(ProfileMismatchError):
        open_session(_profile(server.url, **{"remote.slot": 3}))


def test_http_errors_are_structured(server: llama_server.RunningServer) -> None:
    client = ServerClient(server.url)
    try:
        with pytest.raises(RemoteError) as err:
            client.post("/no-such-endpoint", {})
        assert err.value.data["status"] == 404
        with pytest.raises(RemoteError) as bad:
            client.post("/completion", {"prompt": {"not": "a prompt"}, "n_predict": 1})
        assert 400 <= bad.value.data["status"] < 500
    finally:
        client.close()


def test_server_down_is_a_structured_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{llama_server.free_port()}"
    with pytest.raises(RemoteUnavailableError) as err:
        open_session(_profile(url, **{"remote.connect_timeout_s": 2.0}))
    assert err.value.code == "remote_unavailable"
    assert url in err.value.message


def test_restart_is_a_reported_miss_and_down_is_an_error(model_path: str, tmp_path: Path,
                                                         ) -> None:
    _require_binary()
    port = llama_server.free_port()
    first = llama_server.start(Path(model_path), log_path=tmp_path / "a.log", port=port,
                               n_ctx=N_CTX, threads=2)
    session = open_session(_profile(first.url))
    try:
        prompt = _prompt(session, "\n# restart\n")
        session.prefill(prompt)
        assert session.prefill(prompt).reused_tokens == _whole_chunks(len(prompt) - 1)
        first.stop()
        with pytest.raises(RemoteUnavailableError):
            session.prefill(prompt)
        assert session.n_resident == 0  # nothing is claimed resident after a failure
        second = llama_server.start(Path(model_path), log_path=tmp_path / "b.log", port=port,
                                    n_ctx=N_CTX, threads=2)
        try:
            session.prefill(prompt)  # resident again on the new server
            second_again = session.prefill(prompt)
            assert second_again.reused_tokens == _whole_chunks(len(prompt) - 1)
            second.stop()
            third = llama_server.start(Path(model_path), log_path=tmp_path / "c.log",
                                       port=port, n_ctx=N_CTX, threads=2)
            try:
                missed = session.prefill(prompt)
                assert missed.reused_tokens == 0
                assert missed.miss_reason is not None and "restarted" in missed.miss_reason
            finally:
                third.stop()
        finally:
            second.stop()
    finally:
        session.close()
        first.stop()


def test_a_server_killed_mid_stream_is_a_structured_error(model_path: str, tmp_path: Path
                                                          ) -> None:
    _require_binary()
    running = llama_server.start(Path(model_path), log_path=tmp_path / "k.log", n_ctx=N_CTX,
                                 threads=2)
    session = open_session(_profile(running.url))
    try:
        session.prefill(_prompt(session, "\n# Continue the code:\n"))
        stream = session.stream(max_tokens=400)
        next(stream)
        running.process.kill()  # the connection drops under the stream
        with pytest.raises(RemoteUnavailableError) as err:
            for _ in stream:
                pass
        assert err.value.code == "remote_unavailable"
    finally:
        session.close()
        running.stop()


# ----------------------------------------------------------------- snapshots (slot files)


def test_without_slot_save_path_snapshots_are_refused_with_the_reason(remote: LlamaServerSession,
                                                                     tmp_path: Path) -> None:
    assert remote.capabilities["snapshots"] is False
    remote.prefill(_prompt(remote, "\n# snap\n"))
    with pytest.raises(UnsupportedCapabilityError, match="--slot-save-path"):
        remote.save_snapshot(tmp_path / "x.snap")
    assert not (tmp_path / "x.snap").exists()


def test_a_slot_snapshot_survives_a_server_restart_warm_equals_cold(model_path: str,
                                                                     tmp_path: Path) -> None:
    """Saved on one server, restored into a fresh server and a fresh session (an editor and a
    server restarted): the restored prefix is reused, and the greedy tokens are the cold run's.
    Damaged, forged, foreign and vanished snapshots are refused with the session unharmed."""
    _require_binary()
    slots = tmp_path / "slots"
    slots.mkdir()
    port = llama_server.free_port()
    extra = ["--slot-save-path", str(slots)]
    first = llama_server.start(Path(model_path), log_path=tmp_path / "a.log", port=port,
                               n_ctx=N_CTX, threads=2, extra=extra)
    session = open_session(_profile(first.url))
    try:
        assert session.capabilities["snapshots"] is True
        prefix = _prompt(session, "\n# snapshot\n")
        full = [*prefix, *session.tokenize("def restored(x):\n    return", special=False)]
        session.prefill(prefix)
        saved = session.save_snapshot(tmp_path / "stable.snap")
        assert saved.tokens == len(prefix)
        session.reset()
        session.prefill(full)
        cold = session.generate(max_tokens=12).tokens
    finally:
        session.close()
        first.stop()
    second = llama_server.start(Path(model_path), log_path=tmp_path / "b.log", port=port,
                                n_ctx=N_CTX, threads=2, extra=extra)
    fresh = open_session(_profile(second.url))
    try:
        with pytest.raises(SnapshotIncompatibleError):
            fresh.load_snapshot(tmp_path / "stable.snap", expect_prefix=full)
        forged = read_snapshot(tmp_path / "stable.snap")
        write_snapshot(tmp_path / "forged.snap", replace(forged, tokens=forged.tokens[:-1]))
        with pytest.raises(SnapshotCorruptError, match="does not match its tokens"):
            fresh.load_snapshot(tmp_path / "forged.snap")
        assert fresh.n_resident == 0

        loaded = fresh.load_snapshot(tmp_path / "stable.snap", expect_prefix=prefix[:64])
        assert loaded.tokens == len(prefix) and fresh.n_resident == len(prefix)
        warm_fill = fresh.prefill(full)
        assert warm_fill.reused_tokens == _whole_chunks(len(prefix))  # from the slot file
        assert warm_fill.miss_reason is None
        assert fresh.generate(max_tokens=12).tokens == cold

        for f in slots.iterdir():
            f.unlink()  # the server's files are gone (another machine, cleaned up)
        with pytest.raises(SnapshotCorruptError, match="cannot restore"):
            fresh.load_snapshot(tmp_path / "stable.snap")
        assert fresh.n_resident == 0  # the failed restore left the slot empty
        assert fresh.prefill(full).reused_tokens == 0
    finally:
        fresh.close()
        second.stop()


# ----------------------------------------------------------------- backend = "openai"


@pytest.fixture(scope="module")
def openai_session(server: llama_server.RunningServer) -> Iterator[Any]:
    """The OpenAI-compatible API of the same llama-server (``/v1/completions``)."""
    session = open_session(_profile(server.url, **{"profile.backend": "openai",
                                                   "remote.reuse_chunk": 0}))
    yield session
    session.close()


def test_openai_backend_sends_ids_and_answers_as_the_in_process_engine(
    openai_session: Any, server_kernels: Any
) -> None:
    assert openai_session.backend == "openai"
    text = "# nonce 7Q2\n" + (Path(sysconfig.get_paths()["stdlib"]) / "json" / "scanner.py"
                             ).read_text(encoding="utf-8")[:900]
    # No BOS: the prompt shares no first token with what the server's cache holds, so the
    # server computes it from position 0, in the same micro-batches as the cold engine.
    prompt = openai_session.tokenize(text, special=False)
    assert prompt == server_kernels.tokenize(text, special=False)
    assert openai_session.bos_token_id == server_kernels.bos_token_id
    openai_session.prefill(prompt)
    remote = openai_session.generate(max_tokens=12)
    server_kernels.reset()
    server_kernels.prefill(prompt)
    local = server_kernels.generate(max_tokens=12)
    assert remote.text == local.text and remote.decode_tokens >= 1


def test_openai_backend_reports_the_servers_cached_tokens(openai_session: Any) -> None:
    prompt = openai_session.tokenize("# openai reuse\n" + "x = 1\n" * 60, special=False)
    openai_session.prefill(prompt)
    longer = [*prompt, *openai_session.tokenize("y = 2\n", special=False)]
    result = openai_session.prefill(longer)
    usage = openai_session.metrics.extra["last_server_timings"]
    assert openai_session.metrics.extra["reuse_reported_by_server"] is True
    assert result.reused_tokens == usage["prompt_tokens_details"]["cached_tokens"]
    assert len(prompt) - 1 <= result.reused_tokens < len(longer)
    assert result.new_tokens == len(longer) - result.reused_tokens


# ----------------------------------------------------------------- the language server on it


@pytest.fixture(scope="module")
def remote_profile(server: llama_server.RunningServer,
                   tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("remote-profile") / "remote.toml"
    path.write_text(
        f'[profile]\nbackend = "llama-server"\n[remote]\nurl = "{server.url}"\n'
        f"reuse_chunk = {CHUNK}\n"
        f"[context]\nn_ctx = {N_CTX}\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("remotelsp"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def lsp(workspace: Path, remote_profile: Path) -> AsyncIterator[LanguageClient]:
    client = await start_client(workspace, "neovim", {
        "profile": str(remote_profile), "codeTokens": 256,
        "snapshotDir": str(workspace.parent / "snapshots"),
    })
    await wait_warm(client)
    yield client
    await stop_client(client)


def _segments(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["label"]: s for s in result["segments"]}


async def test_language_server_explains_and_answers_on_the_remote_backend(
    lsp: LanguageClient,
) -> None:
    status = await request(lsp, "contenox/status", None)
    assert status["backend"] == "llama-server"
    assert "llama-server" in status["model"]
    explained = await wait_warm(lsp)
    assert explained["backend"] == "llama-server"
    assert explained["pendingPrefillTokens"] == 0
    assert _segments(explained)["repo map"]["status"] == "cached"
    answer = await request(lsp, "contenox/ask", {"question": QUESTION, "maxTokens": 8})
    m = answer["metrics"]
    # The idle pre-prefill left the stable prefix in the slot: the server reused it.
    assert m["reusedTokens"] >= explained["reusedTokens"] > 0
    assert m["newTokens"] == m["promptTokens"] - m["reusedTokens"]


async def test_an_edit_in_the_repo_map_is_a_miss_from_that_segment(
    lsp: LanguageClient, workspace: Path
) -> None:
    path = workspace / "json" / "decoder.py"
    text = path.read_text(encoding="utf-8")
    uri = open_doc(lsp, path, text)
    before = _segments(await wait_warm(lsp))
    sig = "    def raw_decode(self, s, idx=0):\n"
    line = text.splitlines(keepends=True).index(sig)
    col = len("    def raw_decode(self, s, idx=0")
    change_doc(lsp, uri, 2, [(line, col, line, col, ", strict=None")])
    after = await request(lsp, "contenox/explainContext", None)
    segs = _segments(after)
    assert segs["repo map"]["tokenHash"] != before["repo map"]["tokenHash"]
    assert segs["repo map"]["status"] == "new"
    assert segs["system"]["status"] == "cached"
    assert after["reusedTokens"] <= segs["repo map"]["tokenStart"]
    warmed = await wait_warm(lsp)
    assert _segments(warmed)["repo map"]["status"] == "cached"


async def test_inline_completion_on_the_remote_backend(lsp: LanguageClient, workspace: Path
                                                       ) -> None:
    path = workspace / "json" / "scanner.py"
    text = path.read_text(encoding="utf-8")
    uri = open_doc(lsp, path, text)
    lines = text.splitlines()
    line = next(i for i, t in enumerate(lines) if t.startswith("def py_make_scanner"))
    result = await raw_request(lsp, "textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line + 1, "character": 0},
        "context": {"triggerKind": 1},
    })
    assert isinstance(result["items"], list)
    for item in result["items"]:
        assert item["insertText"].strip()


def test_health_endpoint_is_up(server: llama_server.RunningServer) -> None:
    assert httpx.get(f"{server.url}/health", timeout=5).status_code == 200
