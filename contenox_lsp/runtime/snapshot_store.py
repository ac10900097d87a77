"""The snapshot store of one workspace, shared by both doors (CLI and server).

Snapshots live in a ``contextasm.SnapshotStore`` (class-first admission and eviction) keyed by
the assembly's prefix hash, so only a snapshot of exactly this prefix under this profile
identity is ever loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from contextasm import SnapshotEntry, SnapshotStore
from engine import Profile, Session
from engine.errors import SnapshotCorruptError, SnapshotIncompatibleError
from engine.model_files import cache_dir


def snapshot_store(
    profile: Profile, roots: Path | Sequence[Path], base: Path | None = None
) -> SnapshotStore:
    """One store per workspace (keyed by its root folders), under ``base``, else the profile's
    ``cache.snapshot_dir``, else ``<cache dir>/snapshots``. The CLI and the language server
    use the same store for the same folders, and assemble the same prefixes through
    ``contenox_lsp.turn``: a prefix one of them saved is found by the other."""
    if base is None:
        configured = str(profile.get("cache.snapshot_dir"))
        base = profile.resolve_path(configured) if configured else cache_dir() / "snapshots"
    return SnapshotStore(base / workspace_key(roots),
                         int(profile.get("cache.snapshot_budget_bytes")))


def load_entry(session: Session, store: SnapshotStore, entry: SnapshotEntry,
               prompt: Sequence[int]) -> None:
    """Load ``entry`` into ``session`` (engine thread). The file must hold the prefix of
    ``prompt`` its entry is keyed by (a swapped file is refused); a refused file is removed
    from the store, so it is never offered again, and the error re-raised."""
    try:
        session.load_snapshot(str(entry.path), expect_prefix=prompt[: entry.key.n_tokens])
    except (SnapshotCorruptError, SnapshotIncompatibleError):
        store.remove(entry.key)
        raise


def workspace_key(roots: Path | Sequence[Path]) -> str:
    """The folder name of one workspace (its root folders) in per-workspace caches."""
    folders = [roots] if isinstance(roots, Path) else list(roots)
    return hashlib.sha256("\n".join(str(r) for r in folders).encode()).hexdigest()[:16]


def conversations_dir(roots: Sequence[Path]) -> Path:
    """Where this workspace's conversations are kept: ``<cache dir>/conversations/<key>``,
    beside the snapshots (and kept on backends without snapshots too)."""
    return cache_dir() / "conversations" / workspace_key(roots)


def snapshot_writer(session: Session) -> Callable[[Path], None]:
    """The store's writer for the session's current state (the store picks the path)."""

    def write(path: Path) -> None:
        session.save_snapshot(str(path))

    return write


def workspace_store(snapshot_dir: str | None, roots: Sequence[Path],
                    session: Session) -> SnapshotStore:
    """The server's store for this workspace: ``snapshotDir`` if set, else the one the CLI's
    ``ask`` uses."""
    return snapshot_store(session.profile, roots, Path(snapshot_dir) if snapshot_dir else None)
