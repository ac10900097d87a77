"""The edit stream → re-assembly → idle-time pre-prefill.

Every change of a context input calls ``note_change()``. After ``debounce_ms`` of quiet the
idle context (no question) is re-assembled and, when ``prefill_on_idle`` is on, the prompt up
to its (empty) question — the cursor context at the last edit included — is prefilled on the
engine worker at background priority. A user request
preempts that job; ``kick()`` after each user request resumes it from what was committed.

The collaborators are injected (the worker, an ``assemble`` coroutine, a notifier), so this
runs, and is tested, without a language server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from contenox_lsp.clock import LoopTimer
from contenox_lsp.progress import Notifier, Reporter
from contenox_lsp.runtime.auto_snapshots import AutoSnapshots
from contenox_lsp.runtime.jobs import background_prefill
from contenox_lsp.runtime.worker import EngineWorker, Job, JobCancelled, Priority
from contextasm import Assembly, Manifest
from contextasm.manifest import common_prefix_length
from engine import Session

logger = logging.getLogger(__name__)

#: A job for the engine thread (``EngineWorker.submit``).
BackgroundFn = Callable[[Session, Job], Any]

#: A background prefill with at least this many new tokens shows "warming" progress.
WARMING_PROGRESS_MIN_TOKENS = 256


class IdlePrefill:
    def __init__(
        self,
        worker: EngineWorker,
        assemble_idle: Callable[[], Awaitable[Assembly]],
        notifier: Notifier,
        *,
        debounce_ms: int,
        enabled: bool,
        snapshots: AutoSnapshots | None = None,
        after_warm: Callable[[], BackgroundFn | None] | None = None,
    ) -> None:
        self._worker = worker
        self._assemble_idle = assemble_idle
        self._notifier = notifier
        self.debounce_ms = debounce_ms
        self.enabled = enabled
        self.snapshots = snapshots
        """Restores the stable prefix before prefilling it, saves it once prefilled."""
        self.after_warm = after_warm
        """Once the target is resident: more background work (None: nothing to do), e.g. the
        completion prompt's prefix at the cursor."""
        self.target: list[int] | None = None
        """The idle prompt up to its (empty) question: what should be in KV."""
        self.manifest: Manifest | None = None
        self.assembly: Assembly | None = None
        """The last idle assembly (the completion prompt takes its repository part)."""
        self.last_invalidated: list[str] = []
        self._debounce = LoopTimer()
        self._generation = 0
        self._refreshing: asyncio.Task[None] | None = None
        self._job: Job | None = None
        self._job_target: list[int] | None = None
        self._kick_task: asyncio.Task[None] | None = None
        self._hold = LoopTimer()  # pending: no background prefill (inline completion)
        self._closed = False

    # -- edit stream -------------------------------------------------------------------------

    def note_change(self) -> None:
        """An input of the context changed: restart the debounce timer."""
        if self._closed:
            return
        self._generation += 1
        self._debounce.start(self.debounce_ms / 1000.0, self._fire)

    def _fire(self) -> None:
        self._refreshing = asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        """Re-assemble now and (if enabled) pre-prefill the result."""
        gen = self._generation
        try:
            assembly = await self._assemble_idle()
        except Exception as exc:
            logger.warning("re-assembly failed: %s", exc)
            self._notifier.log(f"contenox: context assembly failed: {exc}")
            return
        if gen != self._generation or self._closed:
            return  # a newer change is pending; its own refresh will run
        self._record_invalidation(assembly.manifest)
        self.manifest = assembly.manifest
        self.assembly = assembly
        self.target = list(assembly.tokens[: assembly.question_start])
        if self.snapshots is not None:
            self.snapshots.remember(assembly)
        self.kick()

    @property
    def stale(self) -> bool:
        """A change arrived that the current target does not reflect yet (debounce pending
        or re-assembly in flight)."""
        return self._debounce.pending or (
            self._refreshing is not None and not self._refreshing.done()
        )

    def _record_invalidation(self, manifest: Manifest) -> None:
        old = self.manifest
        if old is None:
            return
        before = {s.label: s.token_hash for s in old.segments}
        changed = [s.label for s in manifest.segments
                   if s.kind.value != "user" and before.get(s.label) != s.token_hash]
        self.last_invalidated = changed
        if changed:
            logger.info("edit invalidated: %s", ", ".join(changed))

    # -- background prefill --------------------------------------------------------------------

    def pending_tokens(self) -> int:
        """Tokens of the current target not yet in KV."""
        return 0 if self.target is None else self._pending_of(self.target)

    @property
    def running(self) -> bool:
        return self._job is not None and not self._job.future.done()

    @property
    def working(self) -> bool:
        """The background loop is under way: prefilling the target, saving it, or running
        the warm-ups after it (between two of its jobs the worker may be idle)."""
        return self._kick_task is not None and not self._kick_task.done()

    def hold(self, seconds: float) -> None:
        """Start no background prefill for ``seconds`` (inline completions are coming: the
        chat prefix would take the live sequence from them at every keystroke); it resumes
        by itself afterwards."""
        self._hold.extend_to(seconds, self.kick)

    @property
    def held(self) -> bool:
        """The background prefill (and the warm-ups after it) waits out a hold (``hold``)."""
        return self._hold.pending

    def kick(self) -> None:
        """(Re)start the background prefill of the current target if it is not resident."""
        if self._closed or self.target is None or not self.enabled:
            return
        if self._hold.pending:
            return  # held for inline completion; the hold timer kicks again
        if self._kick_task is not None and not self._kick_task.done():
            # Already prefilling: if that is for an older target, stop it; the running
            # loop then continues with the newest target (shared chunks stay resident).
            job = self._job
            if job is not None and self._job_target is not self.target and not job.future.done():
                self._worker.cancel(job)
            return
        self._kick_task = asyncio.ensure_future(self._kick())

    async def _kick(self) -> None:
        while not self._closed:
            target = self.target
            if target is None or self._worker.session is None:
                return
            if self._hold.pending:
                return  # the hold timer kicks again
            pending = self.pending_tokens()
            assembly = self.assembly
            if self.snapshots is not None and assembly is not None:
                # Even with nothing pending: the stable prefix may be resident but unsaved.
                await self._snapshot_step(target, assembly)
                pending = self.pending_tokens() if self.target is target else 0
            if pending > 0:
                await self._prefill(target, pending)
            if self.target is target and self.pending_tokens() == 0 and self.after_warm:
                more = self.after_warm()
                if more is not None:
                    await self._run(more, "idle warm-up", target)
            if self.target is target:
                return  # done, or preempted by a user request (which kicks again after)

    async def _snapshot_step(self, target: list[int], assembly: Assembly) -> None:
        """Restore what a snapshot holds; else stop at the stable prefix and save it."""
        assert self.snapshots is not None
        if self._pending_of(target) > 0:  # else no snapshot can cover more than is resident
            await self.snapshots.restore(assembly)
        stop = await self.snapshots.checkpoint(assembly)
        if stop is None or self.target is not target:
            return
        stable = target[:stop]
        await self._prefill(stable, self._pending_of(stable), for_target=target)
        if self.target is target and self._pending_of(stable) == 0:
            await self.snapshots.save(assembly)

    def _pending_of(self, tokens: list[int]) -> int:
        session = self._worker.session
        resident = session.resident_tokens if session is not None else []
        return len(tokens) - common_prefix_length(resident, tokens)

    async def _prefill(self, target: list[int], pending: int,
                       for_target: list[int] | None = None) -> None:
        """Prefill ``target`` (``for_target``: the idle target it is a step towards)."""
        progress: Reporter | None = None
        if pending >= WARMING_PROGRESS_MIN_TOKENS:
            progress = await self._notifier.start_progress()
            progress.begin("Contenox: warming", f"0/{pending} tokens")
        job = self._worker.submit(background_prefill(target, progress),
                                  priority=Priority.BACKGROUND, label="pre-prefill")
        self._job, self._job_target = job, for_target or target
        try:
            stats = await asyncio.wrap_future(job.future)
            if progress is not None:
                progress.end(f"warm: {stats.new_tokens} tokens prefilled")
            logger.debug("pre-prefill done: %s", stats)
        except JobCancelled:
            if progress is not None:
                progress.end("preempted")
        except Exception as exc:
            if progress is not None:
                progress.end(f"failed: {exc}")
            logger.warning("background prefill failed: %s", exc)

    async def _run(self, fn: BackgroundFn, label: str, target: list[int]) -> None:
        """Run ``fn`` at background priority as this loop's job (a newer target cancels it)."""
        job = self._worker.submit(fn, priority=Priority.BACKGROUND, label=label)
        self._job, self._job_target = job, target
        try:
            await asyncio.wrap_future(job.future)
        except JobCancelled:
            pass
        except Exception as exc:
            logger.warning("%s failed: %s", label, exc)

    def close(self) -> None:
        self._closed = True
        self._hold.cancel()
        self._debounce.cancel()
        if self._job is not None:
            self._worker.cancel(self._job)
