"""The engine worker: one thread owns the model session and runs every engine call.

The asyncio loop never touches the model; it submits jobs and awaits their futures. User jobs
run before background jobs, and submitting a user job while a background job (idle-time
pre-prefill) runs preempts it with ``session.cancel()``, which the engine honours within one
batch; the chunks it already committed stay resident, so nothing is lost.
"""

from __future__ import annotations

import concurrent.futures
import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from engine import Session

logger = logging.getLogger(__name__)


class Priority(IntEnum):
    USER = 0
    BACKGROUND = 1


class JobCancelled(Exception):
    """The job was cancelled (by the client, by preemption, or by shutdown)."""


class WorkerStopped(Exception):
    """The worker is stopping or its session failed to open."""


def is_engine_cancel(exc: BaseException) -> bool:
    """True for the engine's structured cancellation error (code ``cancelled``)."""
    return isinstance(exc, JobCancelled) or getattr(exc, "code", None) == "cancelled"


@dataclass(eq=False)
class Job:
    fn: Callable[[Session, Job], Any]
    priority: Priority
    label: str
    future: concurrent.futures.Future[Any] = field(default_factory=concurrent.futures.Future)
    cancel_event: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def check(self) -> None:
        """Raise JobCancelled at a safe point (between engine calls) if cancellation arrived."""
        if self.cancel_event.is_set():
            raise JobCancelled(self.label)


class EngineWorker:
    def __init__(self, opener: Callable[[], AbstractContextManager[Session]], *,
                 before_job: Callable[[Session, Job], None] | None = None) -> None:
        self._opener = opener
        self._cv = threading.Condition()
        self._queue: list[tuple[int, int, Job]] = []
        self._seq = itertools.count()
        self._current: Job | None = None
        self._session: Session | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="contenox-engine", daemon=True)
        self.ready: concurrent.futures.Future[Session] = concurrent.futures.Future()
        """Resolves to the session once the model is loaded (or to the load error)."""
        self._before_job = before_job
        """Called on the engine thread before each job runs (``Residency.before_job`` parks
        the live prefix there before a job of another kind takes it over)."""

    # -- public API (any thread) -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def started(self) -> bool:
        return self._thread.is_alive() or self.ready.done()

    @property
    def session(self) -> Session | None:
        """The open session once the model is loaded; None before (or if loading failed).

        Read-only use from other threads (resident tokens, identity, capabilities); every
        engine call goes through ``submit``."""
        return self._session

    @property
    def load_error(self) -> BaseException | None:
        """Why the session could not be opened, once that is known."""
        f = self.ready
        if f.done() and not f.cancelled():
            return f.exception()
        return None

    def submit(self, fn: Callable[[Session, Job], Any], *, priority: Priority,
               label: str) -> Job:
        job = Job(fn=fn, priority=priority, label=label)
        with self._cv:
            if self._stopping:
                _settle(job.future, exc=WorkerStopped("the engine worker is stopping"))
                return job
            heapq.heappush(self._queue, (int(priority), next(self._seq), job))
            cur = self._current
            if (priority == Priority.USER and cur is not None
                    and cur.priority == Priority.BACKGROUND):
                # A user request never waits behind background work.
                self._cancel_locked(cur)
            self._cv.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        with self._cv:
            self._cancel_locked(job)

    def cancel_background(self) -> None:
        with self._cv:
            for _, _, job in list(self._queue):
                if job.priority == Priority.BACKGROUND:
                    self._cancel_locked(job)
            if self._current is not None and self._current.priority == Priority.BACKGROUND:
                self._cancel_locked(self._current)

    @property
    def busy_with(self) -> Job | None:
        """The job running right now, if any."""
        return self._current

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stopping = True
            for _, _, job in self._queue:
                job.cancel_event.set()
                _settle(job.future, exc=WorkerStopped("the engine worker stopped"))
            self._queue.clear()
            if self._current is not None:
                self._cancel_locked(self._current)
            self._cv.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    # -- internals ---------------------------------------------------------------------------

    def _cancel_locked(self, job: Job) -> None:
        job.cancel_event.set()
        if job is self._current:
            if self._session is not None:
                try:
                    self._session.cancel()
                except Exception:  # cancel is best effort; the job also checks its event
                    logger.exception("session.cancel() failed")
            return
        for i, (_, _, queued) in enumerate(self._queue):
            if queued is job:
                self._queue.pop(i)
                heapq.heapify(self._queue)
                _settle(job.future, exc=JobCancelled(job.label))
                break

    def _run(self) -> None:
        try:
            cm = self._opener()
            session = cm.__enter__()
        except BaseException as exc:
            logger.error("could not open the engine session: %s", exc)
            _settle(self.ready, exc=exc)
            with self._cv:
                self._stopping = True
                for _, _, job in self._queue:
                    _settle(job.future, exc=exc)
                self._queue.clear()
            return
        self._session = session
        _settle(self.ready, result=session)
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._stopping:
                        self._cv.wait()
                    if self._stopping:
                        return
                    _, _, job = heapq.heappop(self._queue)
                    self._current = job
                outcome = self._execute(session, job)
                with self._cv:
                    self._current = None
                # Settled only once the worker is idle again: whoever awaits the job (and
                # answers the editor) must never see it still running in `busy_with`.
                if outcome is not None:
                    _settle(job.future, **outcome)
        finally:
            self._session = None
            try:
                cm.__exit__(None, None, None)
            except Exception:
                logger.exception("closing the engine session failed")

    def _execute(self, session: Session, job: Job) -> dict[str, Any] | None:
        """Run ``job``; returns how to settle its future (None: already settled)."""
        if job.future.done():
            return None
        hook = self._before_job
        if hook is not None:
            try:
                hook(session, job)
            except Exception:  # the job runs regardless; what the hook kept is only a cache
                logger.exception("before-job hook failed (job %s)", job.label)
        try:
            job.check()
            result = job.fn(session, job)
        except BaseException as exc:
            if is_engine_cancel(exc) or job.cancelled:
                if not job.cancelled:
                    logger.debug("job %s cancelled by the engine: %s", job.label, exc)
                return {"exc": JobCancelled(job.label)}
            logger.debug("job %s failed: %r", job.label, exc)
            return {"exc": exc}
        return {"result": result}


def _settle(fut: concurrent.futures.Future[Any], *, result: Any = None,
            exc: BaseException | None = None) -> None:
    """Resolve ``fut`` unless someone already cancelled it (never raise InvalidStateError)."""
    try:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except concurrent.futures.InvalidStateError:
        pass
