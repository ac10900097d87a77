"""The engine side of a running server: worker, context service, idle prefill, model turns.

Created on ``initialized`` by the lifecycle handler. Every model call runs on the engine
worker thread, every index access and assembly on the context thread; this object only
orchestrates from the event loop. Its collaborators come in from outside (options, the
workspace folders, the editor state, a notifier), so it never holds the server and can be
built and tested in process. It builds the parts and wires them once, through their
constructors: the feature services get the engine (``EngineAccess``), the editor view, the
idle prefill and the residency, never the runtime; the worker's before-job hook and the idle
prefill's after-warm step are the residency's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types

from contenox_lsp.code_segment import SteadyRate, question_cap
from contenox_lsp.completion.retrieval import Place, retrieve
from contenox_lsp.completion.window import At, CursorWindow, cursor_window
from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.errors import ServerError
from contenox_lsp.next_edit.layout import Layout
from contenox_lsp.options import ServerOptions
from contenox_lsp.progress import Notifier, Reporter
from contenox_lsp.runtime.auto_snapshots import AutoSnapshots
from contenox_lsp.runtime.completion import COMPLETION_BRANCH, CompletionService
from contenox_lsp.runtime.completion import JOB_LABEL as COMPLETION_LABEL
from contenox_lsp.runtime.context import ContextService, ContextView
from contenox_lsp.runtime.conversations import Conversations, prompt_outputs
from contenox_lsp.runtime.editor_view import EditorView
from contenox_lsp.runtime.engine_access import EngineAccess, structured_errors
from contenox_lsp.runtime.idle_prefill import IdlePrefill
from contenox_lsp.runtime.jobs import chunked_prefill, decode
from contenox_lsp.runtime.next_edit import BRANCH as NEXT_EDIT_BRANCH
from contenox_lsp.runtime.next_edit import JOB_LABEL as NEXT_EDIT_LABEL
from contenox_lsp.runtime.next_edit import NextEditService, Suggestion
from contenox_lsp.runtime.rate_memory import FILE_NAME as RATES_FILE
from contenox_lsp.runtime.rate_memory import load_rate, rate_key, store_rate
from contenox_lsp.runtime.residency import Residency
from contenox_lsp.runtime.snapshot_store import conversations_dir, workspace_store
from contenox_lsp.runtime.snapshots import handle as snapshot_action
from contenox_lsp.runtime.worker import EngineWorker, Job, Priority
from contenox_lsp.turn import TurnSpec, WorkspaceState, assemble_within, read_disk_text, turn_at
from contenox_lsp.views import TurnMetrics
from contextasm import Assembly, get_format
from contextasm.render import answer_lead
from engine import Session
from engine.lookup import REWRITE_DRAFT_TOKENS
from engine.model_files import cache_dir
from engine.results import ttft_over_steps
from repo_index.code_search import texts_reader

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class InlineOffer:
    """What inline completion shows: a completion, or a next edit that is an insertion at
    the cursor (accepted with the next-edit command)."""

    text: str
    id: int
    next_edit: bool


def open_engine(options: ServerOptions, roots: Callable[[], list[Path]] = list,
                ) -> Callable[[], AbstractContextManager[Session]]:
    def opener() -> AbstractContextManager[Session]:
        from engine import load_profile, open_session
        from engine.remote.session_key import default_session_key

        profile = load_profile(options.profile)
        if options.model:
            profile = profile.with_overrides({"model.path": options.model}, source="lsp model")
        if not profile.get("remote.session_key"):
            # A team's router keeps this developer's requests on one replica by this key: one
            # per user and workspace (a digest, docs/fleet.md).
            workspace = next(iter(roots()), None)
            key = default_session_key(None if workspace is None else str(workspace))
            profile = profile.with_overrides({"remote.session_key": key},
                                             source="user and workspace")
        return open_session(profile)

    return opener


class Runtime:
    def __init__(
        self,
        options: ServerOptions,
        roots: Callable[[], list[Path]],
        editor_state: Callable[[], WorkspaceState],
        notifier: Notifier,
        *,
        opener: Callable[[], AbstractContextManager[Session]] | None = None,
    ) -> None:
        self.options = options
        self.roots = roots
        self._editor_state = editor_state
        self._notifier = notifier
        self.loop = asyncio.get_running_loop()
        # What stays resident beside the chat prefix: registered in warm-up order; it parks
        # the live prefix before a job of another kind (the worker's hook) and runs the
        # warm-ups once the idle prefix is resident (idle prefill's).
        self.residency = Residency()
        self.worker = EngineWorker(opener or open_engine(options, roots),
                                   before_job=self.residency.before_job)
        self.engine = EngineAccess(self.worker)
        self.editor = EditorView(roots, editor_state)
        self.context = ContextService(roots(), options.context_budget())
        self._question_rate = SteadyRate()  # the prefill rate that bounds the question's code
        self._question_rate_key: str | None = None  # the engine identity it is remembered for
        self.snapshots = AutoSnapshots(
            self.worker, lambda s: workspace_store(options.snapshot_dir, self.roots(), s),
            enabled=options.auto_snapshots)
        self.idle = IdlePrefill(self.worker, self.assemble_idle, notifier,
                                debounce_ms=options.debounce_ms,
                                enabled=options.prefill_on_idle, snapshots=self.snapshots,
                                after_warm=self.residency.after_warm)
        self.completion = CompletionService(self.engine, self.editor, self.idle,
                                            self.residency, self._completion_code)
        self.next_edit = NextEditService(self.engine, self.editor, self.idle, self.residency)
        self.residency.register(COMPLETION_BRANCH, COMPLETION_LABEL, self.completion.warm_up)
        self.residency.register(NEXT_EDIT_BRANCH, NEXT_EDIT_LABEL, self.next_edit.warm_up)
        self.conversations = Conversations()
        self.last_metrics: dict[str, Any] | None = None
        self.start_task: asyncio.Future[None] | None = None

    async def start(self) -> None:
        self.worker.start()  # the model loads on the engine thread while we index
        await self.reindex(refresh=False)
        try:
            await self.session()
        except ServerError as exc:
            self._notifier.show(f"contenox: the model could not be loaded: {exc.message}",
                                types.MessageType.Error)
            return
        await asyncio.to_thread(self.conversations.open, conversations_dir(self.roots()))
        await self.idle.refresh()

    async def reindex(self, refresh: bool = True) -> None:
        """(Re)build the repo index for the current workspace folders, with progress."""
        self.snapshots.forget_store()  # the store is per set of workspace folders
        progress = await self._notifier.start_progress()
        progress.begin("Contenox: indexing", "walking the workspace")
        await self.context.set_roots(
            self.roots(),
            lambda done, total, msg: progress.report(done, total, msg or f"{done}/{total} files"),
        )
        if self.context.index_state == "error":
            progress.end(f"index failed: {self.context.index_error}")
            self._notifier.show(
                f"contenox: repository index failed: {self.context.index_error}",
                types.MessageType.Warning)
        else:
            progress.end(f"indexed {self.context.index_files} files")
        # Edits that arrived while the index was being built: re-apply the open buffers.
        for path, text in self._editor_state().open_buffers.items():
            self.context.update(path, text, None)
        if refresh:
            self.idle.note_change()

    def close(self) -> None:
        self.snapshots.save_at_shutdown()
        self.idle.close()
        # The context thread tokenizes with the session's vocabulary: let its current task
        # finish before the engine thread frees the model (else: use after free).
        self.context.close(wait=True)
        self.worker.stop()

    # -- the edit stream: every change of a context input comes in here ------------------------

    def buffer_changed(self, path: Path, text: str, edits: list[dict[str, Any]] | None,
                       encoding: str) -> None:
        """An open buffer was opened or edited (``edits``: the incremental changes)."""
        if edits:
            last = edits[-1]
            self.editor.last_cursor = (path, int(last["range"]["start"]["line"])
                                + str(last["text"]).count("\n"))
        self.context.update(path, text, edits, encoding)
        self.idle.note_change()

    def disk_changed(self, path: Path) -> None:
        """A file changed, appeared or vanished on disk, or its buffer was closed."""
        self.context.update_from_disk(path)
        self.idle.note_change()

    def cursor_at(self, path: Path, line: int) -> None:
        """An ask named the cursor: the idle prefill warms the context there next (a second
        question at the same place then prefills only itself)."""
        if self.editor.last_cursor != (path, line):
            self.editor.last_cursor = (path, line)
            self.idle.note_change()

    def buffer_text(self, path: Path) -> str | None:
        """The open buffer's text (None: not open)."""
        return self.editor.buffer_text(path)

    def relative(self, path: Path) -> str:
        return self.editor.relative(path)

    @property
    def last_cursor(self) -> tuple[Path, int] | None:
        """Where the editor last told us the cursor is (``EditorView.last_cursor``)."""
        return self.editor.last_cursor

    def inputs_changed(self) -> None:
        """Something outside the index changed (a save, a pin): re-assemble after the quiet."""
        self.idle.note_change()

    # -- what the handlers ask: each request's engine side, behind one method ----------------

    @property
    def model_ready(self) -> bool:
        """The model is loaded (requests that never wait for it answer empty until then)."""
        return self.worker.session is not None

    def client_ready(self, inline_completion: bool) -> None:
        """``initialized``: documents opened before it are the edit history's starting
        texts; an editor that shows inline completions has the idle time warm their prompt."""
        for path, text in self._editor_state().open_buffers.items():
            self.next_edit.history.opened(self.relative(path), text)
        self.completion.wanted = inline_completion

    def document_opened(self, path: Path, text: str, encoding: str) -> None:
        self.buffer_changed(path, text, None, encoding)
        self.next_edit.history.opened(self.relative(path), text)

    def document_changed(self, path: Path, text: str, edits: list[dict[str, Any]] | None,
                         encoding: str) -> None:
        self.buffer_changed(path, text, edits, encoding)
        self.next_edit.history.changed(self.relative(path), text)

    async def inline_completion(self, at: At, win: CursorWindow, previous_line: str | None,
                                t0: float, path: Path) -> InlineOffer | None:
        """The completion at ``at`` (``textDocument/inlineCompletion``, received at ``t0``):
        the shown next edit when it is an insertion right there, else the completion
        service's answer; None when there is nothing to show."""
        rel = self.relative(path)
        insertion = self.next_edit.insertion_at(rel, at.version, at.line, len(win.line_prefix))
        if insertion is not None:
            self.completion.latest.cancel_previous()
            return InlineOffer(insertion.replacement.text, insertion.id, next_edit=True)
        out = await self.completion.request(at, path, win, previous_line, t0)
        if out.text is None or out.id is None:
            return None
        return InlineOffer(out.text, out.id, next_edit=False)

    @property
    def typing_completions(self) -> bool:
        """The user types with completions on (a keystroke then speculates one)."""
        return self.completion.typing

    def speculate_completion(self, path: Path, at: At | None,
                             win: CursorWindow | None) -> None:
        """After an edit: drop the stale speculation; start one at ``at`` when given."""
        self.completion.after_edit(at, path, win)

    def completion_accepted(self, completion_id: int, accepted_length: int | None) -> bool:
        return self.completion.accepted(completion_id, accepted_length)

    async def next_edit_at(self, path: Path, text: str, line: int, column: int,
                           version: int | None) -> tuple[Suggestion | None, Layout | None]:
        """The next edit at the cursor (``contenox/nextEdit``) and the prompt it came from;
        (None, …) when there is nothing to suggest or a newer request superseded this one."""
        service = self.next_edit
        service.latest.cancel_previous()  # the newer request is the one the user waits for
        self.cursor_at(path, line)
        with service.latest.current() as task:
            try:
                found = await service.suggest(self.relative(path), text, line, column, version)
            except asyncio.CancelledError:
                if service.latest.superseded(task):
                    return None, None
                raise
        return found, service.last_layout

    def next_edit_shown(self) -> None:
        self.next_edit.stats.displayed += 1

    def next_edit_decided(self, suggestion_id: int, accepted: bool) -> bool:
        return self.next_edit.decided(suggestion_id, accepted)

    def conversation_outputs(self, cid: str | None) -> tuple[tuple[str, str, str], ...]:
        """The earlier turns of conversation ``cid`` as the user turn's outputs."""
        return prompt_outputs(self.conversations.turns(cid))

    async def conversation_append(self, cid: str, question: str, answer: str) -> int:
        return await asyncio.to_thread(self.conversations.append, cid, question, answer)

    def conversation_view(self, cid: str | None) -> dict[str, Any]:
        return self.conversations.view(cid)

    async def conversation_clear(self, cid: str | None) -> int:
        return await asyncio.to_thread(self.conversations.clear, cid)

    async def snapshot(self, action: str, name: str | None) -> dict[str, Any]:
        """``contenox/snapshot``: save, load, list or clear this workspace's KV snapshots."""
        return await snapshot_action(self, action, name)

    # -- session -------------------------------------------------------------------------------

    async def session(self) -> Session:
        return await self.engine.session()

    def resident_tokens(self) -> list[int]:
        session = self.worker.session
        return session.resident_tokens if session is not None else []

    def state(self) -> str:
        f = self.worker.ready
        if f.done() and (f.cancelled() or f.exception() is not None):
            return "error"
        if not f.done():
            return "cold"
        job = self.worker.busy_with
        if job is not None and job.priority == Priority.USER:
            return "busy"
        if job is not None or self.idle.working:
            return "warming"
        if self.idle.stale:
            # Edits not yet re-assembled: warming if idle prefill will follow.
            return "warming" if self.options.prefill_on_idle else "cold"
        if self.idle.target is not None and self.idle.pending_tokens() == 0:
            return "warm"
        return "cold"

    def status(self) -> dict[str, Any]:
        """The ``contenox/status`` document of a started runtime (PROTOCOL.md)."""
        model = backend = profile_id = None
        capabilities: dict[str, bool] | None = None
        exact: dict[str, Any] | None = None
        remote: dict[str, Any] | None = None
        session = self.worker.session
        if session is not None:
            ident = session.identity
            backend, profile_id = ident.backend, ident.profile_id
            capabilities = dict(session.capabilities)
            exact = session.exact_reuse
            model = session.model_description
            remote = session.remote_status
        err = self.worker.load_error
        busy = self.worker.busy_with
        idle = self.idle
        return {
            "state": self.state(),
            "model": model,
            "backend": backend,
            "profileId": profile_id,
            "capabilities": capabilities,
            "exactReuse": exact,
            "remote": remote,
            "residentTokens": len(self.resident_tokens()),
            "pendingPrefillTokens": idle.pending_tokens(),
            "targetTokens": len(idle.target) if idle.target is not None else None,
            "lastInvalidated": idle.last_invalidated,
            "contextStale": idle.stale,
            "idleHeld": idle.held,
            "lastRequest": self.last_metrics,
            "running": None if busy is None else busy.label,
            "prefillOnIdle": self.options.prefill_on_idle,
            "debounceMs": self.options.debounce_ms,
            "completion": self.completion.view(session),
            "nextEdit": self.next_edit.view(),
            "snapshots": self.snapshots.view(),
            "error": None if err is None else str(err),
            "index": {
                **self.index_view(),
                "error": self.context.index_error,
                "foldedChanges": self.context.folded_changes,
            },
        }

    def index_view(self) -> dict[str, Any]:
        """The repo index's state (``building``: prompts go without repo map and code
        meanwhile), how many files it holds, and how far the code search is filled."""
        state = "building" if self.context.building else self.context.index_state
        return {"state": state, "files": self.context.index_files,
                "codeSearch": self.context.code_search_view()}

    async def token_counts(self, texts: list[str | None]) -> list[int | None]:
        """Each text's length in the model's tokens (None: no text, or no model loaded yet),
        counted on the context thread."""
        session = self.worker.session
        if session is None:
            return [None] * len(texts)

        def count(_svc: ContextView) -> list[int | None]:
            return [None if t is None else len(session.tokenize(t, add_bos=False, special=False))
                    for t in texts]

        return await self.context.call(count)

    # -- assembly ------------------------------------------------------------------------------

    async def assemble(self, turn: TurnSpec, max_new_tokens: int | None = None,
                       state: WorkspaceState | None = None) -> Assembly:
        """The turn's prompt for the editor ``state`` (captured now when not given: once per
        assembly, on the loop)."""
        session = await self.session()
        state = self._editor_state() if state is None else state
        answer = max(self.options.max_tokens, max_new_tokens or 0)

        # The question's code is prefilled at the ask itself: bounded by the time it may take.
        budget = self.context.budget.with_question_max(question_cap(
            self._steady_rate(session).update(session.metrics.prefill_rate()),
            self.options.question_code_ms))

        def build(svc: ContextView) -> Assembly:
            return assemble_within(state, turn, svc.index, session, budget,
                                   answer_tokens=answer, finder=svc.finder)

        with structured_errors():
            return await self.context.call(build)

    def _steady_rate(self, session: Session) -> SteadyRate:
        """The rate that bounds the question's code, starting from the one remembered for this
        engine identity (a restarted server builds the warm server's prompt)."""
        key = rate_key(session.identity.profile_id, session.identity.backend_version)
        if key != self._question_rate_key:
            path = cache_dir() / RATES_FILE
            self._question_rate = SteadyRate(load_rate(path, key),
                                             on_change=lambda r: store_rate(path, key, r))
            self._question_rate_key = key
        return self._question_rate

    def context_budget(self) -> ContextBudget:
        """The one budget the context beside the question is built within."""
        return self.context.budget

    def question_code_bound(self) -> dict[str, Any]:
        """What bounds the question's code now (``contenox/explainContext``)."""
        rate = self._question_rate
        ms = self.options.question_code_ms
        tokens = question_cap(rate.value, ms)
        return {"tokens": tokens, "questionCodeMs": ms,
                "tokensPerS": None if rate.value is None else round(rate.value, 1),
                "source": rate.source}

    async def assemble_idle(self) -> Assembly:
        """The assembly used for pre-prefill: no question; the active conversation's turns are
        in it (a follow-up prefills only itself), and the cursor context at the last edit (an
        ask there prefills only its question)."""
        convs = self.conversations
        outputs = prompt_outputs(convs.turns(convs.active))
        state = self._editor_state()
        if self.editor.last_cursor is not None:
            path, line = self.editor.last_cursor
            text = state.open_buffers.get(path)
            if text is not None:
                assembly = await self.assemble(
                    turn_at(state.roots, path, "", text=text, line=line, outputs=outputs),
                    state=state)
                if self.completion.wanted:  # its warm-up prefills the code chosen here
                    await self.completion.prepare(path, cursor_window(text, line, 0), assembly)
                return assembly
        return await self.assemble(TurnSpec(outputs=outputs), state=state)

    async def _completion_code(self, place: Place) -> tuple[tuple[str, str], ...]:
        """The code a completion prompt carries at ``place`` (``completion.retrieval``),
        chosen on the context thread from the open buffers and the index. A failure leaves
        the prompt without code (logged): the completion, and the idle prefill that prepares
        it, still run."""
        buffers = {str(p): t for p, t in self._editor_state().open_buffers.items()}

        def choose(svc: ContextView) -> tuple[tuple[str, str], ...]:
            if svc.finder is None:
                return ()  # the index is still building
            svc.finder.read_text = texts_reader(buffers, read_disk_text)
            return retrieve(svc.finder, place)

        try:
            return await self.context.call(choose)
        except Exception:
            logger.warning("choosing code for the completion prompt failed", exc_info=True)
            return ()

    # -- engine jobs -----------------------------------------------------------------------------

    async def run_user_job(self, fn: Callable[[Session, Job], T], label: str) -> T:
        """Run ``fn(session, job)`` on the engine thread at user priority and await it
        (``EngineAccess.run_user_job``)."""
        return await self.engine.run_user_job(fn, label)

    async def run_prompt(
        self,
        turn: TurnSpec,
        max_tokens: int,
        on_piece: Callable[[str], None] | None = None,
        work: Reporter | None = None,
        rewrite: bool = False,
    ) -> dict[str, Any]:
        """Assemble, prefill (reusing KV), decode (``rewrite``: the answer rewrites code the
        prompt holds, so prompt lookup drafts it); returns {text, metrics}.

        Cancelling the awaiting task cancels the engine job (within one batch/token).
        """
        t0 = time.perf_counter()
        if work is not None:
            work.begin("Contenox", "assembling context")
        try:
            assembly = await self.assemble(turn, max_tokens)
            assembly_ms = (time.perf_counter() - t0) * 1000.0
            # Right after start-up the idle prefill may not have restored the stable prefix.
            await self.snapshots.restore(assembly, Priority.USER)
            tokens = list(assembly.tokens)
            fmt = get_format(assembly.identity.prompt_format)
            lead = answer_lead(fmt, turn.question)
            loop = self.loop

            def emit(piece: str) -> None:
                if on_piece is not None:
                    loop.call_soon_threadsafe(on_piece, piece)

            def fn(session: Session, job: Job) -> tuple[Any, Any]:
                def report(pos: int) -> None:
                    if work is not None:
                        work.report(pos, len(tokens), f"prefill {pos}/{len(tokens)} tokens")

                stats = chunked_prefill(session, tokens, job, report)
                if work is not None:
                    work.report(len(tokens), len(tokens), "generating")
                return stats, decode(session, max_tokens, emit, t0, fmt.stop, lead,
                                     fmt.opening,
                                     REWRITE_DRAFT_TOKENS if rewrite else 0)

            stats, gen = await self.run_user_job(fn, "ask")
        finally:
            if work is not None:
                work.end()
            # Whatever happened, resume warming the idle prefix.
            self.idle.kick()

        metrics = TurnMetrics(
            promptTokens=len(tokens),
            reusedTokens=stats.reused_tokens,
            newTokens=stats.new_tokens,
            restoredFromSnapshot=0,
            stableTokens=assembly.stable_end,
            stableSnapshotSaved=False,
            assemblyMs=assembly_ms,
            prefillMs=stats.prefill_ms,
            ttftMs=gen.ttft_ms,
            engineTtftMs=ttft_over_steps(gen.engine_ttft_ms, stats.prefill_ms,
                                         stats.last_step_ms),
            decodeTokens=gen.decode_tokens,
            decodeTokensPerSecond=gen.decode_tokens_per_second,
            finishReason=gen.finish_reason,
            missReason=stats.miss_reason,
        ).to_json()
        self.last_metrics = metrics
        return {"text": gen.text, "metrics": metrics}
