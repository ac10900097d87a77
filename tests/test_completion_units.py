"""Inline completion pieces that need no server: the window, post-processing, typed-through
reuse, the prompt layout, and FIM-token detection on real vocabularies."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from contenox_lsp.completion.postprocess import finish
from contenox_lsp.completion.prompt import build_prompt, choose_mode, file_header, heal, heal_split
from contenox_lsp.completion.window import WINDOW_ALIGN, cursor_window, window_start
from contenox_lsp.runtime.completion import CompletionService, Shown
from contenox_lsp.runtime.editor_view import EditorView
from contenox_lsp.runtime.residency import Residency
from contenox_lsp.turn import WorkspaceState
from contextasm.manifest import common_prefix_length
from engine.fim import FimTokens

VOCAB = Path(__file__).parent / "fixtures" / "vocab"

SOURCE = "".join(f"line_{i} = {i}\n" for i in range(200))


def recompute_unit(s: Any) -> int:
    """What a warm prefill may recompute beyond the new tokens: the reuse chunk, or the
    minimum micro-batch of the invariant schedule."""
    return max(s.reuse_granularity, (s.exact_reuse or {}).get("minBatch", 1))


def test_the_window_start_stays_put_while_typing_and_moving_down() -> None:
    starts = {window_start(line) for line in range(100, 100 + WINDOW_ALIGN)}
    assert len(starts) <= 2  # it jumps at most once per WINDOW_ALIGN lines
    assert window_start(3) == 0
    a = cursor_window(SOURCE, 120, 4)
    b = cursor_window(SOURCE, 120, 5)
    assert b.before.startswith(a.before) and len(b.before) == len(a.before) + 1
    down = cursor_window(SOURCE, 121, 0)
    assert down.start_line == a.start_line
    assert down.before.startswith(a.before[: -len(a.line_prefix)])


def test_the_window_splits_the_current_line_at_the_cursor() -> None:
    win = cursor_window("def f(x):\n    return x + 1\n", 1, 11)
    assert win.line_prefix == "    return "
    assert win.line_suffix == "x + 1"
    assert win.before.endswith("def f(x):\n    return ")
    assert win.after.startswith("x + 1")
    assert not win.multiline
    empty = cursor_window("def f(x):\n    \n", 1, 4)
    assert empty.multiline and empty.indent == "    "


def test_a_single_line_trigger_stops_at_the_end_of_the_line() -> None:
    win = cursor_window("x = compute(\n", 0, 12)
    assert finish("a, b)\ny = 2\n", win, None) == "a, b)"


def test_overlap_with_the_text_after_the_cursor_is_cut() -> None:
    win = cursor_window("x = compute()\n", 0, 12)  # cursor before ")"
    assert finish("a, b)", win, None) == "a, b"


def test_a_multi_line_trigger_stops_when_indentation_returns() -> None:
    text = "def f(x):\n    \n"
    win = cursor_window(text, 1, 4)
    raw = "y = x * 2\n    return y\n\ndef g():\n    pass\n"
    assert finish(raw, win, "def f(x):") == "y = x * 2\n    return y"


def test_a_repeat_of_the_line_before_is_dropped() -> None:
    text = "    total = 0\n    \n"
    win = cursor_window(text, 1, 4)
    assert finish("total = 0\n    for x in xs:\n", win, "    total = 0") == "for x in xs:"


def test_whitespace_only_is_never_offered() -> None:
    win = cursor_window("x = 1\n", 0, 5)
    assert finish("   \n", win, None) is None
    assert finish("", win, None) is None


def test_typed_through_answers_the_rest_without_a_model() -> None:
    svc = CompletionService(*_NO_ENGINE_SIDE)  # type: ignore[arg-type]
    svc.last = Shown(7, "file:///a.py", 3, "    return ", "sorted(items)")
    out = svc.typed_through("file:///a.py", 3, "    return sor")
    assert out is not None and out.text == "ted(items)" and out.id == 7
    assert svc.stats.typedThrough == 1
    assert svc.typed_through("file:///a.py", 3, "    return sox") is None  # diverged
    assert svc.typed_through("file:///a.py", 4, "    return sor") is None  # another line
    assert svc.typed_through("file:///b.py", 3, "    return sor") is None
    assert svc.typed_through("file:///a.py", 3, "    return sorted(items)") is None  # all typed


#: Typed-through answers without the engine side: the service keeps its collaborators
#: until a model call.
_NO_ENGINE_SIDE = (None, None, None, None, None)


async def no_code(_place: Any) -> tuple[tuple[str, str], ...]:
    """A repository with nothing to show beside the window (the warm-up is what is tested)."""
    return ()


def test_a_trailing_blank_is_healed() -> None:
    assert heal_split("    return ") == " "
    assert heal_split("    ") == ""  # indentation stays in the prompt
    assert heal_split("x = f(a,") == ""
    assert heal(" a + b", " ") == "a + b"
    assert heal("a + b", " ") == "a + b"
    assert heal("(x)", "") == "(x)"


def test_choose_mode() -> None:
    fim = FimTokens(1, 2, 3)
    assert choose_mode("auto", fim) == "fim"
    assert choose_mode("auto", None) == "prefix"
    assert choose_mode("prefix", fim) == "prefix"
    assert choose_mode("fim", None) == "prefix"


@pytest.mark.parametrize(("name", "expected"), [
    ("starcoder", ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")),
    ("refact", ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")),
    ("deepseek-coder", ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")),
    ("llama-spm", None),
])
def test_fim_tokens_are_detected_from_the_gguf_vocabulary(
    name: str, expected: tuple[str, str, str] | None
) -> None:
    from engine.llama.model import vocab_fim_tokens

    found = vocab_fim_tokens(VOCAB / f"ggml-vocab-{name}.gguf")
    if expected is None:
        assert found is None
        return
    assert found is not None
    texts = tuple(found_texts(VOCAB / f"ggml-vocab-{name}.gguf",
                              [found.prefix, found.suffix, found.middle]))
    assert texts == expected


def found_texts(path: Path, ids: list[int]) -> list[str]:
    from engine.llama.model import vocab_token_texts

    return vocab_token_texts(path, ids)


def test_the_embedded_model_has_no_fim_tokens(llama_session: Any) -> None:
    assert llama_session.fim_tokens is None
    assert choose_mode(llama_session.profile.completion_mode, None) == "prefix"


def test_the_prefix_prompt_ends_with_the_code_before_the_cursor(llama_session: Any) -> None:
    win = cursor_window(SOURCE, 120, 4)
    prompt = build_prompt(llama_session, "# map\n", "m.py", win, "prefix")
    tail = llama_session.detokenize(prompt.tokens[prompt.context_tokens:])
    assert tail == file_header("m.py") + win.before
    assert prompt.healed == ""
    longer = build_prompt(llama_session, "# map\n", "m.py", cursor_window(SOURCE, 120, 5),
                          "prefix")
    # One more character changes only the end.
    assert common_prefix_length(prompt.tokens, longer.tokens) >= len(prompt.tokens) - 2


def test_a_completion_after_branch_switches_equals_a_cold_run(llama_session: Any) -> None:
    """The completion's reuse path (chat parked, completion branch restored by a chunked
    prefill that starts at warm_prefix) gives the cold run's greedy tokens."""
    from contenox_lsp.runtime.jobs import chunked_prefill
    from contenox_lsp.runtime.worker import Job, Priority

    s = llama_session
    job = Job(fn=lambda *_: None, priority=Priority.USER, label="test")
    chat = s.tokenize("Explain this module.\n" + SOURCE[:3000], add_bos=True)
    first = build_prompt(s, "# map\n", "m.py", cursor_window(SOURCE, 120, 4), "prefix").tokens
    typed = build_prompt(s, "# map\n", "m.py", cursor_window(SOURCE, 120, 5), "prefix").tokens
    s.reset()
    s.prefill(chat)
    s.branch_save("chat")
    chunked_prefill(s, first, job, lambda _p: None)
    s.generate(4)
    s.branch_save("completion")
    s.prefill([*chat, s.tokenize(" x", add_bos=False)[0]])  # the chat side takes the live seq
    assert s.warm_prefix(typed) >= len(first) - 2 * recompute_unit(s)
    stats = chunked_prefill(s, typed, job, lambda _p: None)
    assert stats.reused_tokens >= len(first) - 2 * recompute_unit(s)
    warm = s.generate(8).tokens
    s.reset()
    s.prefill(typed)
    assert warm == s.generate(8).tokens


