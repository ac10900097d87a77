"""The engine worker as the event loop uses it: the loaded session awaited, user jobs run and
awaited, engine and assembly errors as structured ServerErrors, a cancelled await cancelling
its job. The runtime and the feature services share one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from contenox_lsp.errors import RequestCancelled, ServerError, from_exception
from contenox_lsp.runtime.worker import EngineWorker, Job, JobCancelled, Priority, WorkerStopped
from engine import Session

T = TypeVar("T")


@contextmanager
def structured_errors() -> Iterator[None]:
    """Engine and assembly errors (anything with a stable ``code``) become ServerErrors."""
    try:
        yield
    except ServerError:
        raise
    except Exception as exc:
        mapped = from_exception(exc)
        if mapped is not None:
            raise mapped from exc
        raise


class EngineAccess:
    def __init__(self, worker: EngineWorker) -> None:
        self.worker = worker

    async def session(self) -> Session:
        try:
            # shield: a cancelled request must not cancel the shared "model loaded" future.
            with structured_errors():
                return await asyncio.shield(asyncio.wrap_future(self.worker.ready))
        except ServerError:
            raise
        except Exception as exc:
            raise ServerError("engine_unavailable", f"model session unavailable: {exc}") from exc

    async def run_user_job(self, fn: Callable[[Session, Job], T], label: str) -> T:
        """Run ``fn(session, job)`` on the engine thread at user priority and await it.

        Cancelling the awaiting task cancels the job (within one batch/token) and surfaces as
        RequestCancelled; engine and assembly errors become structured ServerErrors.
        """
        job = self.worker.submit(fn, priority=Priority.USER, label=label)
        future: asyncio.Future[T] = asyncio.wrap_future(job.future)
        try:
            with structured_errors():
                return await asyncio.shield(future)
        except asyncio.CancelledError:
            self.worker.cancel(job)
            # Nobody awaits the job now: take its JobCancelled, or asyncio logs "Future
            # exception was never retrieved".
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        except JobCancelled as exc:
            raise RequestCancelled(str(exc)) from exc
        except WorkerStopped as exc:
            raise ServerError("engine_unavailable", str(exc)) from exc

    def busy_with_user(self, *except_labels: str) -> bool:
        """Whether a user job (an ask, a request) other than ``except_labels`` is running."""
        busy = self.worker.busy_with
        return (busy is not None and busy.priority == Priority.USER
                and busy.label not in except_labels)
