"""The runtime and the idle prefill in process, on the real model and the real index, without
a language server: the edit stream, debounce, invalidation, warm ask, preemption.

The runtime gets the test session's engine (one model load per test run) through its opener.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from test_lsp_support import copy_stdlib_json

from contenox_lsp.code_segment import QUESTION_MIN_TOKENS
from contenox_lsp.options import ServerOptions
from contenox_lsp.progress import Reporter
from contenox_lsp.runtime import Runtime
from contenox_lsp.runtime.idle_prefill import IdlePrefill
from contenox_lsp.runtime.worker import Priority
from contenox_lsp.turn import TurnSpec, WorkspaceState, turn_at
from contextasm import Assembly, SegmentKind
from contextasm.formats import get_format
from contextasm.render import answer_lead
from engine.results import drain
from repo_index import RepoIndex

BODY_LINE = "        obj, end = self.raw_decode(s, idx=_w(s, 0).end())\n"


class NullReporter:
    def begin(self, title: str, message: str | None = None) -> None: ...
    def report(self, done: int, total: int, message: str) -> None: ...
    def end(self, message: str | None = None) -> None: ...


class RecordingNotifier:
    """What the developer would be shown, recorded."""

    def __init__(self) -> None:
        self.shown: list[str] = []
        self.logged: list[str] = []

    def show(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.shown.append(message)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.logged.append(message)

    async def start_progress(self) -> Reporter:
        return NullReporter()


class Editor:
    """The editor state the runtime reads: open buffers by path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.buffers: dict[Path, str] = {}

    def state(self) -> WorkspaceState:
        return WorkspaceState((self.root,), dict(self.buffers), (), tuple(sorted(self.buffers)))


async def until(probe: Callable[[], bool], timeout: float = 300) -> None:
    """Poll ``probe``; the timeout is a hang guard, not a measurement."""
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_stdlib_json(tmp_path_factory.mktemp("inprocess")).resolve()


@pytest_asyncio.fixture(loop_scope="session")
async def runtime(workspace: Path, llama_session: Any, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[Runtime, Editor,
                                                                          RecordingNotifier]]:
    monkeypatch.setenv("CONTENOX_CACHE_DIR", str(tmp_path / "cache"))
    editor = Editor(workspace)
    decoder = workspace / "json" / "decoder.py"
    editor.buffers[decoder] = decoder.read_text("utf-8")
    notifier = RecordingNotifier()
    options = ServerOptions(debounce_ms=50, repo_map_tokens=192, max_tokens=8)
    rt = Runtime(options, lambda: [workspace], editor.state, notifier,
                 opener=lambda: contextlib.nullcontext(llama_session))
    await rt.start()
    yield rt, editor, notifier
    rt.close()


def warm(rt: Runtime) -> bool:
    return rt.state() == "warm"


async def test_start_prefills_the_idle_prefix(runtime: Any) -> None:
    rt, _, notifier = runtime
    await until(lambda: warm(rt))
    assert rt.idle.target is not None and rt.idle.pending_tokens() == 0
    assert rt.resident_tokens()[: len(rt.idle.target)] == rt.idle.target
    assert notifier.shown == []


async def test_a_body_edit_invalidates_the_diff_only_and_is_prefilled(runtime: Any) -> None:
    rt, editor, _ = runtime
    await until(lambda: warm(rt))
    decoder = rt.roots()[0] / "json" / "decoder.py"
    text = editor.buffers[decoder]
    assert BODY_LINE in text
    editor.buffers[decoder] = text.replace(BODY_LINE, BODY_LINE + "        # checked\n")
    rt.buffer_changed(decoder, editor.buffers[decoder], None, "utf-16")
    assert rt.idle.stale  # the debounce is pending
    await until(lambda: not rt.idle.stale and warm(rt))
    assert rt.idle.last_invalidated == ["diff"]


async def test_an_ask_after_idle_prefill_prefills_only_the_question(runtime: Any) -> None:
    rt, _, _ = runtime
    await until(lambda: warm(rt))
    assembly = await rt.assemble(TurnSpec(question="What does JSONDecoder.decode return?"), 8)
    out = await rt.run_prompt(TurnSpec(question="What does JSONDecoder.decode return?"), 8)
    m = out["metrics"]
    granularity = rt.worker.session.reuse_granularity if rt.worker.session else 1
    assert m["promptTokens"] == assembly.n_tokens
    # Everything before what depends on the question (the question's code, the user turn) was
    # reused, up to the last partial reuse block.
    assert assembly.segment(SegmentKind.CODE) is not None  # the question found code
    assert m["reusedTokens"] >= assembly.question_start - granularity
    assert m["newTokens"] == m["promptTokens"] - m["reusedTokens"]
    assert m["decodeTokens"] > 0 and out["text"]


