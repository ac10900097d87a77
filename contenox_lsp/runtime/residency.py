"""What is resident in the KV cache besides the chat prefix, and who may change it.

The chat prefix (the idle prefill's target, asks) owns the live sequence by default. Other
prefixes — the inline completion's, the next edit's — are *registered* here: a branch name,
the label of their user jobs and an idle warm-up. A user job of one of them *claims* the live
sequence (the chat prefix is parked first, when it is the live one); before a job of any
other kind runs, the claimed prefix is parked as its branch, so no prefix evicts another's
(``before_job``). Back-to-back jobs of the same kind skip the copy: each finds the previous one
live. In idle time, once the chat prefix is warm, the registered warm-ups run in registration
order (``after_warm``): each prefills its prompt up to the volatile part, parks it as its
branch and gives the live sequence back to the chat prefix. Adding a resident prefix is one
``register`` call.

Threads: ``register`` runs on the event-loop thread before any job; ``claim`` and
``before_job`` run on the engine thread (inside jobs, and as the worker's hook before each
job), which is the only writer of ``live``; ``after_warm`` runs on the loop thread and returns
work for the engine thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contenox_lsp.runtime.jobs import BACKGROUND_STEP, chunked_prefill
from contenox_lsp.runtime.worker import Job
from contextasm.manifest import common_prefix_length
from engine import Session

CHAT_BRANCH = "chat"

EngineStep = Callable[[Session, Job], None]


@dataclass(frozen=True)
class ResidentPrefix:
    branch: str  # the branch it is parked as
    label: str  # the label of its user jobs (EngineWorker job labels)
    warm_up: Callable[[], EngineStep | None]  # its idle warm-up, None when nothing to do


class Residency:
    def __init__(self) -> None:
        self._prefixes: dict[str, ResidentPrefix] = {}
        self.live: ResidentPrefix | None = None
        """The registered prefix that holds the live sequence and is not parked yet (engine
        thread only); None: the chat prefix's, or parked already."""

    def register(self, branch: str, label: str,
                 warm_up: Callable[[], EngineStep | None]) -> None:
        if branch in self._prefixes or branch == CHAT_BRANCH:
            raise ValueError(f"resident prefix {branch!r} is registered already")
        self._prefixes[branch] = ResidentPrefix(branch, label, warm_up)

    @property
    def branches(self) -> tuple[str, ...]:
        """The registered branches, in warm-up order (the chat branch not included)."""
        return tuple(self._prefixes)

    def claim(self, session: Session, branch: str, chat_target: list[int] | None) -> None:
        """Engine thread, at the start of a user job of ``branch``: it takes the live sequence
        over (the chat prefix is kept as its branch when it is the live one). Parked only when
        a job of another kind comes (a branch save copies the whole KV stream, 40-50 ms a
        keystroke on 2 cores)."""
        park_chat(session, chat_target)
        self.live = self._prefixes[branch]

    def before_job(self, session: Session, job: Job) -> None:
        """The worker's hook before each job (engine thread): park the live prefix as its
        branch unless the job is of its own kind."""
        live = self.live
        if live is None or job.label == live.label:
            return
        self.live = None
        park_live_as(session, live.branch)

    def after_warm(self) -> EngineStep | None:
        """The idle prefill's work once the chat prefix is warm: every registered warm-up that
        has something to do, in registration order (None when none has)."""
        steps = [step for p in self._prefixes.values() if (step := p.warm_up()) is not None]
        if not steps:
            return None

        def run(session: Session, job: Job) -> None:
            for step in steps:
                step(session, job)

        return run


def park_live_as(session: Session, branch: str) -> None:
    """Save the live sequence as ``branch`` (where the backend has branches and something is
    resident)."""
    if session.capabilities.get("branches", False) and session.n_resident > 0:
        session.branch_save(branch)


def warm_branch(session: Session, job: Job, tokens: list[int], branch: str,
                chat_target: list[int]) -> None:
    """An idle warm-up (engine thread): park the chat prefix, prefill ``tokens`` as
    background work, keep them as ``branch``, and give the live sequence back to the chat
    prefix (restored from its parked branch)."""
    park_chat(session, chat_target)
    chunked_prefill(session, tokens, job, lambda _pos: None, step=BACKGROUND_STEP)
    session.branch_save(branch)
    chunked_prefill(session, chat_target, job, lambda _pos: None)


def park_chat(session: Session, chat_target: list[int] | None) -> None:
    """Keep the chat prefix resident as a branch before another prefix replaces the live
    sequence (only when the live sequence is the chat prefix)."""
    if not chat_target or not session.capabilities.get("branches", False):
        return
    resident = session.resident_tokens
    if common_prefix_length(resident, chat_target) >= min(len(chat_target), 64):
        session.branch_save(CHAT_BRANCH)