@pytest.mark.parametrize("flash", [False, True], ids=["default", "flash attention"])
def test_a_chunked_prefill_reports_its_last_step(llama_session: Any, flash: bool) -> None:
    """``prefill_ms`` sums every step; ``last_step_ms`` is the last one's (the engine's TTFT
    counts from the last step's start, so the ask's ``engineTtftMs`` adds the others)."""
    if not flash:
        _check_chunked_prefill(llama_session)
        return
    from engine import load_profile, open_session

    prof = load_profile(None).with_overrides({"context.flash_attn": "on"}, source="test")
    with open_session(prof) as s:
        assert (s.exact_reuse or {}).get("tile")  # two regimes on the CPUs seen
        _check_chunked_prefill(s)


def _check_chunked_prefill(s: Any) -> None:
    from contenox_lsp.runtime.jobs import chunked_prefill
    from contenox_lsp.runtime.worker import Job, Priority

    job = Job(fn=lambda *_: None, priority=Priority.USER, label="test")
    tokens = s.tokenize(SOURCE[:3000], add_bos=True)[:300]
    s.reset()
    steps: list[int] = []
    computed = s.metrics.new_tokens_total
    stats = chunked_prefill(s, tokens, job, steps.append, step=128)
    computed = s.metrics.new_tokens_total - computed
    exact = s.exact_reuse or {}
    tile, min_batch = exact.get("tile") or 0, exact.get("minBatch") or 1
    if tile:  # two regimes: a step ends a minimum micro-batch past a tile boundary, and the
        # next one computes again only those (in a tile-sized micro-batch)
        assert [(e - min_batch) % tile for e in steps[:-1]] == [0, 0] and steps[-1] == 300
        assert 128 <= steps[0] < 128 + tile
        # A step whose edge passes the last one's small micro-batches computes them again.
        again = [a for a, b in itertools.pairwise(steps)
                 if (b - min_batch) // tile * tile > a - min_batch]
        assert again and computed == 300 + min_batch * len(again)
    else:
        assert steps == [128, 256, 300]
        assert computed == 300
    assert stats.new_tokens == 300
    assert 0 < stats.last_step_ms < stats.prefill_ms
    assert stats.last_step_ms == s.metrics.last_prefill.prefill_ms


def test_the_idle_warm_up_then_a_completion_equals_a_cold_run(llama_session: Any) -> None:
    """``CompletionService.warm_up``'s job (chat parked, the completion prompt down to the
    cursor's line prefilled and parked, the chat prefix live again), then the completion at
    that line restored from its branch: the cold run's greedy tokens. The engine side is the
    real session, with a real editor view and residency and the idle fields ``warm_up``
    reads."""
    import asyncio
    from types import SimpleNamespace

    from contenox_lsp.runtime.jobs import chunked_prefill
    from contenox_lsp.runtime.worker import Job, Priority

    s = llama_session
    job = Job(fn=lambda *_: None, priority=Priority.USER, label="test")
    path = Path("/ws/m.py")
    chat = s.tokenize("Explain this module.\n" + SOURCE[:3000], add_bos=True)
    editor = EditorView(lambda: [Path("/ws")], lambda: WorkspaceState(
        (Path("/ws"),), {path: SOURCE}, (), (path,)))
    editor.last_cursor = (path, 120)
    service = CompletionService(
        SimpleNamespace(worker=SimpleNamespace(session=s)),  # type: ignore[arg-type]
        editor, SimpleNamespace(assembly=None, target=chat),  # type: ignore[arg-type]
        Residency(), no_code)
    assert service.warm_up() is None  # no completion client yet
    service.wanted = True
    assert service.warm_up() is None  # the place's code is not chosen yet
    asyncio.run(service.prepare(path, cursor_window(SOURCE, 120, 0)))
    s.reset()
    s.prefill(chat)
    warm_job = service.warm_up()
    assert warm_job is not None
    warm_job(s, job)
    assert s.resident_tokens == chat  # the chat prefix is live again
    assert service.warm_up() is None  # done for this place
    typed = build_prompt(s, "", "m.py", cursor_window(SOURCE, 120, 5), "prefix").tokens
    stats = chunked_prefill(s, typed, job, lambda _p: None)
    assert stats.new_tokens <= 2 * recompute_unit(s)  # the line, from the parked branch
    warm = s.generate(8).tokens
    s.reset()
    s.prefill(typed)
    assert warm == s.generate(8).tokens


def test_a_completion_is_parked_only_when_another_job_takes_the_live_sequence(
    llama_session: Any,
) -> None:
    """Back-to-back completions keep their state live and save no branch (a save copies the
    whole KV stream); the worker's before-job hook parks it when another job (here an ask)
    runs, and the next completion restored from it gives the cold run's greedy tokens. The
    engine side is the real session with the calls ``complete`` makes; jobs run inline."""
    import asyncio
    from types import SimpleNamespace

    from contenox_lsp.runtime.worker import Job, Priority

    s = llama_session
    chat = s.tokenize("Explain this module.\n" + SOURCE[:3000], add_bos=True)

    # The profile the service reads its time budget from, without one worth the name: this
    # checks what a completion leaves resident, and a busy machine must not cut its decode.
    patient = s.profile.with_overrides({"completion.timeout_ms": 60_000}, source="test")

    async def session() -> Any:
        return SimpleNamespace(profile=patient, fim_tokens=s.fim_tokens)

    async def run_user_job(fn: Any, label: str) -> Any:
        return fn(s, Job(fn=fn, priority=Priority.USER, label=label))

    residency = Residency()
    engine = SimpleNamespace(worker=SimpleNamespace(session=s, busy_with=None),
                             session=session, run_user_job=run_user_job,
                             busy_with_user=lambda *_labels: False)
    editor = EditorView(lambda: [Path("/ws")], lambda: WorkspaceState((Path("/ws"),), {}, (), ()))
    service = CompletionService(
        engine, editor,  # type: ignore[arg-type]
        SimpleNamespace(assembly=None, target=chat, hold=lambda _s: None),  # type: ignore[arg-type]
        residency, no_code)
    residency.register("completion", "completion", service.warm_up)
    ask = Job(fn=lambda *_: None, priority=Priority.USER, label="ask")

    def complete(column: int) -> None:
        win = cursor_window(SOURCE, 120, column)
        asyncio.run(service.complete("file:///ws/m.py", Path("/ws/m.py"), win, None))

    s.reset()
    s.prefill(chat)
    complete(4)
    complete(5)
    assert "completion" not in {b.name for b in s.branches()}  # nothing copied per keystroke
    residency.before_job(s, Job(fn=lambda *_: None, priority=Priority.USER, label="completion"))
    assert "completion" not in {b.name for b in s.branches()}
    live = list(s.resident_tokens)
    residency.before_job(s, ask)  # an ask is about to run
    assert {b.name: b.tokens for b in s.branches()}["completion"] == len(live)
    s.prefill([*chat, s.tokenize(" x", add_bos=False)[0]])  # the ask takes the live sequence
    residency.before_job(s, ask)  # parked once: the ask's own state is not a completion's
    assert {b.name: b.tokens for b in s.branches()}["completion"] == len(live)
    complete(6)
    stats = service.stats
    assert stats.lastReusedTokens is not None and stats.lastPromptTokens is not None
    assert stats.lastReusedTokens >= stats.lastPromptTokens - 2 * recompute_unit(s)
    typed = build_prompt(s, "", "m.py", cursor_window(SOURCE, 120, 6), "prefix").tokens
    assert s.resident_tokens[: len(typed)] == typed
    warm = list(s.resident_tokens[len(typed):])  # what the completion decoded
    assert warm
    s.reset()
    s.prefill(typed)
    assert s.generate(len(warm)).tokens == warm


def test_a_speculation_is_handed_over_only_for_its_place_once_started() -> None:
    import asyncio

    from contenox_lsp.completion.window import At
    from contenox_lsp.runtime.speculation import Speculation

    here, there = At("file:///m.py", 2, 5, 9), At("file:///m.py", 2, 5, 10)

    async def scenario() -> None:
        spec: Speculation[str] = Speculation()
        started = asyncio.Event()
        runs: list[asyncio.Task[Any]] = []

        async def run() -> str:
            task = asyncio.current_task()
            assert task is not None
            runs.append(task)
            started.set()
            await asyncio.sleep(0.05)
            return "done"

        spec.schedule(here, run, delay_s=0.01)
        assert spec.take(here) is None  # not started yet: the request runs its own
        assert not started.is_set()
        spec.schedule(here, run, delay_s=0.01)
        await started.wait()
        task = spec.take(here)
        assert task is not None and await task == "done"
        assert spec.take(here) is None  # handed over once
        started.clear()
        spec.schedule(here, run, delay_s=0.0)
        await started.wait()
        assert spec.take(there) is None  # another place: dropped, and its run cancelled
        await asyncio.sleep(0.1)
        assert runs[-1].cancelled() and len(runs) == 2
        assert spec.take(here) is None

    asyncio.run(scenario())


def test_residency_parks_the_live_prefix_of_one_kind_before_a_job_of_another(
    llama_session: Any,
) -> None:
    """One owner of the live sequence at a time: a completion's claim parks the chat prefix;
    a next edit's job parks the completion; back-to-back jobs of one kind copy nothing; the
    warm-ups run in registration order; a branch is registered once."""
    import pytest

    from contenox_lsp.runtime.worker import Job, Priority

    s = llama_session
    chat = s.tokenize("Explain this module.\n" + SOURCE[:600], add_bos=True)
    ran: list[str] = []
    r = Residency()
    r.register("completion", "completion", lambda: lambda _s, _j: ran.append("completion"))
    r.register("next_edit", "next_edit", lambda: None)  # nothing to warm
    with pytest.raises(ValueError):
        r.register("completion", "completion", lambda: None)
    assert r.branches == ("completion", "next_edit")

    def job(label: str) -> Job:
        return Job(fn=lambda *_: None, priority=Priority.USER, label=label)

    def names() -> dict[str, int]:
        return {b.name: b.tokens for b in s.branches()}

    for b in list(names()):
        s.branch_drop(b)
    s.reset()
    s.prefill(chat)
    r.claim(s, "completion", chat)
    assert names() == {"chat": len(chat)}  # the chat prefix kept before it is replaced
    s.prefill(s.tokenize("def completion_prompt():", add_bos=True))
    live = s.n_resident
    r.before_job(s, job("completion"))
    assert "completion" not in names()  # the same kind: nothing copied
    r.before_job(s, job("next_edit"))
    assert names()["completion"] == live and r.live is None
    r.claim(s, "next_edit", chat)  # the chat prefix is not live: not saved again
    assert names()["chat"] == len(chat)
    r.before_job(s, job("ask"))
    assert names()["next_edit"] == live
    step = r.after_warm()
    assert step is not None
    step(s, job("idle"))
    assert ran == ["completion"]


RETRIEVAL_REPO = {
    "pkg/__init__.py": "",
    "pkg/merge.py": (
        "def merge_defaults(config, defaults):\n"
        '    """The config with every key of ``defaults`` it lacks."""\n'
        "    merged = dict(defaults)\n    merged.update(config)\n    return merged\n"),
    "pkg/settings.py": (
        "from pkg.merge import merge_defaults\n\n\n"
        "def load_settings(path, defaults):\n"
        "    raw = read_json(path)\n"
        "    settings = merge_defaults(raw, defaults)\n"
        "    return settings\n"),
    "pkg/loader.py": (
        "from pkg.merge import merge_defaults\n\n\n"
        "def load(path, defaults):\n"
        "    raw = read_json(path)\n"
        "    config = merge_defaults(raw, defaults)\n"
        "    return "),
}


def test_the_code_for_a_place_is_the_definitions_it_uses_and_similar_code(
    tmp_path: Path,
) -> None:
    """Real index and parsing: the function the cursor's code calls (defined in another file)
    and the other file that writes the same lines are chosen, never the cursor's own file;
    the same place gives the same code, whatever was asked before."""
    from contenox_lsp.completion.retrieval import place_of, retrieve
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

    for rel, text in RETRIEVAL_REPO.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, "utf-8")
    index = RepoIndex([tmp_path], use_cache=False)
    index.build()
    finder = CodeFinder(index, lambda p: Path(p).read_text("utf-8"))
    source = RETRIEVAL_REPO["pkg/loader.py"]
    lines = source.split("\n")
    path = str(tmp_path / "pkg/loader.py")
    place = place_of(path, len(lines) - 1, cursor_window(source, len(lines) - 1, 4).before)
    assert place.above.endswith("config = merge_defaults(raw, defaults)")
    code = retrieve(finder, place)
    shown = dict(code)
    assert "def merge_defaults(config, defaults):" in shown["pkg/merge.py"]
    assert "settings = merge_defaults(raw, defaults)" in shown["pkg/settings.py"]
    assert "pkg/loader.py" not in shown
    other = str(tmp_path / "pkg/settings.py")
    retrieve(finder, place_of(other, 5, "\n".join(RETRIEVAL_REPO["pkg/settings.py"]
                                                     .split("\n")[:5]) + "\n"))
    assert retrieve(finder, place) == code


