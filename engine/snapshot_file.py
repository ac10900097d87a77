"""The on-disk snapshot container: header (identity, tokens), backend state bytes, checksum.

Layout::

    b"CNXSNAP1" | u32 header length | header JSON | state bytes | sha256 of everything before

The header carries the ``ContextIdentity`` the state was produced under, the resident tokens,
the state length and the backend. ``read_snapshot`` verifies size and checksum and parses the
header before a caller touches any model state; writes are atomic (temp file + rename, mode 0600).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextasm.identity import ContextIdentity
from engine.errors import SnapshotCorruptError, SnapshotIncompatibleError

MAGIC = b"CNXSNAP1"
_LEN = struct.Struct("<I")
_DIGEST_LEN = 32
FORMAT_VERSION = 1
#: Temp files are ``.<name>.<random>.tmp`` beside the target, flock-ed while written.
TEMP_SUFFIX = ".tmp"


@dataclass(frozen=True)
class SnapshotPayload:
    identity: ContextIdentity
    tokens: list[int]
    state: bytes
    meta: dict[str, Any]


def write_snapshot(path: Path, payload: SnapshotPayload) -> int:
    """Write atomically with mode 0600; returns the file size in bytes."""
    header = {
        "format": FORMAT_VERSION,
        "identity": payload.identity.to_dict(),
        "tokens": payload.tokens,
        "state_len": len(payload.state),
        "meta": payload.meta,
    }
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    h = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMP_SUFFIX)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            # Held until the rename: a store sweep that can lock a temp file knows its writer
            # is gone (killed mid-save) and removes it (contextasm.store).
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            for part in (MAGIC, _LEN.pack(len(header_bytes)), header_bytes, payload.state):
                f.write(part)
                h.update(part)
            f.write(h.digest())
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path.stat().st_size


def read_snapshot(path: Path) -> SnapshotPayload:
    """Read and verify a snapshot; any damage raises ``SnapshotCorruptError``."""
    where = str(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise SnapshotCorruptError(
            f"snapshot not found: {where}", path=where, reason="missing"
        ) from None
    except OSError as exc:
        raise SnapshotCorruptError(
            f"cannot read snapshot {where}: {exc}", path=where, reason="unreadable"
        ) from None

    def corrupt(reason: str) -> SnapshotCorruptError:
        return SnapshotCorruptError(
            f"corrupt snapshot {where}: {reason}", path=where, reason=reason
        )

    head = len(MAGIC) + _LEN.size
    if len(blob) < head + _DIGEST_LEN or not blob.startswith(MAGIC):
        raise corrupt("not a contenox snapshot or truncated")
    body, digest = blob[:-_DIGEST_LEN], blob[-_DIGEST_LEN:]
    if hashlib.sha256(body).digest() != digest:
        raise corrupt("checksum mismatch (truncated or modified)")
    (header_len,) = _LEN.unpack_from(blob, len(MAGIC))
    if head + header_len > len(body):
        raise corrupt("header length out of range")
    try:
        header = json.loads(body[head : head + header_len].decode("utf-8"))
        identity = ContextIdentity.from_dict(header["identity"])
        tokens = [int(t) for t in header["tokens"]]
        state_len = int(header["state_len"])
        meta = dict(header.get("meta", {}))
        fmt = int(header["format"])
    except (ValueError, KeyError, TypeError) as exc:
        raise corrupt(f"bad header: {exc}") from None
    if fmt != FORMAT_VERSION:
        raise corrupt(f"unsupported snapshot format {fmt}")
    state = body[head + header_len :]
    if len(state) != state_len:
        raise corrupt("state length does not match header")
    return SnapshotPayload(identity=identity, tokens=tokens, state=state, meta=meta)


def check_compatible(payload: SnapshotPayload, path: Path | str, identity: ContextIdentity,
                     n_ctx: int, expect_prefix: Sequence[int] | None) -> None:
    """Raise ``SnapshotIncompatibleError`` unless a verified snapshot fits the session: made
    under the same identity, holding 1..``n_ctx`` tokens, and (given ``expect_prefix``, the
    tokens the caller's store entry is keyed by) starting with that prefix."""
    field = payload.identity.first_mismatch(identity)
    if field is not None:
        raise SnapshotIncompatibleError(
            f"snapshot {path} was made under another '{field}'", path=str(path), field=field,
            snapshot=getattr(payload.identity, field), session=getattr(identity, field),
        )
    if not payload.tokens or len(payload.tokens) > n_ctx:
        raise SnapshotIncompatibleError(
            f"snapshot {path} holds {len(payload.tokens)} tokens; context is {n_ctx}",
            path=str(path), field="n_tokens",
        )
    if expect_prefix is not None and (
        len(payload.tokens) < len(expect_prefix)
        or payload.tokens[: len(expect_prefix)] != list(expect_prefix)
    ):
        raise SnapshotIncompatibleError(
            f"snapshot {path} holds another prefix than the one it is stored for",
            path=str(path), field="tokens",
        )
