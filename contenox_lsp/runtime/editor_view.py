"""What the engine side knows of the editor: where the cursor last was, the open buffers,
paths relative to the workspace. Written on the loop thread by the runtime (edits, asks);
read by the idle warm-ups of the features."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from contenox_lsp.paths import relative_to_roots
from contenox_lsp.turn import WorkspaceState


class EditorView:
    def __init__(self, roots: Callable[[], list[Path]],
                 editor_state: Callable[[], WorkspaceState]) -> None:
        self._roots = roots
        self._editor_state = editor_state
        self.last_cursor: tuple[Path, int] | None = None
        """Where the editor last told us the cursor is (file, 0-based line): after the last
        incremental edit, or the last ask's position. The idle prefill warms the cursor
        context there, so an ask at that line prefills only its question."""

    def buffer_text(self, path: Path) -> str | None:
        """The open buffer's text (None: not open)."""
        return self._editor_state().open_buffers.get(path)

    def relative(self, path: Path) -> str:
        return relative_to_roots(path, self._roots())

    def repo_name(self) -> str:
        """The first workspace folder's name (a FIM model's repository layout names it)."""
        roots = self._roots()
        return roots[0].name if roots else ""
