"""The edit stream → re-assembly → idle-time pre-prefill.

Every document or file change calls ``note_change()``. After ``debounceMs`` of quiet the
context is re-assembled (off the event loop) and, when ``prefillOnIdle`` is on, the prompt up
to the user turn is prefilled on the engine worker at background priority. A user request
preempts that job; ``kick()`` after each user request resumes it from what was committed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from contenox_lsp.progress import WorkDone
from contenox_lsp.worker import Job, JobCancelled, Priority
from contextasm.manifest import common_prefix_length

if TYPE_CHECKING:
    from contenox_lsp.runtime import Runtime

logger = logging.getLogger(__name__)

#: A background prefill with at least this many new tokens shows "warming" progress.
WARMING_PROGRESS_MIN_TOKENS = 256


class Prefetcher:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.target: list[int] | None = None
        """The assembled prompt up to (not including) the user turn: what should be in KV."""
        self.manifest: Any = None
        self.last_invalidated: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._generation = 0
        self._refreshing: asyncio.Task[None] | None = None
        self._job: Job | None = None
        self._job_target: list[int] | None = None
        self._kick_task: asyncio.Task[None] | None = None
        self._closed = False

    # -- edit stream -------------------------------------------------------------------------

    def note_change(self) -> None:
        """An input of the context changed: restart the debounce timer."""
        if self._closed:
            return
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
        delay = self.rt.options.debounce_ms / 1000.0
        self._timer = self.rt.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._refreshing = asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        """Re-assemble now and (if enabled) pre-prefill the result."""
        gen = self._generation
        try:
            assembly = await self.rt.assemble_idle()
        except Exception as exc:
            logger.warning("re-assembly failed: %s", exc)
            self.rt.ls.log(f"contenox: context assembly failed: {exc}")
            return
        if gen != self._generation or self._closed:
            return  # a newer change is pending; its own refresh will run
        self._record_invalidation(assembly.manifest)
        self.manifest = assembly.manifest
        self.target = list(assembly.tokens[: assembly.user_start])
        self.kick()

    @property
    def stale(self) -> bool:
        """A change arrived that the current target does not reflect yet (debounce pending
        or re-assembly in flight)."""
        return self._timer is not None or (
            self._refreshing is not None and not self._refreshing.done()
        )

    def _record_invalidation(self, manifest: Any) -> None:
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
        if self.target is None:
            return 0
        resident = self.rt.resident_tokens()
        return len(self.target) - common_prefix_length(resident, self.target)

    @property
    def running(self) -> bool:
        return self._job is not None and not self._job.future.done()

    def kick(self) -> None:
        """(Re)start the background prefill of the current target if it is not resident."""
        if self._closed or self.target is None or not self.rt.options.prefill_on_idle:
            return
        if self._kick_task is not None and not self._kick_task.done():
            # Already prefilling: if that is for an older target, stop it; the running
            # loop then continues with the newest target (shared chunks stay resident).
            job = self._job
            if job is not None and self._job_target is not self.target and not job.future.done():
                self.rt.worker.cancel(job)
            return
        self._kick_task = asyncio.ensure_future(self._kick())

    async def _kick(self) -> None:
        while not self._closed:
            target = self.target
            if target is None or not self.rt.session_ready():
                return
            pending = self.pending_tokens()
            if pending > 0:
                await self._prefill(target, pending)
            if self.target is target:
                return  # done, or preempted by a user request (which kicks again after)

    async def _prefill(self, target: list[int], pending: int) -> None:
        progress = None
        if pending >= WARMING_PROGRESS_MIN_TOKENS:
            progress = await WorkDone.server_initiated(self.rt.ls)
            progress.begin("Contenox: warming", f"0/{pending} tokens")
        fn = self.rt.make_prefill_fn(target, progress)
        job = self.rt.worker.submit(fn, priority=Priority.BACKGROUND, label="pre-prefill")
        self._job, self._job_target = job, target
        try:
            stats = await asyncio.wrap_future(job.future)
            if progress is not None:
                progress.end(f"warm: {stats['newTokens']} tokens prefilled")
            logger.debug("pre-prefill done: %s", stats)
        except JobCancelled:
            if progress is not None:
                progress.end("preempted")
        except Exception as exc:
            if progress is not None:
                progress.end(f"failed: {exc}")
            logger.warning("background prefill failed: %s", exc)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._job is not None:
            self.rt.worker.cancel(self._job)