async def test_an_ask_at_the_last_edit_prefills_only_its_question(runtime: Any) -> None:
    """The idle prefill warms the cursor context where the last edit left the cursor: an ask
    there reuses the user turn up to its question."""
    rt, editor, _ = runtime
    await until(lambda: warm(rt))
    decoder = rt.roots()[0] / "json" / "decoder.py"
    lines = editor.buffers[decoder].split("\n")
    at = next(i for i, ln in enumerate(lines) if ln == BODY_LINE.rstrip("\n"))
    edit = {"range": {"start": {"line": at, "character": 0},
                      "end": {"line": at, "character": 0}}, "text": "        # noted\n"}
    lines.insert(at, "        # noted")
    editor.buffers[decoder] = "\n".join(lines)
    rt.buffer_changed(decoder, editor.buffers[decoder], [edit], "utf-16")
    await until(lambda: not rt.idle.stale and warm(rt))
    turn = turn_at(rt.roots(), decoder, "Why is this line here?",
                   text=editor.buffers[decoder], line=at + 1)
    assembly = await rt.assemble(turn, 8)
    cursor = next(s for s in assembly.segments if s.label == "cursor context")
    assert cursor.n_tokens > 64 and cursor.token_end <= assembly.question_start  # warmed
    out = await rt.run_prompt(turn, 8)
    m = out["metrics"]
    granularity = rt.worker.session.reuse_granularity if rt.worker.session else 1
    assert m["reusedTokens"] >= assembly.question_start - granularity
    assert m["newTokens"] <= assembly.n_tokens - assembly.question_start + granularity

    fmt = get_format(assembly.identity.prompt_format)

    def cold(session: Any, _job: Any) -> str:
        session.reset()
        session.prefill(list(assembly.tokens))
        # Ended as the ask ends its answer: at the format's stop text, after its lead.
        return drain(session.stream(max_tokens=8), None, fmt.stop,
                     answer_lead(fmt, turn.question), fmt.opening).text

    # The warmed cursor context gives the cold run's greedy answer.
    assert out["text"] == await rt.run_user_job(cold, "cold reference")


async def test_the_questions_code_is_bounded_by_the_measured_prefill_rate(runtime: Any) -> None:
    """questionCodeMs: the code found by the question is prefilled at the ask, so it gets what
    the engine's measured rate computes in that time; the room it keeps goes to the cursor's
    code (prefilled in idle time); everything before the code is unchanged."""
    rt, editor, _ = runtime
    await until(lambda: warm(rt))
    assert rt.worker.session is not None
    assert rt.worker.session.metrics.prefill_rate() is not None  # the idle prefill measured it
    decoder = rt.roots()[0] / "json" / "decoder.py"
    line = editor.buffers[decoder].split("\n").index(BODY_LINE.rstrip("\n"))
    turn = turn_at(rt.roots(), decoder, "How are JSON documents decoded and scanned?",
                   text=editor.buffers[decoder], line=line)

    def question_code(asm: Assembly) -> int:
        return sum(s.n_tokens for s in asm.segments if s.label == "code (question)")

    options = rt.options
    try:
        rt.options = dataclasses.replace(options, question_code_ms=0)
        free = await rt.assemble(turn, 8)
        rt.options = dataclasses.replace(options, question_code_ms=1)  # the floor
        bounded = await rt.assemble(turn, 8)
    finally:
        rt.options = options
    assert question_code(bounded) <= QUESTION_MIN_TOKENS < question_code(free)

    def cursor_code(asm: Assembly) -> int:
        return sum(s.n_tokens for s in asm.segments if s.label == "code (cursor)")

    assert cursor_code(bounded) > cursor_code(free)
    start = next(s.token_start for s in free.segments if s.kind == SegmentKind.CODE)
    assert bounded.tokens[:start] == free.tokens[:start]


