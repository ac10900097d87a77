"""``contenox/snapshot``: save/load/list/clear stable-prefix snapshots for this workspace.

Snapshots live in a ``contextasm.SnapshotStore`` (class-first admission and eviction) keyed by
the assembly's prefix hash, so only a snapshot of exactly this prefix under this profile
identity is ever loaded. Engine calls (save/load) run as user jobs on the engine worker.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contenox_lsp.errors import ServerError
from contenox_lsp.worker import Job
from engine.errors import SnapshotCorruptError, SnapshotIncompatibleError

if TYPE_CHECKING:
    from contenox_lsp.runtime import Runtime

def store_for(rt: Runtime, session: Any) -> Any:
    """This workspace's store: ``snapshotDir`` if set, else as the CLI's ``ask`` keeps it."""
    from contenox_lsp.workspace_session import snapshot_store

    base = Path(rt.options.snapshot_dir) if rt.options.snapshot_dir else None
    return snapshot_store(session.profile, list(rt.ls.roots()), base)


async def handle(rt: Runtime, action: str, name: str | None) -> dict[str, Any]:
    session = await rt.session()
    if action in ("save", "load") and not session.capabilities.get("snapshots", False):
        # Refused before touching the store: nothing is created, nothing changes.
        raise ServerError(
            "unsupported_capability",
            f"the {session.backend} backend cannot save or load KV snapshots",
            {"capability": "snapshots", "backend": session.backend, "action": action},
        )
    store = await asyncio.to_thread(store_for, rt, session)
    if action == "list":
        return {"snapshots": [entry_view(e) for e in await asyncio.to_thread(store.entries)]}
    if action == "clear":
        def clear() -> int:
            return sum(1 for e in store.entries() if store.remove(e.key))

        return {"removed": await asyncio.to_thread(clear)}
    assembly = await rt.assemble_idle()
    if action == "save":
        return await _save(rt, store, assembly, name or "")
    return await _load(rt, store, assembly)


async def _save(rt: Runtime, store: Any, assembly: Any, label: str) -> dict[str, Any]:
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

    def fn(session: Any, job: Job) -> Any:
        return store.put(key, cache_class, lambda p: session.save_snapshot(str(p)),
                         label=label or f"{n} tokens")

    entry = await rt.run_user_job(fn, "snapshot save")
    if entry is None:
        return {"saved": False, "reason": "refused by the snapshot store byte budget"}
    return {"saved": True, "snapshot": entry_view(entry)}


async def _load(rt: Runtime, store: Any, assembly: Any) -> dict[str, Any]:
    entry = await asyncio.to_thread(store.find_best, assembly.identity, assembly)
    if entry is None:
        return {"loaded": False, "reason": "no compatible snapshot of this context"}

    def fn(session: Any, job: Job) -> Any:
        # The file must hold the prefix its entry is keyed by (a swapped file is refused).
        try:
            return session.load_snapshot(
                str(entry.path), expect_prefix=assembly.tokens[: entry.key.n_tokens]
            )
        except (SnapshotCorruptError, SnapshotIncompatibleError):
            store.remove(entry.key)  # refused once, refused forever: do not offer it again
            raise

    await rt.run_user_job(fn, "snapshot load")
    rt.prefetch.kick()
    return {"loaded": True, "snapshot": entry_view(entry)}


def entry_view(e: Any) -> dict[str, Any]:
    return {
        "prefixHash": e.key.prefix_hash,
        "tokens": e.key.n_tokens,
        "cacheClass": e.cache_class.value,
        "bytes": e.size_bytes,
        "label": e.label,
        "created": e.created,
        "lastUsed": e.last_used,
        "path": str(e.path),
    }
