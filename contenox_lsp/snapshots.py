"""``contenox/snapshot``: save/load/list/clear stable-prefix snapshots for this workspace.

Snapshots live in a ``contextasm.SnapshotStore`` (class-first admission and eviction) keyed by
the assembly's prefix hash, so only a snapshot of exactly this prefix under this profile
identity is ever loaded. Engine calls (save/load) run as user jobs on the engine worker.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contenox_lsp.errors import ServerError
from contenox_lsp.worker import Job, JobCancelled, Priority

if TYPE_CHECKING:
    from contenox_lsp.runtime import Runtime

DEFAULT_BYTE_BUDGET = 2 * 1024**3


def store_for(rt: Runtime, session: Any) -> Any:
    from contextasm import SnapshotStore

    values = getattr(getattr(session, "profile", None), "values", {}) or {}
    base: Path
    if rt.options.snapshot_dir:
        base = Path(rt.options.snapshot_dir)
    elif values.get("cache.snapshot_dir"):
        base = Path(str(values["cache.snapshot_dir"])).expanduser()
    else:
        from platformdirs import user_cache_dir

        base = Path(user_cache_dir("contenox-lsp")) / "snapshots"
    roots = "\n".join(str(r) for r in rt.ls.roots())
    directory = base / ("lsp-" + hashlib.sha256(roots.encode()).hexdigest()[:16])
    budget = values.get("cache.snapshot_budget_bytes", DEFAULT_BYTE_BUDGET)
    return SnapshotStore(directory, int(budget))


async def handle(rt: Runtime, action: str, name: str | None) -> dict[str, Any]:
    session = await rt.session()
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

    entry = await _run(rt, fn, "snapshot save")
    if entry is None:
        return {"saved": False, "reason": "refused by the snapshot store byte budget"}
    return {"saved": True, "snapshot": entry_view(entry)}


async def _load(rt: Runtime, store: Any, assembly: Any) -> dict[str, Any]:
    entry = await asyncio.to_thread(store.find_best, assembly.identity, assembly)
    if entry is None:
        return {"loaded": False, "reason": "no compatible snapshot of this context"}

    def fn(session: Any, job: Job) -> Any:
        return session.load_snapshot(str(entry.path))

    await _run(rt, fn, "snapshot load")
    rt.prefetch.kick()
    return {"loaded": True, "snapshot": entry_view(entry)}


async def _run(rt: Runtime, fn: Any, label: str) -> Any:
    from contenox_lsp.errors import from_exception
    from contenox_lsp.runtime import RequestCancelled

    job = rt.worker.submit(fn, priority=Priority.USER, label=label)
    try:
        return await asyncio.shield(asyncio.wrap_future(job.future))
    except asyncio.CancelledError:
        rt.worker.cancel(job)
        raise
    except JobCancelled as exc:
        raise RequestCancelled(str(exc)) from exc
    except Exception as exc:
        mapped = from_exception(exc)
        if mapped is not None:
            raise mapped from exc
        raise


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
