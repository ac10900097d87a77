"""Automatic stable-prefix snapshots: warm across restarts without asking.

The idle prefill (``idle_prefill.IdlePrefill``) calls this at three points:

- ``restore(assembly)`` before it prefills (and so does every ask): when the store holds a
  snapshot of a longer prefix of the assembly than the live sequence shares with it (at
  start-up: anything), it is loaded instead of re-prefilled (tens of milliseconds, not
  seconds). A corrupt or
  incompatible file is removed, reported in ``contenox/status``, and costs a cold prefill.
- ``checkpoint(assembly)``: when the stable prefix (segments A–F, ``stable_end``) is not saved
  yet and must be prefilled, the idle prefill stops at ``stable_end`` first and calls
  ``save(assembly)``, so the file holds exactly the stable prefix (llama.cpp keeps only the
  sliding window of a restored state: a snapshot can be extended, never rolled back into, so
  it must hold no volatile tail). When exactly the stable prefix is resident and unsaved (a
  keystroke cancelled the step that would have saved it), the next idle prefill saves it
  before it moves on. Saves are as rare as fresh prefills of a new stable prefix,
  each of which costs far more than the save.
- ``save_at_shutdown()``: when the stable prefix is resident but was never saved (a save was
  preempted), it is saved on shutdown, within a bounded time.

A prefix the store refused (larger than its byte budget) is not written again by this process.

Saves and loads run as background jobs on the engine worker, so a user request preempts the
prefill around them and waits at most for one save (a single file write).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from contenox_lsp.runtime.snapshot_store import load_entry, snapshot_writer
from contenox_lsp.runtime.worker import EngineWorker, Job, JobCancelled, Priority
from contextasm import Assembly, SnapshotKey, SnapshotStore
from contextasm.manifest import common_prefix_length
from engine import Session
from engine.errors import EngineError

logger = logging.getLogger(__name__)

#: How long shutdown waits for its save.
SHUTDOWN_SAVE_TIMEOUT_S = 5.0

StoreFor = Callable[[Session], SnapshotStore]


class AutoSnapshots:
    def __init__(self, worker: EngineWorker, store_for: StoreFor, *, enabled: bool) -> None:
        self._worker = worker
        self._store_for = store_for
        self._enabled = enabled
        self._store: SnapshotStore | None = None
        self._last: Assembly | None = None
        self.restored: dict[str, Any] | None = None
        """The last snapshot restored: ``{tokens, ageS, label}``."""
        self.saved: dict[str, Any] | None = None
        """The last snapshot saved: ``{tokens, label}``."""
        self.skipped: str | None = None
        """Why the last restore or save was skipped (a corrupt file, a refusal), if it was."""
        self._refused: set[SnapshotKey] = set()
        """Prefixes the store refused (too large for its byte budget): not written again."""

    def active(self, session: Session | None) -> bool:
        return (self._enabled and session is not None
                and bool(session.capabilities.get("snapshots", False))
                and bool(session.profile.get("cache.auto_snapshots")))

    def store(self, session: Session) -> SnapshotStore:
        if self._store is None:
            self._store = self._store_for(session)
        return self._store

    def forget_store(self) -> None:
        """The workspace folders changed: the next call opens their store."""
        self._store = None

    def view(self) -> dict[str, Any]:
        return {"auto": self.active(self._worker.session), "restored": self.restored,
                "lastSaved": self.saved, "skipped": self.skipped}

    # -- restore -------------------------------------------------------------------------------

    async def restore(self, assembly: Assembly,
                      priority: Priority = Priority.BACKGROUND) -> None:
        """Load the best snapshot of ``assembly`` if it covers more than the live sequence
        shares with it (an ask right after start-up passes ``Priority.USER``)."""
        session = self._worker.session
        if not self.active(session) or assembly.stable_end == 0:
            return
        assert session is not None
        store = self.store(session)
        # Looked up on every idle kick and every ask: mark it used only when it is loaded.
        entry = await asyncio.to_thread(
            lambda: store.find_best(assembly.identity, assembly, touch=False))
        shared = common_prefix_length(session.resident_tokens, assembly.tokens)
        if entry is None or entry.key.n_tokens <= shared:
            return
        found = entry

        def load(session: Session, job: Job) -> None:
            job.check()
            load_entry(session, store, found, assembly.tokens)
            store.touch(found.key)

        try:
            await asyncio.wrap_future(self._worker.submit(
                load, priority=priority, label="snapshot restore").future)
        except JobCancelled:
            return
        except EngineError as exc:
            self.skipped = f"snapshot {found.path.name} skipped: {exc}"
            logger.warning("%s", self.skipped)
            return
        self.restored = {"tokens": found.key.n_tokens,
                         "ageS": round(max(0.0, time.time() - found.created), 1),
                         "label": found.label}
        logger.info("restored %d tokens from snapshot %s", found.key.n_tokens, found.label)

    # -- save ----------------------------------------------------------------------------------

    async def checkpoint(self, assembly: Assembly) -> int | None:
        """``stable_end`` when the idle prefill should stop there and save; None otherwise."""
        session = self._worker.session
        n = assembly.stable_end
        if not self.active(session) or n == 0:
            return None
        assert session is not None
        resident = session.resident_tokens
        shared = common_prefix_length(resident, assembly.tokens)
        if shared > n or (shared == n and len(resident) > n):
            return None  # already past it: saved, or saved at shutdown
        # Exactly the stable prefix resident and unsaved (a keystroke cancelled the step that
        # would have saved it): save it now, before the prefill moves on.
        key = assembly.prefix_key(n)
        if key in self._refused:
            return None  # refused once: every later kick would write it again for nothing
        store = self.store(session)
        if await asyncio.to_thread(store.get, key) is not None:
            return None
        return n

    async def save(self, assembly: Assembly) -> None:
        """Save the stable prefix if it is exactly what is resident (a background job)."""
        self._last = assembly
        try:
            await asyncio.wrap_future(self._worker.submit(
                self._save_job(assembly, exact=True), priority=Priority.BACKGROUND,
                label="snapshot save").future)
        except JobCancelled:
            pass
        except EngineError as exc:
            self.skipped = f"snapshot save skipped: {exc}"
            logger.warning("%s", self.skipped)
            if exc.code == "unsupported_capability":  # refused for good (a sliding window)
                self._refused.add(assembly.prefix_key(assembly.stable_end))

    def remember(self, assembly: Assembly) -> None:
        """The assembly whose stable prefix shutdown should save if it is still unsaved."""
        self._last = assembly

    def save_at_shutdown(self) -> None:
        """On the caller's thread (the loop is stopping): save the stable prefix of the last
        assembly when it is resident and unsaved, waiting at most SHUTDOWN_SAVE_TIMEOUT_S."""
        assembly, session = self._last, self._worker.session
        if assembly is None or not self.active(session) or not self._worker.started:
            return
        assert session is not None
        n = assembly.stable_end
        if n == 0 or common_prefix_length(session.resident_tokens, assembly.tokens) < n:
            return
        key = assembly.prefix_key(n)
        if key in self._refused or self.store(session).get(key) is not None:
            return
        self._worker.cancel_background()
        job = self._worker.submit(self._save_job(assembly, exact=False),
                                  priority=Priority.USER, label="snapshot save (shutdown)")
        try:
            job.future.result(SHUTDOWN_SAVE_TIMEOUT_S)
        except Exception as exc:
            logger.warning("snapshot save at shutdown skipped: %r", exc)

    def _save_job(self, assembly: Assembly, *, exact: bool) -> Callable[[Session, Job], None]:
        n = assembly.stable_end
        key = assembly.prefix_key(n)
        stable = assembly.tokens[:n]

        def fn(session: Session, job: Job) -> None:
            job.check()
            resident = session.resident_tokens
            if resident[:n] != stable:
                return  # the live sequence moved on; the next prefill checkpoints again
            if len(resident) != n:
                if exact:
                    return
                session.prefill(stable, identity=session.identity)  # a roll-back: no compute
            store = self.store(session)
            entry = store.put(key, assembly.prefix_class(n), snapshot_writer(session),
                              label=f"auto: stable prefix, {n} tokens")
            if entry is None:
                self.skipped = "snapshot save refused by the store's byte budget"
                self._refused.add(key)
                return
            self.saved = {"tokens": n, "label": entry.label}
            logger.info("saved the stable prefix (%d tokens) as a snapshot", n)

        return fn
