"""Inline completion requests on the warm session.

The prompt's repository part is code (``completion.retrieval``: the definitions the code at
the cursor uses, similar code from other files) and the pins, chosen for the cursor's place on
the context thread: in idle time for the last cursor (``prepare``), which the warm-up then
prefills, or at the request when the cursor is somewhere new and the user is not typing.

A completion is interactive: it runs at user priority (so it preempts the idle prefill), but
never queues behind a running ask (it answers an empty list instead), and an ask waits for at
most one completion (each is capped in tokens and time). The chat prefix and the completion
prefix are kept resident side by side as parked branches of the session (``chat`` and
``completion``): the engine restores whichever shares more with the next prompt, so neither
evicts the other.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contenox_lsp.clock import Mark
from contenox_lsp.completion.decode import decode_completion
from contenox_lsp.completion.postprocess import finish
from contenox_lsp.completion.prompt import (
    CompletionPrompt,
    RepoContext,
    build_prompt,
    choose_mode,
    file_header,
    heal,
    repo_files,
)
from contenox_lsp.completion.retrieval import Place, place_of
from contenox_lsp.completion.window import At, CursorWindow, cursor_window
from contenox_lsp.runtime.editor_view import EditorView
from contenox_lsp.runtime.engine_access import EngineAccess
from contenox_lsp.runtime.idle_prefill import IdlePrefill
from contenox_lsp.runtime.jobs import PrefillStats, chunked_prefill
from contenox_lsp.runtime.latest import LatestOnly
from contenox_lsp.runtime.residency import Residency, warm_branch
from contenox_lsp.runtime.speculation import Speculation
from contenox_lsp.runtime.worker import Job, JobCancelled, Priority
from contextasm import Assembly, SegmentKind
from engine import Session

logger = logging.getLogger(__name__)


#: While completions keep coming (the user is typing), the repository context of the prompt
#: stays as it was for up to this long after the last one: the code chosen for the cursor
#: changes as lines are typed, and every change would re-prefill the whole prompt.
STICKY_CONTEXT_S = 3.0
#: ... and only near where it was last used: a request in the same file at most this many
#: lines from the last one (the lines the user typed since). Anywhere else the place's own
#: context is used, so a place gets the same prompt whatever was completed before it (an
#: earlier file's context kept by the clock alone made 8 of 30 eval completions differ).
STICKY_LINES = 8

JOB_LABEL = "completion"
COMPLETION_BRANCH = "completion"

#: Code for a place, chosen on the context thread: ``(path, code)`` files, best last.
RetrieveFn = Callable[[Place], Awaitable[tuple[tuple[str, str], ...]]]


@dataclass(frozen=True)
class Shown:
    """The last completion offered, for typed-through reuse and acceptance counting."""

    id: int
    uri: str
    line: int
    line_prefix: str
    text: str


@dataclass
class CompletionStats:
    requests: int = 0
    shown: int = 0
    accepted: int = 0
    partiallyAccepted: int = 0
    typedThrough: int = 0
    skippedBusy: int = 0
    lastLatencyMs: float | None = None
    lastNewTokens: int | None = None
    lastReusedTokens: int | None = None
    lastPromptTokens: int | None = None
    lastContextTokens: int | None = None
    lastDecodeTokens: int | None = None
    lastContextFiles: list[str] | None = None  # the code the prompt carried (paths)
    mode: str | None = None
    layout: str | None = None  # "plain" or "repository" (FIM in the model's repository layout)
    speculated: int = 0
    speculationHits: int = 0


@dataclass(frozen=True)
class ModelRun:
    """What one model completion produced, before post-processing."""

    prompt: CompletionPrompt
    stats: PrefillStats
    raw: str
    decode_tokens: int
    context_files: tuple[tuple[str, str], ...] = ()  # the repository part's files
    cut: bool = False  # the time budget ended the decode (the prefill took most of it)


@dataclass(frozen=True)
class Outcome:
    text: str | None
    id: int | None
    typed_through: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)


def code_context(assembly: Assembly | None, code: tuple[tuple[str, str], ...],
                 name: str = "") -> RepoContext:
    """A completion's repository part: the pins of the last idle assembly (the user chose
    them), then ``code`` (``(path, code)``, best last), as text (each under its path's
    header) and as files."""
    pins = [s.text for s in assembly.segments if s.kind is SegmentKind.PINNED] \
        if assembly is not None else []
    files = repo_files([(True, t) for t in pins]) + code
    text = "".join(pins) + "".join(file_header(p) + c for p, c in code)
    return RepoContext(text, files, name)


class CompletionService:
    def __init__(self, engine: EngineAccess, editor: EditorView, idle: IdlePrefill,
                 residency: Residency, retrieve: RetrieveFn) -> None:
        self._engine = engine
        self._retrieve = retrieve
        self._editor = editor
        self._idle = idle
        self._residency = residency
        self._ids = itertools.count(1)
        self.last: Shown | None = None
        self.stats = CompletionStats()
        self._context: RepoContext | None = None  # the last prompt's (sticky while typing)
        self._context_at: tuple[str, int] | None = None  # (file, line) it was last used at
        self._prepared: tuple[Place, RepoContext] | None = None  # the last place's context
        self._last_run = Mark()  # a request's or a speculation's (the sticky context's clock)
        self.wanted = False
        """Whether the editor uses inline completion (it said so at initialize, or asked for
        one): only then does the idle time warm the completion prompt too."""
        self._warmed: int | None = None  # what the last idle warm-up prefilled (a digest)
        self._last_request = Mark()  # requests only: ``typing``
        self.speculation: Speculation[ModelRun | None] = Speculation()
        self.latest = LatestOnly()  # the request in flight (cancel-previous)

    async def prepare(self, path: Path, win: CursorWindow,
                      assembly: Assembly | None = None) -> RepoContext:
        """The repository part for the place of ``win`` in ``path``. With the idle
        ``assembly`` just built (the workspace changed) it is chosen afresh; else only when
        the place (file, line, the lines above) changed since the last one."""
        place = place_of(str(path), win.line, win.before)
        prepared = self._prepared
        if assembly is None and prepared is not None and prepared[0] == place:
            return prepared[1]
        code = await self._retrieve(place)
        context = code_context(assembly or self._idle.assembly, code, self._editor.repo_name())
        self._prepared = (place, context)
        return context

    async def _repo_context(self, path: Path, win: CursorWindow) -> RepoContext:
        """The last prompt's repository part while the user types (a new line does not
        re-prefill the prompt), else the one for this place."""
        now = time.monotonic()
        if self._context is None or not self._last_run.within(STICKY_CONTEXT_S, now) \
                or not self._near_context(path, win.line):
            self._context = await self.prepare(path, win)
        self._context_at = (str(path), win.line)
        self._last_run.set(time.monotonic())
        return self._context

    def _near_context(self, path: Path, line: int) -> bool:
        at = self._context_at
        return at is not None and at[0] == str(path) and abs(at[1] - line) <= STICKY_LINES

    # -- typed-through ----------------------------------------------------------------------

    def typed_through(self, uri: str, line: int, line_prefix: str) -> Outcome | None:
        """The rest of the last completion when the user typed its start since."""
        last = self.last
        if last is None or last.uri != uri or last.line != line:
            return None
        if not line_prefix.startswith(last.line_prefix):
            return None
        typed = line_prefix[len(last.line_prefix):]
        if not typed or not last.text.startswith(typed) or len(typed) >= len(last.text):
            return None
        rest = last.text[len(typed):]
        if not rest.strip():
            return None
        self.stats.typedThrough += 1
        return Outcome(rest, last.id, typed_through=True)

    # -- a request ---------------------------------------------------------------------------

    async def request(self, at: At, path: Path, win: CursorWindow, previous_line: str | None,
                      t0: float) -> Outcome:
        """One inline completion request (received at ``t0``): the rest of the last
        completion when it was typed through, else the speculative run at this place, else a
        model run. A newer request cancels this one, which then answers nothing."""
        self.latest.cancel_previous()  # the newer request is the one the user waits for
        hit = self.typed_through(at.uri, at.line, win.line_prefix)
        if hit is not None and hit.text is not None and hit.id is not None:
            self.speculation.drop()
            return hit
        speculated = self.speculation.take(at)
        with self.latest.current() as task:
            try:
                run = await speculated if speculated is not None else None
                if run is not None and not run.cut:
                    return self.answer(at.uri, win, previous_line, run, t0)
                # none started here, an ask preempted it, or its time budget went on the
                # prefill: the prompt is warm now, and this request has a budget of its own
                return await self.complete(at.uri, path, win, previous_line)
            except asyncio.CancelledError:
                if self.latest.superseded(task):
                    return Outcome(None, None)
                raise

    def after_edit(self, at: At | None, path: Path, win: CursorWindow | None) -> None:
        """A document changed: what was speculated is stale. ``at``/``win``: the cursor a
        single insertion left, where the completion starts in the background while the user
        types with completions on."""
        self.speculation.drop()
        if at is not None and win is not None and self.typing:
            self.speculation.schedule(at, lambda: self.speculate(path, win))

    # -- model completions ------------------------------------------------------------------

    async def complete(self, uri: str, path: Path, win: CursorWindow,
                       previous_line: str | None) -> Outcome:
        t0 = time.perf_counter()
        self._note_request()
        if self._busy_with_user():
            self.stats.skippedBusy += 1
            return Outcome(None, None)  # never wait behind an ask (a superseded completion
            # ahead of this one stops within one batch)
        run = await self._run(path, win, t0, Priority.USER)
        return self._show(uri, win, previous_line, run, t0)

    def answer(self, uri: str, win: CursorWindow, previous_line: str | None, run: ModelRun,
               t0: float) -> Outcome:
        """A request (received at ``t0``) answered by the speculative ``run`` at its place."""
        self._note_request()
        self.stats.speculationHits += 1
        return self._show(uri, win, previous_line, run, t0)

    @property
    def typing(self) -> bool:
        """The user is typing with completions on: one was asked in the last few seconds."""
        return self._last_request.within(STICKY_CONTEXT_S)

    async def speculate(self, path: Path, win: CursorWindow) -> ModelRun | None:
        """The model completion at ``win`` as background work (``speculation``); None when
        an ask is running or something preempted it."""
        if self._busy_with_user():
            return None
        try:
            run = await self._run(path, win, time.perf_counter(), Priority.BACKGROUND)
        except JobCancelled:
            return None
        except Exception as exc:  # the request then runs it again and reports what fails
            logger.debug("speculative completion failed: %r", exc)
            return None
        self.stats.speculated += 1
        return run

    def _note_request(self) -> None:
        self.stats.requests += 1
        self.wanted = True
        self._last_request.set()

    def _busy_with_user(self) -> bool:
        return self._engine.busy_with_user(JOB_LABEL)

    async def _run(self, path: Path, win: CursorWindow, t0: float,
                   priority: Priority) -> ModelRun:
        session = await self._engine.session()
        profile = session.profile
        mode = choose_mode(profile.completion_mode, session.fim_tokens)
        rel = self._editor.relative(path)
        context = await self._repo_context(path, win)

        max_tokens = profile.completion_max_tokens
        deadline_s = profile.completion_timeout_ms / 1000.0
        chat_target = self._idle.target
        residency = self._residency

        def job(s: Session, j: Job) -> ModelRun:
            # Tokenized here, on the engine thread: the context thread may be busy
            # re-assembling the chat context after the same keystroke.
            prompt = build_prompt(s, context, rel, win, mode)
            # The live sequence is this completion's from here on (even if it is cancelled
            # half-way), parked only when another kind of job takes it over.
            residency.claim(s, COMPLETION_BRANCH, chat_target)
            stats = chunked_prefill(s, prompt.tokens, j, lambda _pos: None)
            raw, n, cut = decode_completion(s, max_tokens, not win.multiline,
                                            t0 + deadline_s)
            return ModelRun(prompt, stats, raw, n, context.files, cut)

        # While the user types, completions keep the live sequence; the chat prefix (parked)
        # is brought back once they pause.
        self._idle.hold(STICKY_CONTEXT_S)
        if priority == Priority.USER:
            return await self._engine.run_user_job(job, JOB_LABEL)
        worker = self._engine.worker
        submitted = worker.submit(job, priority=priority, label=JOB_LABEL)
        try:
            result: ModelRun = await asyncio.wrap_future(submitted.future)
        except asyncio.CancelledError:
            worker.cancel(submitted)
            raise
        return result

    def _show(self, uri: str, win: CursorWindow, previous_line: str | None, run: ModelRun,
              t0: float) -> Outcome:
        prompt, stats = run.prompt, run.stats
        text = finish(heal(run.raw, prompt.healed), win, previous_line)
        latency = (time.perf_counter() - t0) * 1000.0
        st = self.stats
        st.lastLatencyMs = round(latency, 3)
        st.lastNewTokens = stats.new_tokens
        st.lastReusedTokens = stats.reused_tokens
        st.lastPromptTokens = len(prompt.tokens)
        st.lastContextTokens = prompt.context_tokens
        st.lastDecodeTokens = run.decode_tokens
        st.lastContextFiles = [p for p, _ in run.context_files]
        st.mode = prompt.mode
        st.layout = prompt.layout
        metrics = {"latencyMs": st.lastLatencyMs, "newTokens": stats.new_tokens,
                   "reusedTokens": stats.reused_tokens, "promptTokens": len(prompt.tokens),
                   "contextTokens": prompt.context_tokens, "decodeTokens": run.decode_tokens,
                   "mode": prompt.mode, "layout": prompt.layout}
        if text is None:
            return Outcome(None, None, metrics=metrics)
        shown = Shown(next(self._ids), uri, win.line, win.line_prefix, text)
        self.last = shown
        st.shown += 1
        return Outcome(text, shown.id, metrics=metrics)

    # -- idle warm-up ------------------------------------------------------------------------

    def warm_up(self) -> Callable[[Session, Job], None] | None:
        """The idle prefill's next step once the chat prefix is resident: prefill the
        completion prompt up to the cursor's line (repository context, file header, the code
        above) and park it as the ``completion`` branch, then give the live sequence back to
        the chat prefix. The first completion there then prefills only the line being typed.
        None when there is nothing to do (no completion client, no cursor, done already)."""
        editor = self._editor
        session = self._engine.worker.session
        if not self.wanted or editor.last_cursor is None or session is None \
                or not session.capabilities.get("branches", False):
            return None
        path, line = editor.last_cursor
        text = editor.buffer_text(path)
        if text is None:
            return None
        win = cursor_window(text, line, 0)
        prepared = self._prepared
        if prepared is None or prepared[0] != place_of(str(path), line, win.before):
            return None  # the idle assembly prepares the cursor's place first
        context = prepared[1]
        rel = editor.relative(path)
        mode = choose_mode(session.profile.completion_mode, session.fim_tokens)
        key = hash((rel, win.before, context, mode))
        chat_target = self._idle.target
        if key == self._warmed or not chat_target:
            return None
        self._context = context  # the next completion starts from what this prefills
        self._context_at = (str(path), line)

        def job(s: Session, j: Job) -> None:
            prompt = build_prompt(s, context, rel, win, mode)
            warm_branch(s, j, prompt.tokens[: prompt.code_end], COMPLETION_BRANCH, chat_target)
            self._warmed = key

        return job

    def accepted(self, completion_id: int, accepted_length: int | None) -> bool:
        """The editor reports an accepted completion (``accepted_length``: characters taken
        of a partial accept; None for the whole)."""
        last = self.last
        if last is None or last.id != completion_id:
            return False
        if accepted_length is None or accepted_length >= len(last.text):
            self.stats.accepted += 1
        else:
            self.stats.partiallyAccepted += 1
        return True

    def view(self, session: Session | None) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self.stats)
        branches = {b.name: b.tokens for b in session.branches()} if session else {}
        out["residentBranches"] = branches
        out["fim"] = session is not None and session.fim_tokens is not None
        return out
