"""On-disk store of stable-prefix snapshots with class-first admission and eviction.

The engine writes the snapshot bytes (``save_snapshot(path)``); this store decides whether a
snapshot may stay, which older ones make room, and which one a new prompt should load. Not plain
LRU: eviction takes the lowest cache class first and the least recently used within a class, and
an entry may only displace entries of its own class or lower, so a huge log snapshot (low) can
never push out the system+tools+instructions+repo-map prefix (highest/high).

Layout: ``<dir>/index.json`` (entries, use counter, recently evicted prefixes), one ``*.snap``
file per entry, ``.lock`` for cross-process locking. Files are 0600, the directory 0700, the
index is replaced atomically; a corrupt index is logged and rebuilt empty.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextasm.errors import SnapshotStoreError
from contextasm.identity import ContextIdentity
from contextasm.segments import CacheClass
from contextasm.snapshot_key import SnapshotKey

if TYPE_CHECKING:
    from contextasm.assembly import Assembly

try:  # POSIX: serialize the LSP server and a concurrent CLI `ask` on the same store
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

INDEX_NAME = "index.json"
LOCK_NAME = ".lock"
SNAPSHOT_SUFFIX = ".snap"
_TMP_PREFIX = ".tmp-"
_INDEX_VERSION = 1
_EVICTED_MEMORY = 256  # recently evicted prefix hashes kept for explain-context
_STALE_TMP_S = 3600.0
# The engine writes a snapshot into ``.<name>.<random>.tmp`` and holds an flock on it until the
# rename (engine.snapshot_file): one nobody holds is a kill -9 leftover.
_WRITER_TMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class SnapshotEntry:
    """One stored snapshot. ``path`` is absolute; ``use_seq`` orders recency (higher = newer)."""

    key: SnapshotKey
    cache_class: CacheClass
    path: Path
    size_bytes: int
    created: float
    last_used: float
    use_seq: int
    label: str = ""

    def _to_index(self) -> dict[str, Any]:
        return {
            **self.key.to_dict(),
            "cache_class": self.cache_class.value,
            "file": self.path.name,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "last_used": self.last_used,
            "use_seq": self.use_seq,
            "label": self.label,
        }


@dataclass
class _Index:
    seq: int
    entries: dict[SnapshotKey, SnapshotEntry]
    evicted: list[str]


class SnapshotStore:
    """Snapshot files under ``directory``, at most ``byte_budget`` bytes in total.

    ``clock`` (seconds) only stamps ``created``/``last_used`` for display; recency order comes
    from a counter in the index, so it never depends on clock resolution.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        byte_budget: int,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if byte_budget < 0:
            raise ValueError("byte_budget must be >= 0")
        self.directory = Path(directory)
        self.byte_budget = byte_budget
        self._clock = clock
        self._thread_lock = threading.RLock()
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.chmod(self.directory, 0o700)

    # -- queries ---------------------------------------------------------------------------

    def entries(self) -> list[SnapshotEntry]:
        """All entries, most valuable first (class, then most recently used)."""
        with self._locked() as index:
            return sorted(index.entries.values(), key=lambda e: (-e.cache_class.rank, -e.use_seq))

    def total_bytes(self) -> int:
        with self._locked() as index:
            return sum(e.size_bytes for e in index.entries.values())

    def get(self, key: SnapshotKey) -> SnapshotEntry | None:
        with self._locked() as index:
            return index.entries.get(key)

    def evicted_prefix_hashes(self) -> frozenset[str]:
        """Prefix hashes of recently evicted snapshots (explain shows those as ``evicted``)."""
        with self._locked() as index:
            return frozenset(index.evicted)

    def find_best(
        self, identity: ContextIdentity, assembly: Assembly, *, touch: bool = True
    ) -> SnapshotEntry | None:
        """The stored snapshot covering the longest prefix of ``assembly`` at a segment boundary.

        Only entries with ``identity``'s digest and a prefix hash equal to one of the assembly's
        segment prefix hashes qualify, so an incompatible snapshot is never returned. ``touch``
        marks the result as used (pass False for read-only views such as explain-context).
        """
        digest = identity.digest()
        if digest != assembly.manifest.identity_digest:
            logger.warning("find_best: identity differs from the assembly's; nothing reusable")
            return None
        boundaries = {s.prefix_hash: s.token_end for s in assembly.segments if s.n_tokens > 0}
        with self._locked() as index:
            best: SnapshotEntry | None = None
            for entry in index.entries.values():
                key = entry.key
                if key.identity_digest != digest or boundaries.get(key.prefix_hash) != key.n_tokens:
                    continue
                if best is None or key.n_tokens > best.key.n_tokens:
                    best = entry
            if best is not None and touch:
                best = self._touch_locked(index, best)
                self._save(index)
            return best

    # -- updates ---------------------------------------------------------------------------

    def touch(self, key: SnapshotKey) -> SnapshotEntry | None:
        """Mark ``key`` as just used (None when absent)."""
        with self._locked() as index:
            entry = index.entries.get(key)
            if entry is None:
                return None
            entry = self._touch_locked(index, entry)
            self._save(index)
            return entry

    def remove(self, key: SnapshotKey) -> bool:
        with self._locked() as index:
            entry = index.entries.pop(key, None)
            if entry is None:
                return False
            _unlink(entry.path)
            self._save(index)
            return True

    def put(
        self,
        key: SnapshotKey,
        cache_class: CacheClass,
        write: Callable[[Path], None],
        *,
        label: str = "",
    ) -> SnapshotEntry | None:
        """Store a snapshot written by ``write(path)``; None when admission refuses it.

        An entry may evict only entries of its class or lower (lowest class first, least
        recently used within a class). If that cannot free enough bytes, or the snapshot alone
        exceeds the budget, the new snapshot is refused and its file removed. An existing key
        is not rewritten, only marked used. Exceptions from ``write`` propagate (after cleanup).
        """
        with self._locked() as index:
            existing = index.entries.get(key)
            if existing is not None:
                entry = self._touch_locked(index, existing)
                self._save(index)
                return entry
        # Write outside the lock: a large snapshot must not block other readers.
        tmp = self.directory / f"{_TMP_PREFIX}{uuid.uuid4().hex}{SNAPSHOT_SUFFIX}"
        try:
            write(tmp)
            if not tmp.is_file():
                raise SnapshotStoreError(
                    "snapshot writer did not create its file", data={"path": str(tmp)}
                )
            os.chmod(tmp, 0o600)
            size = tmp.stat().st_size
        except BaseException:
            _unlink(tmp)
            raise
        with self._locked() as index:
            victims = self._admit(index, key, cache_class, size)
            if victims is None:
                _unlink(tmp)
                logger.info(
                    "snapshot %s (%s, %d bytes) refused: budget %d bytes",
                    key.prefix_hash[:12],
                    cache_class.value,
                    size,
                    self.byte_budget,
                )
                return None
            for victim in victims:
                index.entries.pop(victim.key, None)
                _unlink(victim.path)
                index.evicted = ([*index.evicted, victim.key.prefix_hash])[-_EVICTED_MEMORY:]
                logger.info(
                    "snapshot %s (%s, %d bytes) evicted for %s (%s)",
                    victim.key.prefix_hash[:12],
                    victim.cache_class.value,
                    victim.size_bytes,
                    key.prefix_hash[:12],
                    cache_class.value,
                )
            final = self.directory / _file_name(key)
            os.replace(tmp, final)
            index.seq += 1
            now = self._clock()
            entry = SnapshotEntry(key, cache_class, final, size, now, now, index.seq, label)
            index.entries[key] = entry
            if key.prefix_hash in index.evicted:
                index.evicted.remove(key.prefix_hash)
            self._save(index)
            return entry

    # -- policy ----------------------------------------------------------------------------

    def _admit(
        self, index: _Index, key: SnapshotKey, cache_class: CacheClass, size: int
    ) -> list[SnapshotEntry] | None:
        """Entries to evict so ``size`` more bytes fit, or None when admission is refused."""
        if size > self.byte_budget:
            return None
        used = sum(e.size_bytes for e in index.entries.values() if e.key != key)
        need = used + size - self.byte_budget
        if need <= 0:
            return []
        candidates = sorted(
            (
                e
                for e in index.entries.values()
                if e.key != key and e.cache_class.rank <= cache_class.rank
            ),
            key=lambda e: (e.cache_class.rank, e.use_seq),
        )
        victims: list[SnapshotEntry] = []
        for entry in candidates:
            if need <= 0:
                break
            victims.append(entry)
            need -= entry.size_bytes
        return victims if need <= 0 else None

    def _touch_locked(self, index: _Index, entry: SnapshotEntry) -> SnapshotEntry:
        index.seq += 1
        updated = SnapshotEntry(
            entry.key,
            entry.cache_class,
            entry.path,
            entry.size_bytes,
            entry.created,
            self._clock(),
            index.seq,
            entry.label,
        )
        index.entries[entry.key] = updated
        return updated

    # -- index I/O -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Index]:
        with self._thread_lock:
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield self._load()
            finally:
                os.close(fd)  # closing releases the flock

    def _load(self) -> _Index:
        path = self.directory / INDEX_NAME
        index = _Index(seq=0, entries={}, evicted=[])
        corrupt = False
        if path.exists():
            try:
                index = _parse_index(json.loads(path.read_text(encoding="utf-8")), self.directory)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                logger.warning("snapshot index %s is corrupt (%s); rebuilding it empty", path, exc)
                corrupt = True
        # Entries whose file vanished are dropped; files no entry owns are removed.
        missing = [k for k, e in index.entries.items() if not e.path.is_file()]
        for k in missing:
            logger.warning("snapshot file %s is missing; dropping its entry", index.entries[k].path)
            del index.entries[k]
        owned = {e.path.name for e in index.entries.values()}
        now = time.time()
        for f in self.directory.iterdir():
            if f.name.startswith(".") and f.name.endswith(_WRITER_TMP_SUFFIX):
                if _writer_gone(f):
                    logger.info("removing %s, left by a snapshot writer that died", f)
                    _unlink(f)
            elif f.name.startswith(_TMP_PREFIX):
                with contextlib.suppress(OSError):
                    if now - f.stat().st_mtime > _STALE_TMP_S:
                        _unlink(f)  # a writer that died long ago
            elif f.suffix == SNAPSHOT_SUFFIX and f.name not in owned:
                logger.info("removing unindexed snapshot file %s", f)
                _unlink(f)
        if corrupt or missing:
            self._save(index)
        return index

    def _save(self, index: _Index) -> None:
        data = {
            "version": _INDEX_VERSION,
            "seq": index.seq,
            "entries": [e._to_index() for e in sorted(index.entries.values(), key=lambda e: e.key)],
            "evicted": index.evicted,
        }
        blob = json.dumps(data, sort_keys=True, indent=1).encode("utf-8")
        _atomic_write(self.directory / INDEX_NAME, blob)


