"""``contenox/snapshot`` (save/load/list/clear) on the server's runtime.

Snapshots live in a ``contextasm.SnapshotStore`` (class-first admission and eviction) keyed by
the assembly's prefix hash, so only a snapshot of exactly this prefix under this profile
identity is ever loaded. Engine calls (save/load) run as user jobs on the engine worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from contenox_lsp.errors import ServerError
from contenox_lsp.options import ServerOptions
from contenox_lsp.runtime.idle_prefill import IdlePrefill
from contenox_lsp.runtime.snapshot_store import load_entry, snapshot_writer, workspace_store
from contenox_lsp.runtime.worker import Job
from contenox_lsp.views import snapshot_entry_view
from contextasm import Assembly, SnapshotEntry, SnapshotStore
from engine import Session

T = TypeVar("T")


class SnapshotHost(Protocol):
    """What the snapshot actions need of the runtime (injected: this module does not import
    it)."""

    options: ServerOptions
    roots: Callable[[], list[Path]]
    idle: IdlePrefill

    async def session(self) -> Session: ...
    async def assemble_idle(self) -> Assembly: ...
    def resident_tokens(self) -> list[int]: ...
    async def run_user_job(self, fn: Callable[[Session, Job], T], label: str) -> T: ...


async def handle(rt: SnapshotHost, action: str, name: str | None) -> dict[str, Any]:
    session = await rt.session()
    if action in ("save", "load") and not session.capabilities.get("snapshots", False):
        # Refused before touching the store: nothing is created, nothing changes.
        raise ServerError(
            "unsupported_capability",
            f"the {session.backend} backend cannot save or load KV snapshots",
            {"capability": "snapshots", "backend": session.backend, "action": action},
        )
    store = await asyncio.to_thread(workspace_store, rt.options.snapshot_dir, rt.roots(),
                                    session)
    if action == "list":
        entries = await asyncio.to_thread(store.entries)
        return {"snapshots": [snapshot_entry_view(e) for e in entries]}
    if action == "clear":
        def clear() -> int:
            return sum(1 for e in store.entries() if store.remove(e.key))

        return {"removed": await asyncio.to_thread(clear)}
    assembly = await rt.assemble_idle()
    if action == "save":
        return await _save(rt, store, assembly, name or "")
    return await _load(rt, store, assembly)


async def _save(rt: SnapshotHost, store: SnapshotStore, assembly: Assembly,
                label: str) -> dict[str, Any]:
    resident = rt.resident_tokens()
    reused, _ = assembly.reuse_against_resident(resident, assembly.identity)
    # The longest segment boundary that is fully resident (prefer the stable region's end).
    n = 0
    for seg in assembly.segments:
        if seg.token_end <= reused and seg.kind.value != "user":
            n = seg.token_end
    if n == 0:
        raise ServerError("invalid_session_state",
                          "nothing of the current context is resident yet; nothing to save")
    key = assembly.prefix_key(n)
    cache_class = assembly.prefix_class(n)

    def fn(session: Session, job: Job) -> SnapshotEntry | None:
        return store.put(key, cache_class, snapshot_writer(session),
                         label=label or f"{n} tokens")

    entry = await rt.run_user_job(fn, "snapshot save")
    if entry is None:
        return {"saved": False, "reason": "refused by the snapshot store byte budget"}
    return {"saved": True, "snapshot": snapshot_entry_view(entry)}


async def _load(rt: SnapshotHost, store: SnapshotStore, assembly: Assembly) -> dict[str, Any]:
    entry = await asyncio.to_thread(store.find_best, assembly.identity, assembly)
    if entry is None:
        return {"loaded": False, "reason": "no compatible snapshot of this context"}
    found = entry

    def fn(session: Session, job: Job) -> None:
        load_entry(session, store, found, assembly.tokens)

    await rt.run_user_job(fn, "snapshot load")
    rt.idle.kick()
    return {"loaded": True, "snapshot": snapshot_entry_view(found)}