def test_a_long_similar_function_shows_the_stretch_like_the_cursors_code(tmp_path: Path) -> None:
    """Real index: the similar chunk is a 60-line function whose lines like the cursor's come
    after its first 24; the prompt shows that stretch and the line after it (the one to
    type), not the function's head. A short chunk shows whole."""
    from contenox_lsp.completion.retrieval import SIMILAR_LINES, place_of, retrieve
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

    filler = "".join(f"    step_{i} = prepare_{i}(options)\n" for i in range(36))
    other = ("def build_report(options):\n" + filler +
             "    rows = fetch_rows(options.source)\n"
             "    totals = summarize_rows(rows, options.columns)\n"
             "    chart = render_chart(totals, options.style)\n"
             "    return publish_report(chart, options.target)\n")
    cursor_file = ("def weekly(options):\n"
                   "    rows = fetch_rows(options.source)\n"
                   "    totals = summarize_rows(rows, options.columns)\n"
                   "    chart = render_chart(totals, options.style)\n"
                   "    return ")
    (tmp_path / "report.py").write_text(other, "utf-8")
    (tmp_path / "short.py").write_text("def tiny(options):\n    return fetch_rows(options)\n",
                                       "utf-8")
    (tmp_path / "weekly.py").write_text(cursor_file, "utf-8")
    index = RepoIndex([tmp_path], use_cache=False)
    index.build()
    finder = CodeFinder(index, lambda p: Path(p).read_text("utf-8"))
    path = str(tmp_path / "weekly.py")
    place = place_of(path, 4, cursor_window(cursor_file, 4, 11).before)
    shown = dict(retrieve(finder, place))
    report = shown["report.py"]
    assert "    return publish_report(chart, options.target)\n" in report
    assert "def build_report(options):" not in report and len(report.splitlines()) == \
        SIMILAR_LINES
    assert shown["short.py"] == "def tiny(options):\n    return fetch_rows(options)\n"