async def test_a_restarted_server_bounds_the_questions_code_as_the_last_one_did(
        runtime: Any, workspace: Path, llama_session: Any, tmp_path: Path) -> None:
    """The rate that bounds the question's code is remembered per engine identity: a restarted
    server (fresh session metrics, the same cache dir) builds the running server's prompt for
    the same editor state; without the remembered rate it would not (unbounded)."""
    rt, editor, _ = runtime
    await until(lambda: warm(rt))
    decoder = rt.roots()[0] / "json" / "decoder.py"
    line = editor.buffers[decoder].split("\n").index(BODY_LINE.rstrip("\n"))
    turn = turn_at(rt.roots(), decoder, "How are JSON documents decoded and scanned?",
                   text=editor.buffers[decoder], line=line)
    options = rt.options
    rt.options = dataclasses.replace(options, question_code_ms=300)  # a bound that cuts
    try:
        running = await rt.assemble(turn, 8)
        bound = rt.question_code_bound()
    finally:
        rt.options = options
    assert bound["source"] == "measured" and bound["tokens"] is not None
    rates = tmp_path / "cache" / "prefill-rates.json"
    assert rates.is_file()

    async def restarted() -> tuple[Assembly, dict[str, Any]]:
        measured = llama_session.metrics
        llama_session.metrics = type(measured)()  # a new process has measured nothing
        fresh = Runtime(dataclasses.replace(options, question_code_ms=300), rt.roots,
                        editor.state, RecordingNotifier(),
                        opener=lambda: contextlib.nullcontext(llama_session))
        try:
            fresh.worker.start()
            await fresh.reindex(refresh=False)
            return await fresh.assemble(turn, 8), fresh.question_code_bound()
        finally:
            fresh.close()
            llama_session.metrics = measured

    again, again_bound = await restarted()
    assert again_bound["source"] == "remembered"
    assert again_bound["tokens"] == bound["tokens"]
    assert again.tokens == running.tokens
    rates.unlink()
    unbounded, none_bound = await restarted()
    assert none_bound["source"] == "none" and none_bound["tokens"] is None
    assert unbounded.tokens != running.tokens


async def test_changes_within_the_debounce_are_assembled_once(runtime: Any) -> None:
    rt, _, _ = runtime
    await until(lambda: warm(rt))
    calls: list[float] = []

    async def counting() -> Assembly:
        calls.append(time.monotonic())
        return await rt.assemble_idle()

    idle = IdlePrefill(rt.worker, counting, RecordingNotifier(), debounce_ms=200,
                       enabled=False)
    for _ in range(5):
        idle.note_change()
        await asyncio.sleep(0.01)
    await until(lambda: not idle.stale)
    assert len(calls) == 1
    assert idle.target is not None and idle.target == rt.idle.target
    idle.close()


async def test_a_user_job_preempts_background_prefill_and_the_rest_resumes(
    runtime: Any,
) -> None:
    rt, _, _ = runtime
    await until(lambda: warm(rt))
    session = rt.worker.session
    assert session is not None
    # Drop the warm prefix so the idle prefill has a long way to go (not restoring the saved
    # snapshot of it, which would bring it back at once).
    snapshots, rt.idle.snapshots = rt.idle.snapshots, None
    try:
        await rt.run_user_job(lambda s, _job: s.reset(), "reset")
        rt.idle.kick()
        await until(lambda: rt.idle.running)
        resident: Awaitable[int] = rt.run_user_job(lambda s, _job: s.n_resident, "probe")
        at_preemption = await resident
        assert at_preemption < len(rt.idle.target or [])  # it had not finished
        rt.idle.kick()
        await until(lambda: warm(rt))
        assert rt.idle.pending_tokens() == 0
    finally:
        rt.idle.snapshots = snapshots


class UnsavedStablePrefix:
    """A warm runtime whose stable prefix snapshot was saved and then removed, as if its save
    had been skipped; ``roll_back()`` leaves exactly the stable prefix resident."""

    def __init__(self, rt: Runtime) -> None:
        session, assembly = rt.worker.session, rt.idle.assembly
        assert session is not None and assembly is not None and rt.snapshots.active(session)
        self.rt, self.assembly = rt, assembly
        self.n = assembly.stable_end
        self.key = assembly.prefix_key(self.n)
        self.store = rt.snapshots.store(session)
        self.stable = assembly.tokens[: self.n]

    @classmethod
    async def make(cls, rt: Runtime) -> UnsavedStablePrefix:
        await until(lambda: warm(rt))
        state = cls(rt)
        await until(lambda: state.store.get(state.key) is not None)
        state.store.remove(state.key)
        rt.snapshots.saved = None
        return state

    async def roll_back(self) -> None:
        stable = self.stable

        def job(s: Any, _job: Any) -> None:
            s.prefill(stable, identity=s.identity)

        await asyncio.wrap_future(self.rt.worker.submit(job, priority=Priority.USER,
                                                        label="roll back").future)
        assert self.rt.resident_tokens() == stable


