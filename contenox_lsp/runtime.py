"""The running server's engine side: worker, context service, pre-prefill, model requests.

Created on ``initialized``. Every model call runs on the engine worker thread; every
assembly on the context thread; this object only orchestrates from the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contenox_lsp import assembly as asm
from contenox_lsp.context import BufferState, ContextService, PinState, TurnSpec
from contenox_lsp.documents import encoding_name, open_document
from contenox_lsp.errors import ServerError, from_exception
from contenox_lsp.prefetch import Prefetcher
from contenox_lsp.progress import WorkDone
from contenox_lsp.worker import EngineWorker, Job, JobCancelled, Priority, WorkerStopped
from contextasm.manifest import common_prefix_length
from engine.results import drain

if TYPE_CHECKING:
    from contenox_lsp.options import ServerOptions
    from contenox_lsp.server import ContenoxServer

logger = logging.getLogger(__name__)


class RequestCancelled(Exception):
    """The engine job behind a request was cancelled by something other than the client."""


def _open_engine(options: ServerOptions) -> Callable[[], AbstractContextManager[Any]]:
    def opener() -> AbstractContextManager[Any]:
        try:
            from engine import load_profile, open_session
        except ImportError as exc:
            raise ServerError("engine_unavailable", f"the engine is not installed: {exc}") from exc
        profile = load_profile(options.profile)
        if options.model:
            profile = profile.with_overrides({"model.path": options.model}, source="lsp model")
        return open_session(profile)

    return opener


class Runtime:
    def __init__(self, ls: ContenoxServer) -> None:
        self.ls = ls
        self.loop = asyncio.get_running_loop()
        self.worker = EngineWorker(_open_engine(ls.options))
        self.context = ContextService(ls.roots(), ls.options.repo_map_tokens)
        self.prefetch = Prefetcher(self)
        self.last_metrics: dict[str, Any] | None = None
        self.start_task: asyncio.Future[None] | None = None

    @property
    def options(self) -> ServerOptions:
        return self.ls.options

    async def start(self) -> None:
        self.worker.start()  # the model loads on the engine thread while we index
        await self.reindex(refresh=False)
        try:
            await self.session()
        except ServerError as exc:
            self.ls.show(f"contenox: the model could not be loaded: {exc.message}", _error())
            return
        await self.prefetch.refresh()

    async def reindex(self, refresh: bool = True) -> None:
        """(Re)build the repo index for the current workspace folders, with progress."""
        progress = await WorkDone.server_initiated(self.ls)
        progress.begin("Contenox: indexing", "walking the workspace")
        await self.context.set_roots(
            self.ls.roots(),
            lambda done, total, msg: progress.report(done, total, msg or f"{done}/{total} files"),
        )
        if self.context.index_state == "error":
            progress.end(f"index failed: {self.context.index_error}")
            self.ls.show(f"contenox: repository index failed: {self.context.index_error}",
                         _warning())
        else:
            progress.end(f"indexed {self.context.index_files} files")
        # Edits that arrived while the index was being built: re-apply the open buffers.
        for path, text in self.capture().open_buffers.items():
            self.context.update(path, text, None, encoding_name(self.ls.workspace))
        if refresh:
            self.prefetch.note_change()

    def close(self) -> None:
        self.prefetch.close()
        # The context thread tokenizes with the session's vocabulary: let its current task
        # finish before the engine thread frees the model (else: use after free).
        self.context.close(wait=True)
        self.worker.stop()

    # -- session -------------------------------------------------------------------------------

    def session_ready(self) -> bool:
        f = self.worker.ready
        return f.done() and not f.cancelled() and f.exception() is None

    async def session(self) -> Any:
        try:
            # shield: a cancelled request must not cancel the shared "model loaded" future.
            return await asyncio.shield(asyncio.wrap_future(self.worker.ready))
        except ServerError:
            raise
        except Exception as exc:
            mapped = from_exception(exc)
            if mapped is not None:
                raise mapped from exc
            raise ServerError("engine_unavailable", f"model session unavailable: {exc}") from exc

    def resident_tokens(self) -> list[int]:
        if not self.session_ready():
            return []
        try:
            return list(self.worker.ready.result().resident_tokens)
        except Exception:
            return []

    def state(self) -> str:
        f = self.worker.ready
        if f.done() and (f.cancelled() or f.exception() is not None):
            return "error"
        if not f.done():
            return "cold"
        job = self.worker.busy_with
        if job is not None and job.priority == Priority.USER:
            return "busy"
        if job is not None:
            return "warming"
        if self.prefetch.stale:
            # Edits not yet re-assembled: warming if idle prefill will follow.
            return "warming" if self.options.prefill_on_idle else "cold"
        if self.prefetch.target is not None and self.prefetch.pending_tokens() == 0:
            return "warm"
        return "cold"

    # -- editor state → context ------------------------------------------------------------------

    def capture(self) -> BufferState:
        """Snapshot editor state on the loop thread (pygls workspace is not thread-safe)."""
        ws = self.ls.workspace
        buffers: dict[Path, str] = {}
        for doc in list(ws.text_documents.values()):
            path = self.ls.path_if_inside(doc.uri)
            if path is not None:
                buffers[path] = doc.source
        pins = []
        for pin in self.ls.pins.list():
            doc = open_document(ws, pin.path)
            pins.append(PinState(pin.path, pin.start_line, pin.end_line,
                                 doc.source if doc is not None else None))
        focus = sorted(set(buffers) | {p.path for p in pins})
        return BufferState(dict(sorted(buffers.items())), tuple(pins), tuple(focus))

    def note_edit(self, path: Path) -> None:
        """A document changed (the index update for it is already queued)."""
        self.prefetch.note_change()

    async def assemble(self, turn: TurnSpec, max_new_tokens: int | None = None) -> Any:
        session = await self.session()
        state = self.capture()
        budget_new = max(self.options.max_tokens, max_new_tokens or 0)
        try:
            return await self.context.call(asm.build, state, turn, session, budget_new)
        except Exception as exc:
            mapped = from_exception(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    async def assemble_idle(self) -> Any:
        """The assembly used for pre-prefill: no question, so segment I is just its markers."""
        return await self.assemble(TurnSpec())

    # -- engine jobs -----------------------------------------------------------------------------

    def make_prefill_fn(
        self, target: list[int], progress: WorkDone | None
    ) -> Callable[[Any, Job], Any]:
        def fn(session: Any, job: Job) -> dict[str, Any]:
            start = common_prefix_length(session.resident_tokens, target)
            todo = len(target) - start
            if todo == 0:
                # Already resident (a user request got there first). Don't call prefill:
                # it would re-decode the last token and drop what follows it.
                return {"reusedTokens": start, "newTokens": 0, "prefillMs": 0.0,
                        "missReason": None}

            def report(pos: int) -> None:
                if progress is not None:
                    done = max(0, pos - start)
                    progress.report(done, todo, f"warming {done}/{todo} tokens")

            # Smaller steps than a user prefill: a preempted step loses its work, and the
            # user should not wait behind a long one.
            return chunked_prefill(session, target, job, report, step=BACKGROUND_STEP)

        return fn

    async def run_user_job(self, fn: Callable[[Any, Job], Any], label: str) -> Any:
        """Run ``fn(session, job)`` on the engine thread at user priority and await it.

        Cancelling the awaiting task cancels the job (within one batch/token) and surfaces as
        RequestCancelled; engine and assembly errors become structured ServerErrors.
        """
        job = self.worker.submit(fn, priority=Priority.USER, label=label)
        try:
            return await asyncio.shield(asyncio.wrap_future(job.future))
        except asyncio.CancelledError:
            self.worker.cancel(job)
            raise
        except JobCancelled as exc:
            raise RequestCancelled(str(exc)) from exc
        except WorkerStopped as exc:
            raise ServerError("engine_unavailable", str(exc)) from exc
        except Exception as exc:
            mapped = from_exception(exc)
            if mapped is not None:
                raise mapped from exc
            raise

    async def run_prompt(
        self,
        turn: TurnSpec,
        max_tokens: int,
        on_piece: Callable[[str], None] | None = None,
        work: WorkDone | None = None,
    ) -> dict[str, Any]:
        """Assemble, prefill (reusing KV), decode; returns {text, metrics}.

        Cancelling the awaiting task cancels the engine job (within one batch/token).
        """
        t0 = time.perf_counter()
        if work is not None:
            work.begin("Contenox", "assembling context")
        try:
            assembly = await self.assemble(turn, max_tokens)
            tokens = list(assembly.tokens)
            loop = self.loop

            def emit(piece: str) -> None:
                if on_piece is not None:
                    loop.call_soon_threadsafe(on_piece, piece)

            def fn(session: Any, job: Job) -> dict[str, Any]:
                def report(pos: int) -> None:
                    if work is not None:
                        work.report(pos, len(tokens), f"prefill {pos}/{len(tokens)} tokens")

                stats = chunked_prefill(session, tokens, job, report)
                if work is not None:
                    work.report(len(tokens), len(tokens), "generating")
                gen = decode(session, job, max_tokens, emit, t0)
                return {"prefill": stats, "gen": gen}

            out = await self.run_user_job(fn, "ask")
        finally:
            if work is not None:
                work.end()
            # Whatever happened, resume warming the idle prefix.
            self.prefetch.kick()

        stats, gen = out["prefill"], out["gen"]
        metrics = {
            "reusedTokens": stats["reusedTokens"],
            "newTokens": stats["newTokens"],
            "prefillMs": round(stats["prefillMs"], 3),
            "ttftMs": round(gen["ttftMs"], 3),
            "decodeTokens": gen["decodeTokens"],
            "decodeTokensPerSecond": round(gen["decodeTokensPerSecond"], 3),
            "promptTokens": len(tokens),
            "engineTtftMs": round(gen["engineTtftMs"], 3),
            "finishReason": gen["finishReason"],
            "missReason": stats["missReason"],
        }
        self.last_metrics = metrics
        return {"text": gen["text"], "metrics": metrics}


#: Tokens per background prefill step (at most n_batch).
BACKGROUND_STEP = 256


def chunked_prefill(session: Any, tokens: list[int], job: Job,
                    report: Callable[[int], None], step: int | None = None) -> dict[str, Any]:
    """Prefill ``tokens`` in n_batch-sized steps, checking for cancellation between steps.

    Each step is a normal prefix-reusing ``prefill`` of a longer prefix, so the engine decodes
    only the new chunk and commits it; a preempted job leaves every finished chunk resident.
    """
    n_batch = int(getattr(getattr(session, "profile", None), "n_batch", 512) or 512)
    step = max(16, min(n_batch, step or n_batch))
    start = common_prefix_length(session.resident_tokens, tokens)
    reused: int | None = None
    miss: str | None = None
    prefill_ms = 0.0
    pos = start
    while True:
        job.check()
        end = len(tokens) if len(tokens) - pos <= step else pos + step
        r = session.prefill(tokens[:end], identity=session.identity)
        if reused is None:
            # The engine may keep less than the common prefix (identity miss, SWA clamp);
            # its own count is the truth.
            reused = int(r.reused_tokens)
            miss = getattr(r, "miss_reason", None)
        prefill_ms += float(r.prefill_ms)
        pos = end
        report(pos)
        if end >= len(tokens):
            break
    assert reused is not None
    return {
        "reusedTokens": reused,
        "newTokens": len(tokens) - reused,
        "prefillMs": prefill_ms,
        "missReason": miss,
    }


def decode(session: Any, job: Job, max_tokens: int, emit: Callable[[str], None],
           t0: float) -> dict[str, Any]:
    """Stream up to ``max_tokens`` tokens; ``emit`` gets each text piece as it is decoded.

    ``ttftMs`` is measured from ``t0`` (when the server received the request, so it includes
    assembly and prefill); the engine's own figure (from prefill start) is ``engineTtftMs``.
    """
    pieces: list[str] = []
    first: float | None = None

    def on_piece(piece: str) -> None:
        nonlocal first
        if first is None:
            first = time.perf_counter()
        if piece:
            pieces.append(piece)
            emit(piece)

    result: Any = drain(session.stream(max_tokens=max_tokens), on_piece)
    t_end = time.perf_counter()
    text = "".join(pieces)
    if result is not None and getattr(result, "text", None) is not None:
        text = result.text
    n = int(getattr(result, "decode_tokens", len(pieces)) or 0)
    tok_s = float(getattr(result, "decode_tok_s", 0.0) or 0.0)
    engine_ttft = float(getattr(result, "ttft_ms", 0.0) or 0.0)
    return {
        "text": text,
        "ttftMs": ((first or t_end) - t0) * 1000.0,
        "engineTtftMs": engine_ttft,
        "decodeTokens": n,
        "decodeTokensPerSecond": tok_s,
        "finishReason": getattr(result, "finish_reason", None),
    }


def _warning() -> Any:
    from lsprotocol import types

    return types.MessageType.Warning


def _error() -> Any:
    from lsprotocol import types

    return types.MessageType.Error
