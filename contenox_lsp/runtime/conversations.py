"""Conversations: the earlier questions and answers a follow-up ``contenox/ask`` builds on.

A conversation is a list of turns (question, answer), oldest first. Its turns enter the prompt
as ``turn`` outputs of segment H, after the stable prefix and the diff, in cache class low:
over budget the oldest turns are shrunk and dropped first, never the repository prefix. The
idle prefill assembles with the active conversation (the one asked in last), so after an
answer its turn is prefilled in idle time and a follow-up prefills only the new question.

Conversations are kept per workspace in one JSON file (``snapshot_store.conversations_dir``,
beside the snapshots), written
atomically (a temporary file renamed over the old one): a server killed at any moment leaves
the old file or the new one, and a stale temporary file is removed on the next start. A file
that does not parse is set aside (``.corrupt``) and the server starts with none.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contenox_lsp.params import MAX_CONVERSATION_ID_CHARS

logger = logging.getLogger(__name__)

FILE_NAME = "conversations.json"
_TMP_PREFIX = ".conversations-"
_VERSION = 1
#: Turns kept per conversation (older ones are forgotten) and conversations kept per workspace.
MAX_TURNS = 32
MAX_CONVERSATIONS = 64


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str


@dataclass
class Conversation:
    turns: list[Turn]
    updated: float


class Conversations:
    def __init__(self) -> None:
        self._by_id: dict[str, Conversation] = {}
        self._path: Path | None = None
        self._lock = threading.Lock()
        self.active: str | None = None
        """The conversation asked in last: the idle prefill prefills its turns."""

    # -- persistence ---------------------------------------------------------------------------

    def open(self, directory: Path) -> None:
        """Load this workspace's conversations from ``directory`` (and write there from now on)."""
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / FILE_NAME
        for stale in directory.glob(f"{_TMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                stale.unlink()  # left by a server killed while writing
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            loaded = _parse(raw)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            logger.warning("conversations file %s unreadable (%s); starting with none",
                           self._path, exc)
            with contextlib.suppress(OSError):
                self._path.replace(self._path.with_suffix(".corrupt"))
            return
        with self._lock:
            self._by_id = {**loaded, **self._by_id}  # turns asked before the load stay

    def _write(self) -> None:
        path = self._path
        if path is None:
            return
        data = {"version": _VERSION, "conversations": {
            cid: {"updated": c.updated,
                  "turns": [{"question": t.question, "answer": t.answer} for t in c.turns]}
            for cid, c in self._by_id.items()}}
        tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex}.json")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            logger.warning("could not save conversations to %s: %s", path, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()

    # -- turns ---------------------------------------------------------------------------------

    def turns(self, cid: str | None) -> list[Turn]:
        if cid is None:
            return []
        with self._lock:
            conv = self._by_id.get(cid)
            return list(conv.turns) if conv is not None else []

    def append(self, cid: str, question: str, answer: str) -> int:
        """Record a finished turn; returns the conversation's number of turns."""
        with self._lock:
            conv = self._by_id.setdefault(cid, Conversation([], 0.0))
            conv.turns.append(Turn(question, answer))
            del conv.turns[:-MAX_TURNS]
            conv.updated = time.time()
            if len(self._by_id) > MAX_CONVERSATIONS:
                oldest = min(self._by_id, key=lambda k: self._by_id[k].updated)
                del self._by_id[oldest]
            self.active = cid
            n = len(conv.turns)
            self._write()
            return n

    def clear(self, cid: str | None) -> int:
        """Forget one conversation (or all with ``None``); returns how many were removed."""
        with self._lock:
            if cid is None:
                removed = len(self._by_id)
                self._by_id.clear()
            else:
                removed = 1 if self._by_id.pop(cid, None) is not None else 0
            if cid is None or self.active == cid:
                self.active = None
            if removed:
                self._write()
            return removed

    def view(self, cid: str | None) -> dict[str, Any]:
        with self._lock:
            if cid is not None:
                conv = self._by_id.get(cid)
                turns = conv.turns if conv is not None else []
                return {"conversationId": cid, "turns": [
                    {"question": t.question, "answer": t.answer} for t in turns]}
            items = sorted(self._by_id.items(), key=lambda kv: -kv[1].updated)
            return {"active": self.active, "conversations": [
                {"conversationId": k, "turns": len(c.turns), "updated": c.updated,
                 "lastQuestion": c.turns[-1].question if c.turns else None}
                for k, c in items]}


def prompt_outputs(turns: list[Turn]) -> tuple[tuple[str, str, str], ...]:
    """The turns as segment-H outputs (kind ``turn``), oldest first."""
    return tuple(("turn", f"{i}", f"Question: {t.question}\nAnswer: {t.answer}")
                 for i, t in enumerate(turns, 1))


def _parse(raw: Any) -> dict[str, Conversation]:
    if not isinstance(raw, dict) or raw.get("version") != _VERSION:
        raise ValueError("not a conversations file of this version")
    convs = raw.get("conversations")
    if not isinstance(convs, dict):
        raise ValueError("no conversations object")
    out: dict[str, Conversation] = {}
    for cid, conv in convs.items():
        if not isinstance(cid, str) or not 0 < len(cid) <= MAX_CONVERSATION_ID_CHARS:
            raise ValueError("a conversation id is not a short string")
        if not isinstance(conv, dict) or not isinstance(conv.get("turns"), list):
            raise ValueError(f"conversation {cid!r} has no turns list")
        updated = conv.get("updated")
        if isinstance(updated, bool) or not isinstance(updated, int | float):
            raise ValueError(f"conversation {cid!r} has no time")
        turns = []
        for t in conv["turns"][-MAX_TURNS:]:
            if not (isinstance(t, dict) and isinstance(t.get("question"), str)
                    and isinstance(t.get("answer"), str)):
                raise ValueError(f"conversation {cid!r} holds a malformed turn")
            turns.append(Turn(t["question"], t["answer"]))
        out[cid] = Conversation(turns, float(updated))
    return out
