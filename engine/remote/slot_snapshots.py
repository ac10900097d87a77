"""Snapshots of a llama-server slot: the KV state stays on the server, the local file names it.

llama-server saves a slot's cached prompt (its KV cells and tokens) with
``POST /slots/{id}?action=save {filename}`` into the directory it was started with
(``--slot-save-path``) and loads it back with ``action=restore``; without that option both
answer 501. The session's snapshot file (``engine.snapshot_file``: identity, tokens, checksum)
holds, as its state, a small JSON reference to the server's file instead of the KV bytes: the
identity and token checks run locally before the server is asked for anything, and a restore
must give back exactly the tokens the save reported, else the snapshot is corrupt.

The server's file name is derived from the identity and the tokens (content-addressed): two
developers on one server with the same prefix share one file, and nothing a client sends can
name a path outside the server's directory (llama-server also refuses such names).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextasm.identity import ContextIdentity
from engine.errors import RemoteError, SnapshotCorruptError
from engine.remote.client import ServerClient
from engine.results import SnapshotResult
from engine.snapshot_file import (
    SnapshotPayload,
    check_compatible,
    read_snapshot,
    write_snapshot,
)

#: ``state`` of a slot snapshot starts with this (the in-process engine's state is raw KV).
STATE_KIND = "llama-server-slot-file"


def slot_actions_enabled(client: ServerClient, slot: int) -> bool:
    """Whether the server takes slot save/restore (started with ``--slot-save-path``).

    A POST to the slot without an action does nothing either way: it is answered
    "Invalid action" (400) when slot actions are on and "not supported" (501) when off."""
    try:
        client.post(f"/slots/{slot}", {})
    except RemoteError as exc:
        return exc.data.get("status") == 400
    return False


def server_file_name(identity: ContextIdentity, tokens: Sequence[int]) -> str:
    h = hashlib.sha256(identity.digest().encode())
    h.update(json.dumps(list(tokens), separators=(",", ":")).encode())
    return f"contenox-{h.hexdigest()[:40]}.bin"


@dataclass(frozen=True)
class Restored:
    """What a restore put into the slot: the session's resident prompt, and how many tokens
    the slot holds (the prompt, plus generated tokens the save had)."""

    tokens: list[int]
    slot_tokens: int
    meta: dict[str, Any]
    result: SnapshotResult


def save(client: ServerClient, slot: int, path: Path, identity: ContextIdentity,
         tokens: Sequence[int], meta: dict[str, Any]) -> SnapshotResult:
    """Save the slot on the server and write the local snapshot that names the file."""
    t0 = time.perf_counter()
    name = server_file_name(identity, tokens)
    answer = client.post(f"/slots/{slot}?action=save", {"filename": name})
    n_saved = int(answer.get("n_saved", -1))
    if n_saved < len(tokens):
        raise RemoteError(
            f"the server saved {n_saved} tokens of slot {slot}, this session holds "
            f"{len(tokens)} there: another client used the slot", url=client.base_url,
            slot=slot, n_saved=n_saved, tokens=len(tokens),
        )
    state = {"kind": STATE_KIND, "file": name, "url": client.base_url, "n_saved": n_saved,
             "server_bytes": int(answer.get("n_written", 0))}
    payload = SnapshotPayload(identity=identity, tokens=list(tokens),
                              state=json.dumps(state, sort_keys=True).encode(), meta=meta)
    nbytes = write_snapshot(path, payload)
    return SnapshotResult(path=str(path), tokens=len(tokens), bytes=nbytes,
                          ms=(time.perf_counter() - t0) * 1000.0)


def _reference(payload: SnapshotPayload, path: Path) -> dict[str, Any]:
    try:
        state = json.loads(payload.state.decode())
        if state.get("kind") != STATE_KIND:
            raise ValueError("not a slot snapshot")
        name, n_saved = str(state["file"]), int(state["n_saved"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError) as exc:
        raise SnapshotCorruptError(
            f"snapshot {path} does not name a llama-server slot file ({exc}): it was made by "
            "another backend", path=str(path), reason="not a slot snapshot",
        ) from None
    if name != server_file_name(payload.identity, payload.tokens) or n_saved < len(
            payload.tokens):
        raise SnapshotCorruptError(
            f"snapshot {path} names a server file that does not match its tokens",
            path=str(path), reason="server file does not match",
        )
    return {"file": name, "n_saved": n_saved}


def check(path: Path, identity: ContextIdentity, n_ctx: int,
          expect_prefix: Sequence[int] | None) -> tuple[SnapshotPayload, dict[str, Any]]:
    """Read and verify the local snapshot (checksum, identity, size, the prefix the caller's
    store keys it by) and the server file it names; nothing is sent to the server."""
    payload = read_snapshot(path)
    check_compatible(payload, path, identity, n_ctx, expect_prefix)
    return payload, _reference(payload, path)


def restore(client: ServerClient, slot: int, path: Path, payload: SnapshotPayload,
            ref: dict[str, Any]) -> Restored:
    """Restore a checked snapshot's server file into the slot. A failure leaves the slot
    empty (llama-server clears it) or, when the count is off, holding something unknown."""
    t0 = time.perf_counter()
    try:
        answer = client.post(f"/slots/{slot}?action=restore", {"filename": ref["file"]})
    except RemoteError as exc:
        if exc.data.get("status") != 400:
            raise
        raise SnapshotCorruptError(
            f"the server at {client.base_url} cannot restore {ref['file']} (not in its "
            f"--slot-save-path, or damaged): {exc.message}", path=str(path),
            reason="server file missing or invalid", file=ref["file"],
        ) from None
    restored = int(answer.get("n_restored", -1))
    if restored != ref["n_saved"]:
        raise SnapshotCorruptError(
            f"the server restored {restored} tokens from {ref['file']}, the snapshot saved "
            f"{ref['n_saved']}", path=str(path), reason="state does not match its tokens",
        )
    result = SnapshotResult(path=str(path), tokens=len(payload.tokens),
                            bytes=path.stat().st_size, ms=(time.perf_counter() - t0) * 1000.0)
    return Restored(tokens=list(payload.tokens), slot_tokens=restored, meta=payload.meta,
                    result=result)
