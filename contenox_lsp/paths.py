"""Path safety: every path a client names must resolve inside a workspace folder."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pygls.uris import to_fs_path


class OutsideWorkspaceError(ValueError):
    """A client-supplied URI that is not a file inside any workspace folder."""


def uri_to_path(uri: str) -> Path:
    """``file://`` URI → absolute path (not yet resolved). Other schemes are rejected."""
    if not uri.startswith("file:"):
        raise OutsideWorkspaceError(f"{uri!r} is not a file:// URI, outside the workspace")
    fs = to_fs_path(uri)
    if not fs or "\0" in fs:  # %00: no file has that name (and os calls would raise)
        raise OutsideWorkspaceError(f"{uri!r} is not a valid file URI, outside the workspace")
    return Path(fs)


def resolve_inside(path: Path, roots: Iterable[Path]) -> Path:
    """Resolve symlinks and ``..`` and require the result to be under one of ``roots``.

    A file that does not exist yet is resolved through its nearest existing parent, so a
    symlinked directory cannot smuggle a new file out of the workspace either.
    """
    real = Path(os.path.realpath(path))
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if is_under(real, real_root):
            return real
    raise OutsideWorkspaceError(f"{path} is outside the workspace")


def safe_path(uri: str, roots: Iterable[Path]) -> Path:
    """The resolved path for ``uri``; OutsideWorkspaceError unless inside a workspace folder."""
    return resolve_inside(uri_to_path(uri), list(roots))


def is_under(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or lies below it (lexically: both already resolved)."""
    return path == root or root in path.parents


def root_of(path: Path, roots: Iterable[Path]) -> Path | None:
    """The first of ``roots`` that ``path`` lies under, or None."""
    return next((r for r in roots if is_under(path, r)), None)


def relative_to_roots(path: Path, roots: Iterable[Path]) -> str:
    """``path`` relative to the folder it lies in (POSIX), or as given outside every folder."""
    root = root_of(path, roots)
    if root is None or root == path:
        return path.as_posix()
    return path.relative_to(root).as_posix()
