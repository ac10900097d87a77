"""A workspace-aware turn for the command line: assemble, restore, prefill the rest, answer.

The CLI's ``ask`` and ``explain-context`` run in a fresh process each time, so what stays warm
between runs is the on-disk snapshot of the stable prefix (segments A–F) in a per-workspace
``contextasm.SnapshotStore``. ``ask`` restores the best compatible snapshot, prefills only the
rest of the prompt, streams the answer and stores the stable prefix for the next run.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.errors import InputError
from contenox_lsp.paths import is_under
from contenox_lsp.runtime.snapshot_store import snapshot_store, snapshot_writer
from contenox_lsp.turn import (
    TurnSpec,
    WorkspaceState,
    assemble_within,
    read_disk_text,
    turn_at,
)
from contenox_lsp.views import TurnMetrics, explain_view
from contextasm import Assembly, Explanation, SnapshotEntry, SnapshotStore, explain, get_format
from contextasm.render import answer_lead
from engine import EngineError, Session
from engine.errors import UnsupportedCapabilityError
from engine.model_files import cache_dir
from engine.results import drain, ttft_over_steps
from engine.session import reusable_prefix

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 128


class WorkspaceError(InputError):
    """Bad CLI input about the workspace (missing folder, file outside it)."""


@dataclass(frozen=True)
class TurnRequest:
    question: str
    file: Path | None = None
    line: int | None = None  # 1-based
    max_tokens: int = DEFAULT_MAX_TOKENS
    outputs: tuple[tuple[str, str, str], ...] = ()  # (kind, source, text): segment H


@dataclass(frozen=True)
class AskOutcome:
    text: str
    metrics: dict[str, Any]


def resolve_workspace(workspace: str | None) -> Path:
    root = Path(workspace or ".").resolve()
    if not root.is_dir():
        raise WorkspaceError(f"workspace is not a folder: {root}", workspace=str(root))
    return root


def resolve_file(root: Path, file: str | None) -> Path | None:
    """A file given on the command line, which must lie inside the workspace (after symlinks)."""
    if file is None:
        return None
    p = Path(file)
    path = (p if p.is_absolute() else Path.cwd() / p).resolve()
    if not is_under(path, root):
        raise WorkspaceError(f"{file} is outside the workspace {root}", file=str(path))
    if not path.is_file():
        raise WorkspaceError(f"no such file: {path}", file=str(path))
    return path


class WorkspaceTurn:
    """Builds the assembly for one workspace and runs turns on an open engine session."""

    def __init__(
        self,
        root: Path,
        session: Session,
        *,
        budget: ContextBudget | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        from repo_index import RepoIndex
        from repo_index.code_search import CodeFinder

        self.root = root
        self.session = session
        self.budget = budget if budget is not None else ContextBudget()
        self.store = store or snapshot_store(session.profile, root)
        # Under contenox's cache dir so that $CONTENOX_CACHE_DIR moves every cache at once.
        self.index = RepoIndex([root], cache_dir=cache_dir() / "repo-index")
        self.index.build()
        self.finder = CodeFinder(self.index, read_disk_text)

    # ------------------------------------------------------------------ assembly

    def state(self, turn: TurnRequest) -> WorkspaceState:
        """The folder on disk, focused on the question's file as an editor that has it open
        would be (never on the question: the stable prefix must not change with it)."""
        focus = (turn.file,) if turn.file else ()
        return WorkspaceState(roots=(self.root,), focus_files=focus)

    def turn(self, turn: TurnRequest) -> TurnSpec:
        line = None if turn.line is None else turn.line - 1
        return turn_at([self.root], turn.file, turn.question, line=line, outputs=turn.outputs)

    def assemble(self, turn: TurnRequest) -> Assembly:
        return assemble_within(self.state(turn), self.turn(turn), self.index, self.session,
                               self.budget, answer_tokens=turn.max_tokens, finder=self.finder)

    # ------------------------------------------------------------------ state

    def _best_snapshot(self, asm: Assembly) -> SnapshotEntry | None:
        return self.store.find_best(self.session.identity, asm, touch=False)

    def cached_tokens(self, asm: Assembly) -> tuple[int, str]:
        """Tokens of ``asm`` available without prefill: resident KV or the best snapshot."""
        common, _ = asm.reuse_against_resident(
            self.session.resident_tokens, self.session.resident_identity
        )
        live = reusable_prefix(self.session, common)
        snap = self._best_snapshot(asm) if self.session.capabilities.get("snapshots") else None
        if snap is not None and snap.key.n_tokens > live:
            return snap.key.n_tokens, "snapshot"
        return live, "resident" if live else "none"

    def _rates_path(self) -> Path:
        return self.store.directory / "rates.json"

    def measured_rate(self) -> float | None:
        try:
            data = json.loads(self._rates_path().read_text("utf-8"))
            return float(data[self.session.identity.digest()])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _record_rate(self, tokens: int, ms: float) -> None:
        if tokens < 64 or ms <= 0:
            return  # too small to say anything about throughput
        path = self._rates_path()
        try:
            data = json.loads(path.read_text("utf-8")) if path.exists() else {}
            data[self.session.identity.digest()] = tokens / (ms / 1000.0)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data), "utf-8")
            os.replace(tmp, path)
        except (OSError, ValueError) as exc:
            log.info("cannot record the prefill rate: %s", exc)

    # ------------------------------------------------------------------ turns

    def explain(self, turn: TurnRequest) -> tuple[Assembly, Explanation, str]:
        asm = self.assemble(turn)
        cached, source = self.cached_tokens(asm)
        exp = explain(
            asm,
            cached,
            evicted=self.store.evicted_prefix_hashes(),
            prefill_tokens_per_s=self.measured_rate(),
        )
        return asm, exp, source

    def explain_view(self, turn: TurnRequest) -> dict[str, Any]:
        """The explain document (the server's ``contenox/explainContext`` schema)."""
        asm = self.assemble(turn)
        snap = self._best_snapshot(asm) if self.session.capabilities.get("snapshots") else None
        return explain_view(
            asm, self.session, self.session.resident_tokens,
            snapshot_tokens=0 if snap is None else snap.key.n_tokens,
            prefill_tokens_per_s=self.measured_rate(),
            budget=self.budget,
            index={"state": "ready", "files": len(self.index.files()),
                   "codeSearch": {"files": self.finder.indexed_files,
                                  "pending": self.finder.pending}},
        )

    def ask(self, turn: TurnRequest, on_piece: Callable[[str], None]) -> AskOutcome:
        s = self.session
        t0 = time.perf_counter()
        asm = self.assemble(turn)
        assembly_ms = (time.perf_counter() - t0) * 1000.0

        t_work = time.perf_counter()
        live, _ = asm.reuse_against_resident(s.resident_tokens, s.resident_identity)
        restored = 0
        snapshots = s.capabilities.get("snapshots", False)
        snap = self.store.find_best(s.identity, asm) if snapshots else None
        if snap is not None and snap.key.n_tokens > live:
            try:
                s.load_snapshot(snap.path, expect_prefix=asm.tokens[: snap.key.n_tokens])
                restored = snap.key.n_tokens
            except EngineError as exc:  # a bad file costs a cold prefill, never the answer
                log.warning("ignoring snapshot %s: %s", snap.path, exc)
                self.store.remove(snap.key)

        stable_key = asm.prefix_key(asm.stable_end)
        stable_saved = False
        new_tokens = 0
        prefill_ms = 0.0
        miss_reason: str | None = None
        if snapshots and asm.stable_end > 0 and self.store.get(stable_key) is None:
            # Prefill the stable prefix alone first so its snapshot holds exactly A–F.
            r = s.prefill(asm.tokens[: asm.stable_end])
            miss_reason = r.miss_reason
            new_tokens += r.new_tokens
            prefill_ms += r.prefill_ms
            try:
                stable_saved = self.store.put(stable_key, asm.prefix_class(asm.stable_end),
                                              snapshot_writer(s),
                                              label="stable prefix A-F") is not None
            except UnsupportedCapabilityError as exc:  # never restorable exactly on this CPU
                log.warning("the stable prefix is not saved: %s", exc)
        stable_prefilled = miss_reason is not None or new_tokens > 0
        r = s.prefill(asm.tokens)
        if not stable_prefilled:
            miss_reason = r.miss_reason
        new_tokens += r.new_tokens
        prefill_ms += r.prefill_ms
        self._record_rate(new_tokens, prefill_ms)
        t_decode = time.perf_counter()

        fmt = get_format(asm.identity.prompt_format)
        gen = drain(s.stream(max_tokens=turn.max_tokens), on_piece, fmt.stop,
                    answer_lead(fmt, turn.question), fmt.opening)
        ttft_ms = (t_decode - t_work) * 1000.0 + (gen.ttft_ms - r.prefill_ms)
        metrics = TurnMetrics(
            promptTokens=asm.n_tokens,
            reusedTokens=asm.n_tokens - new_tokens,
            newTokens=new_tokens,
            restoredFromSnapshot=restored,
            stableTokens=asm.stable_end,
            stableSnapshotSaved=stable_saved,
            assemblyMs=assembly_ms,
            prefillMs=prefill_ms,
            ttftMs=ttft_ms,
            engineTtftMs=ttft_over_steps(gen.ttft_ms, prefill_ms, r.prefill_ms),
            decodeTokens=gen.decode_tokens,
            decodeTokensPerSecond=gen.decode_tok_s,
            finishReason=gen.finish_reason,
            missReason=miss_reason,
        )
        return AskOutcome(text=gen.text, metrics=metrics.to_json())
