"""Editor state + user turn → ``contextasm`` inputs → an assembled prompt.

Runs on the context thread (``ContextService.call``). The question never influences the
segments before the user turn (the repo map is focused on open and pinned files only), so the
prefix pre-prefilled in idle time is exactly the prefix of the next ask.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contenox_lsp.context import BufferState, ContextService, TurnSpec
    from contextasm import Assembly, RepoMap

logger = logging.getLogger(__name__)


def build(svc: ContextService, state: BufferState, turn: TurnSpec, session: Any,
          max_new_tokens: int) -> Assembly:
    from contextasm import ContextInputs, OutputEntry, UserTurn, assemble
    from contextasm import workspace as W

    roots = svc.roots
    primary = roots[0] if roots else None
    buffers = {str(p): t for p, t in state.open_buffers.items()}

    pins = []
    for pin in state.pins:
        root = _root_of(pin.path, roots)
        if root is None:
            continue
        pin_buffers = dict(buffers)
        if pin.text is not None:
            pin_buffers[str(pin.path)] = pin.text
        loaded = W.load_pin(
            root, str(pin.path),
            None if pin.start_line is None else pin.start_line + 1,
            None if pin.end_line is None else pin.end_line + 1,
            pin_buffers,
        )
        if loaded is not None:
            pins.append(loaded)

    diff = "".join(
        W.current_diff(root, {k: v for k, v in buffers.items() if _under(Path(k), root)})
        for root in roots
    )
    inputs = ContextInputs(
        system_prompt=W.load_system_prompt(primary) if primary else W.DEFAULT_SYSTEM_PROMPT,
        tool_schemas=W.default_tool_schemas(),
        task_policy=W.DEFAULT_TASK_POLICY,
        repo_instructions=W.load_repo_instructions(primary) if primary else None,
        repo_map=repo_map(svc, state, session),
        pins=pins,
        diff=diff,
        outputs=[OutputEntry(kind=k, source=s, text=t) for k, s, t in turn.outputs],
        user=UserTurn(
            question=turn.question,
            selection=turn.selection,
            cursor_context=turn.cursor_context,
            file_path=None if turn.path is None else turn.path.as_posix(),
            line=turn.line,
        ),
    )
    return assemble(inputs, session, session.identity, max_new_tokens=max_new_tokens)


def repo_map(svc: ContextService, state: BufferState, session: Any) -> RepoMap | None:
    """Segment E from the index, focused on open and pinned files."""
    from contextasm.workspace import repo_map_from_index

    if svc.index is None:
        return None
    return repo_map_from_index(svc.index, session, svc.repo_map_tokens,
                               [str(p) for p in state.focus_files])


def _root_of(path: Path, roots: list[Path]) -> Path | None:
    for root in roots:
        if _under(path, root):
            return root
    return None


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
