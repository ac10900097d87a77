"""The workspace folders: path normalisation, display paths, and the admission rules.

``RepoIndex.update`` must admit exactly the files ``build`` would index, so both go through
this one object: the walker for whole folders, ``admits`` for single paths.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from repo_index.ignore import IgnoreRules
from repo_index.walker import Walker, WalkResult, within

_VCS_FOLDERS = (".git", ".hg", ".svn")


class Workspace:
    def __init__(
        self,
        roots: Sequence[str],
        ignore_patterns: Sequence[str],
        default_ignores: Sequence[str],
        max_file_bytes: int,
    ) -> None:
        self.roots = list(roots)
        self.real_roots = [os.path.realpath(r) for r in roots]
        self.labels = _labels(self.roots)
        self.ignore_patterns = tuple(ignore_patterns)
        self.default_ignores = tuple(default_ignores)
        self.max_file_bytes = max_file_bytes
        self._rules: list[IgnoreRules] | None = None
        self._folder_ignored: dict[str, bool] = {}
        self._file_ignored: dict[str, bool] = {}
        self._folder_real: dict[str, bool] = {}

    # ---------------------------------------------------------------- paths

    def normalize(self, path: str | os.PathLike[str]) -> str | None:
        """Absolute path under one of the roots (mapped back from a resolved symlinked
        spelling of a root), or None when outside the workspace."""
        norm = os.path.abspath(os.fspath(path))
        if any(within(norm, root) for root in self.roots):
            return norm
        real = os.path.realpath(norm)
        for root, real_root in zip(self.roots, self.real_roots, strict=True):
            if within(real, real_root):
                return os.path.join(root, os.path.relpath(real, real_root))
        return None

    def root_of(self, path: str) -> int | None:
        """The innermost root holding ``path`` (nested roots own their files)."""
        best: int | None = None
        for i, root in enumerate(self.roots):
            if path != root and within(path, root):
                if best is None or len(root) > len(self.roots[best]):
                    best = i
        return best

    def display(self, root: int, path: str) -> str:
        """Workspace-relative POSIX path, prefixed with the folder name when there are
        several folders."""
        base = self.roots[root]
        if path.startswith(base + os.sep):  # the usual case; relpath is slow
            rel = path[len(base) + 1 :].replace(os.sep, "/")
        else:
            rel = os.path.relpath(path, base).replace(os.sep, "/")
        label = self.labels[root]
        return f"{label}/{rel}" if label else rel

    # ---------------------------------------------------------------- admission

    def reset_rules(self) -> None:
        """Forget ignore rules (an ignore file changed); they are re-read on next use."""
        self._rules = None
        self._folder_ignored.clear()
        self._file_ignored.clear()
        self._folder_real.clear()

    @property
    def rules(self) -> list[IgnoreRules]:
        if self._rules is None:
            self._rules = [
                IgnoreRules(root, self.ignore_patterns, self.default_ignores) for root in self.roots
            ]
        return self._rules

    def walk(self) -> WalkResult:
        self.reset_rules()
        return Walker(self.roots, self.rules, self.max_file_bytes).walk()

    def admits(self, root: int, path: str) -> bool:
        """Would the walker index ``path``: not ignored, not a symlink, and not reached
        through a symlinked folder?"""
        return (
            not self.ignored(root, path)
            and not os.path.islink(path)
            and self._real_folder(root, path)
        )

    def ignored(self, root: int, path: str) -> bool:
        hit = self._file_ignored.get(path)
        if hit is None:
            rules = self.rules[root]
            hit = (
                self._ignored_folder(rules, os.path.dirname(path), self.roots[root])
                or rules.ignored_by(path, False) is not None
            )
            self._file_ignored[path] = hit
        return hit

    def _ignored_folder(self, rules: IgnoreRules, folder: str, root: str) -> bool:
        if len(folder) <= len(root):
            return False
        hit = self._folder_ignored.get(folder)
        if hit is None:
            hit = (
                os.path.basename(folder) in _VCS_FOLDERS
                or self._ignored_folder(rules, os.path.dirname(folder), root)
                or rules.ignored_by(folder, True) is not None
            )
            self._folder_ignored[folder] = hit
        return hit

    def _real_folder(self, root: int, path: str) -> bool:
        """False when a symlinked folder lies between the root and ``path``: the walker never
        follows one (the target is outside the workspace or indexed at its own path)."""
        folder = os.path.dirname(path)
        ok = self._folder_real.get(folder)
        if ok is None:
            rel = os.path.relpath(folder, self.roots[root])
            expected = os.path.normpath(os.path.join(self.real_roots[root], rel))
            ok = os.path.realpath(folder) == expected
            self._folder_real[folder] = ok
        return ok


def _labels(roots: Sequence[str]) -> list[str]:
    if len(roots) == 1:
        return [""]
    labels: list[str] = []
    for root in roots:
        base = os.path.basename(root.rstrip(os.sep)) or "root"
        label, n = base, 2
        while label in labels:
            label, n = f"{base}~{n}", n + 1
        labels.append(label)
    return labels
