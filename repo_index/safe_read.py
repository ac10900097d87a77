"""The one way workspace files are read: regular files only, size-capped, confined.

Every file the server reads for a prompt, the index or the diff goes through
``read_regular_file``: a FIFO, socket or device in the workspace would block the reader (or
never end), a symlink may point anywhere, and a huge file must not be loaded to find out it
is too large. The path is resolved first (symlinks, ``..``); when ``roots`` are given the
resolved path must lie under one of them; the file is then opened without following a
symlink and without blocking, and checked with ``fstat`` on the open descriptor, so what is
read is what was checked.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

#: The default cap: larger files are never read whole (the index and prompts skip them).
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class UnreadableFile(OSError):
    """Not read on purpose: not a regular file, too large, or outside the roots. An
    ``OSError``, so callers that already treat an unreadable file as absent keep doing so."""


class FileTooLarge(UnreadableFile):
    """A regular file over the size cap (never read whole)."""


class FileBytes(NamedTuple):
    data: bytes
    mtime_ns: int


def read_regular_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    roots: Iterable[str | os.PathLike[str]] | None = None,
) -> FileBytes:
    """The bytes of ``path`` (and its mtime); UnreadableFile when it may not be read, or the
    OSError of the read (FileNotFoundError, IsADirectoryError, PermissionError, ...)."""
    real = os.path.realpath(path)
    if roots is not None and not any(_under(real, os.path.realpath(r)) for r in roots):
        raise UnreadableFile(f"{path} resolves outside the workspace ({real})")
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(f"{path} is not a regular file")
        if st.st_size > max_bytes:
            raise FileTooLarge(f"{path} has {st.st_size} bytes, over the {max_bytes} cap")
        chunks: list[bytes] = []
        total = 0
        while True:  # the size may change while reading: never read past the cap
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise FileTooLarge(f"{path} grew over the {max_bytes} byte cap")
        return FileBytes(b"".join(chunks), st.st_mtime_ns)
    finally:
        os.close(fd)


def _under(path: str, root: str) -> bool:
    return path == root or Path(root) in Path(path).parents
