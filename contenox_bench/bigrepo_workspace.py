"""A synthetic-but-real workspace for the bigrepo section: N real Python files copied from
the running interpreter's site-packages.

Whole top-level packages are taken in a seeded order (so cross-file references stay real:
a package's modules use each other), the last one cut to fit, files in sorted order. Past the
source's size the sequence starts again under another folder prefix (``copy0/``,
``copy1/``, ...): the copies are the same code, so each of their names is defined once per
copy (the ranking's "defined in more than five files" weight applies from six copies on).
"""

from __future__ import annotations

import os
import random
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = frozenset({"__pycache__", ".git"})


@dataclass(frozen=True)
class Workspace:
    root: Path
    files: int
    bytes: int
    copies: int  # folder prefixes used: copy0/ .. copy{copies-1}/
    source: str  # where the files came from
    source_files: int  # Python files available there


def default_source() -> Path:
    """The running interpreter's site-packages (purelib)."""
    return Path(sysconfig.get_paths()["purelib"])


def source_files(source: Path, seed: int) -> list[Path]:
    """Every ``.py`` file under ``source`` (relative), whole top-level entries in a seeded
    order, files of an entry sorted. Same source and seed: same list."""
    groups: dict[str, list[Path]] = {}
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        rel_dir = Path(dirpath).relative_to(source)
        for name in sorted(filenames):
            if not name.endswith(".py"):
                continue
            rel = rel_dir / name
            if not (source / rel).is_file() or (source / rel).is_symlink():
                continue
            top = rel.parts[0]
            groups.setdefault(top, []).append(rel)
    order = sorted(groups)
    random.Random(seed).shuffle(order)
    return [rel for top in order for rel in sorted(groups[top])]


def make(dest: Path, n_files: int, source: Path | None = None, seed: int = 0) -> Workspace:
    """Copy ``n_files`` Python files into ``dest`` (created; must not exist)."""
    if n_files <= 0:
        raise ValueError("n_files must be positive")
    src = source or default_source()
    pool = source_files(src, seed)
    if not pool:
        raise ValueError(f"no Python files under {src}")
    dest.mkdir(parents=True)
    copied = total = 0
    copy = 0
    while copied < n_files:
        prefix = dest / f"copy{copy}"
        for rel in pool[: n_files - copied]:
            target = prefix / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, target)
            total += target.stat().st_size
            copied += 1
        copy += 1
    return Workspace(dest, copied, total, copy, str(src), len(pool))