def _file_name(key: SnapshotKey) -> str:
    return f"{key.prefix_hash}-{key.n_tokens}{SNAPSHOT_SUFFIX}"


def _parse_index(data: Any, directory: Path) -> _Index:
    if not isinstance(data, dict) or data.get("version") != _INDEX_VERSION:
        raise ValueError("unknown index version")
    seq = data["seq"]
    if not isinstance(seq, int) or not isinstance(data["entries"], list):
        raise ValueError("malformed index")
    entries: dict[SnapshotKey, SnapshotEntry] = {}
    for raw in data["entries"]:
        key = SnapshotKey(
            str(raw["identity_digest"]), str(raw["prefix_hash"]), int(raw["n_tokens"])
        )
        name = str(raw["file"])
        if name != _file_name(key):  # never follow a path the index was tampered into
            raise ValueError(f"entry file name {name!r} does not match its key")
        entries[key] = SnapshotEntry(
            key=key,
            cache_class=CacheClass(raw["cache_class"]),
            path=directory / name,
            size_bytes=int(raw["size_bytes"]),
            created=float(raw["created"]),
            last_used=float(raw["last_used"]),
            use_seq=int(raw["use_seq"]),
            label=str(raw.get("label", "")),
        )
    evicted = [str(h) for h in data.get("evicted", [])]
    return _Index(seq=seq, entries=entries, evicted=evicted)


def _atomic_write(path: Path, blob: bytes) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}.json")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _writer_gone(path: Path) -> bool:
    """Whether no process holds the writer's lock on ``path`` (so it is safe to remove)."""
    if fcntl is None:  # pragma: no cover - non-POSIX: fall back to age
        with contextlib.suppress(OSError):
            return time.time() - path.stat().st_mtime > _STALE_TMP_S
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a live writer holds it
    finally:
        os.close(fd)
    return True
