"""Walk the workspace folders: which files to index, and what was skipped and why."""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from repo_index.ignore import IgnoreRules

log = logging.getLogger(__name__)

# Skip reasons (``Skipped.reason``).
IGNORED = "ignored"
TOO_LARGE = "too-large"
BINARY = "binary"
SYMLINK_ESCAPE = "symlink-escape"
SYMLINK_LOOP = "symlink-loop"
SYMLINK_INTERNAL = "symlink-internal"
BROKEN_SYMLINK = "broken-symlink"
NESTED_ROOT = "nested-root"
UNREADABLE = "unreadable"
SPECIAL = "special-file"

_ALWAYS_SKIPPED = frozenset({".git", ".hg", ".svn"})


@dataclass(frozen=True, order=True)
class Skipped:
    """A path the index left out. ``path`` is absolute; ``detail`` says which rule or limit."""

    path: str
    reason: str
    detail: str = ""


@dataclass(frozen=True)
class WalkedFile:
    path: str  # absolute, under its root
    root: int  # index into the workspace roots
    size: int
    mtime_ns: int


@dataclass
class WalkResult:
    files: list[WalkedFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class Walker:
    """Lists the files of several workspace folders.

    Symlinks are never followed: one that leaves the workspace is a ``symlink-escape``, one
    that points at one of its own parent folders is a ``symlink-loop``, and any other one that
    stays inside the workspace is ``symlink-internal`` (its target is indexed at its own path,
    so following it would only index the same code twice).
    """

    def __init__(
        self,
        roots: Sequence[str],
        rules: Sequence[IgnoreRules],
        max_file_bytes: int,
    ) -> None:
        self.roots = list(roots)
        self.real_roots = [os.path.realpath(r) for r in roots]
        self.rules = list(rules)
        self.max_file_bytes = max_file_bytes

    def in_workspace(self, real_path: str) -> bool:
        return any(within(real_path, r) for r in self.real_roots)

    def walk(self, progress: Callable[[int], None] | None = None) -> WalkResult:
        result = WalkResult()
        for index, root in enumerate(self.roots):
            self._walk_root(index, root, result, progress)
        return result

    def _walk_root(
        self,
        index: int,
        root: str,
        result: WalkResult,
        progress: Callable[[int], None] | None,
    ) -> None:
        rules = self.rules[index]
        other_roots = {r for i, r in enumerate(self.roots) if i != index and within(r, root)}
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                result.skipped.append(Skipped(folder, UNREADABLE, exc.strerror or str(exc)))
                continue
            subfolders: list[str] = []
            for entry in entries:
                if entry.name in _ALWAYS_SKIPPED:
                    continue
                path = entry.path
                try:
                    # git sees a symlink as a file, whatever it points to.
                    is_dir = entry.is_dir(follow_symlinks=False)
                    rule = rules.ignored_by(path, is_dir)
                    if rule is not None:
                        result.skipped.append(Skipped(path, IGNORED, rule))
                        continue
                    if entry.is_symlink():
                        self._symlink(path, result)
                        continue
                    if is_dir:
                        if path in other_roots:
                            result.skipped.append(
                                Skipped(path, NESTED_ROOT, "indexed as its own workspace folder")
                            )
                        else:
                            subfolders.append(path)
                        continue
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    result.skipped.append(Skipped(path, UNREADABLE, exc.strerror or str(exc)))
                    continue
                if not stat.S_ISREG(st.st_mode):
                    result.skipped.append(Skipped(path, SPECIAL, "not a regular file"))
                elif st.st_size > self.max_file_bytes:
                    result.skipped.append(
                        Skipped(path, TOO_LARGE, f"{st.st_size} bytes > {self.max_file_bytes}")
                    )
                else:
                    result.files.append(WalkedFile(path, index, st.st_size, st.st_mtime_ns))
            if progress is not None:
                progress(len(result.files))
            stack.extend(reversed(subfolders))  # depth-first, in name order

    def _symlink(self, path: str, result: WalkResult) -> None:
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                result.skipped.append(Skipped(path, SYMLINK_LOOP, "symlink cycle"))
            else:
                result.skipped.append(Skipped(path, BROKEN_SYMLINK, exc.strerror or str(exc)))
            return
        target = os.path.realpath(path)
        if not self.in_workspace(target):
            result.skipped.append(Skipped(path, SYMLINK_ESCAPE, f"points to {target}"))
        elif os.path.isdir(target) and within(os.path.realpath(os.path.dirname(path)), target):
            result.skipped.append(Skipped(path, SYMLINK_LOOP, f"points to parent {target}"))
        else:
            result.skipped.append(
                Skipped(path, SYMLINK_INTERNAL, f"target {target} is indexed at its own path")
            )