def test_the_code_for_a_place_is_chosen_again_when_the_place_or_the_workspace_changes() -> None:
    """A place's code is kept while the user stays on the line (no new retrieval per
    keystroke) and chosen again on another line or after the workspace changed (the idle
    assembly passes itself in)."""
    import asyncio
    from types import SimpleNamespace

    asked: list[Any] = []

    async def retrieve(place: Any) -> tuple[tuple[str, str], ...]:
        asked.append(place)
        return (("lib.py", f"def helper_{len(asked)}():\n"),)

    editor = EditorView(lambda: [Path("/ws")], lambda: WorkspaceState((Path("/ws"),), {}, (), ()))
    service = CompletionService(None, editor,  # type: ignore[arg-type]
                                SimpleNamespace(assembly=None),  # type: ignore[arg-type]
                                None, retrieve)  # type: ignore[arg-type]
    path = Path("/ws/m.py")

    async def prepare(line: int, column: int, assembly: Any = None) -> Any:
        return await service.prepare(path, cursor_window(SOURCE, line, column), assembly)

    first = asyncio.run(prepare(120, 4))
    assert asyncio.run(prepare(120, 9)) is first and len(asked) == 1  # typing on the line
    assert first.files == (("lib.py", "def helper_1():\n"),)
    assert file_header("lib.py") + "def helper_1():\n" in first.text
    asyncio.run(prepare(121, 0))
    assert len(asked) == 2 and asked[1].line == 121  # another line
    workspace_changed = SimpleNamespace(segments=[])
    again = asyncio.run(prepare(121, 0, workspace_changed))
    assert len(asked) == 3 and again.files == (("lib.py", "def helper_3():\n"),)