async def test_a_stable_prefix_left_resident_unsaved_is_saved_by_the_next_idle_prefill(
        runtime: Any) -> None:
    """A keystroke that lands while the idle prefill stops at the stable prefix skips the save
    there; the next idle prefill, finding exactly the stable prefix resident and no snapshot of
    it, saves it before it goes on (it used to go on and leave the save to shutdown)."""
    rt, _, _ = runtime
    state = await UnsavedStablePrefix.make(rt)
    await state.roll_back()
    rt.idle.kick()
    await until(lambda: warm(rt) and rt.snapshots.saved is not None)
    assert rt.snapshots.saved["tokens"] == state.n
    assert state.store.get(state.key) is not None


async def test_a_prefix_the_store_refused_is_not_written_again(runtime: Any) -> None:
    """A stable prefix larger than the store's byte budget is refused once, and said so; the
    idle prefills after it do not write it again (each would cost a full state save on the
    engine thread, at every kick)."""
    rt, _, _ = runtime
    state = await UnsavedStablePrefix.make(rt)
    store, key = state.store, state.key
    store.byte_budget = 1  # smaller than any snapshot
    writes: list[Any] = []
    real_put = store.put

    def counting_put(*args: Any, **kwargs: Any) -> Any:
        writes.append(args[0])
        return real_put(*args, **kwargs)

    store.put = counting_put  # type: ignore[method-assign]
    await state.roll_back()
    rt.idle.kick()
    await until(lambda: rt.snapshots.skipped is not None)
    assert "refused" in rt.snapshots.skipped
    assert writes == [key] and store.get(key) is None
    # Exactly the stable prefix resident again, still unsaved: neither the next idle
    # prefill's checkpoint nor shutdown writes it again.
    await until(lambda: not rt.idle.running)
    await state.roll_back()
    assert await rt.snapshots.checkpoint(state.assembly) is None
    rt.snapshots.save_at_shutdown()
    assert writes == [key]


async def test_an_ask_is_answered_while_the_index_builds(
    workspace: Path, llama_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold build of a large repository takes a minute: an ask meanwhile is answered from
    what the editor holds (no repo map, no code) instead of waiting, explainContext's index
    state says why, and once the build is done the context has both again. The build is held
    on an event here (a real one is only slow on a large tree)."""
    monkeypatch.setenv("CONTENOX_CACHE_DIR", str(tmp_path / "cache"))
    release, started = threading.Event(), threading.Event()
    real_build = RepoIndex.build

    def held_build(index: RepoIndex) -> Any:
        started.set()
        assert release.wait(300), "the test never released the build"
        return real_build(index)

    monkeypatch.setattr(RepoIndex, "build", held_build)
    editor = Editor(workspace)
    decoder = workspace / "json" / "decoder.py"
    editor.buffers[decoder] = decoder.read_text("utf-8")
    rt = Runtime(ServerOptions(debounce_ms=50, repo_map_tokens=192, max_tokens=8),
                 lambda: [workspace], editor.state, RecordingNotifier(),
                 opener=lambda: contextlib.nullcontext(llama_session))
    start = asyncio.create_task(rt.start())
    try:
        await asyncio.to_thread(started.wait, 60)
        turn = turn_at((workspace,), decoder, "What does JSONDecoder.decode return?",
                       text=editor.buffers[decoder], line=340)
        early = await asyncio.wait_for(rt.assemble(turn, 8), 60)  # not after the build
        assert rt.index_view()["state"] == "building"
        assert early.segment(SegmentKind.REPO_MAP) is None
        assert [s.label for s in early.segments if s.kind == SegmentKind.CODE] == [
            "cursor context"]
        out = await asyncio.wait_for(rt.run_prompt(turn, 8), 120)
        assert out["metrics"]["decodeTokens"] >= 1 and not start.done()
        release.set()
        await asyncio.wait_for(start, 300)
        view = rt.index_view()
        assert view["state"] == "ready" and view["files"] > 0
        later = await rt.assemble(turn, 8)
        # The code search was filled before the first request after the build (a small
        # workspace: one slice).
        assert rt.index_view()["codeSearch"] == {"files": view["files"], "pending": 0}
        assert later.segment(SegmentKind.REPO_MAP) is not None
        assert any(s.label != "cursor context" for s in later.segments
                   if s.kind == SegmentKind.CODE)
    finally:
        release.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(start, 300)
        rt.close()