def test_pieces_of_one_file_make_one_entry_in_line_order_at_its_best_place() -> None:
    from contenox_lsp.completion.retrieval import _by_file

    pieces = [("a.py", 10, "def late():\n"), ("b.py", 1, "def b():\n"),
              ("a.py", 2, "def early():\n")]
    assert _by_file(pieces) == (("b.py", "def b():\n"),
                                ("a.py", "def early():\n\ndef late():\n"))


def test_a_speculation_cut_by_its_time_budget_is_not_the_answer() -> None:
    """A speculative run whose time budget went on a cold prefill answers a token or two; the
    request that takes it over decodes afresh on the prompt it warmed. A whole speculative
    run is the answer as it is."""
    import asyncio
    from types import SimpleNamespace

    from contenox_lsp.completion.window import At
    from contenox_lsp.runtime.completion import ModelRun, Outcome

    editor = EditorView(lambda: [Path("/ws")], lambda: WorkspaceState((Path("/ws"),), {}, (), ()))
    service = CompletionService(None, editor, None, None, no_code)  # type: ignore[arg-type]
    at = At("file:///ws/m.py", 3, 120, 4)
    win = cursor_window(SOURCE, 120, 4)
    fresh: list[bool] = []

    async def complete(*_args: Any) -> Outcome:
        fresh.append(True)
        return Outcome("fresh", 1)

    service.complete = complete  # type: ignore[method-assign]

    async def ask(cut: bool) -> Outcome:
        async def speculated() -> ModelRun:
            prompt = SimpleNamespace(healed="", tokens=[1, 2], context_tokens=1, mode="prefix",
                                     layout="plain")
            stats = SimpleNamespace(new_tokens=2, reused_tokens=0)
            return ModelRun(prompt, stats, "zz", 1, cut=cut)  # type: ignore[arg-type]

        service.speculation.schedule(at, speculated, delay_s=0)
        await asyncio.sleep(0.01)
        return await service.request(at, Path("/ws/m.py"), win, None, 0.0)

    assert asyncio.run(ask(cut=True)).text == "fresh" and fresh == [True]
    whole = asyncio.run(ask(cut=False))
    assert whole.text == "zz" and fresh == [True]
