"""Reading what a prompt needs from the workspace folder (deterministically): the product's
I/O half of context assembly, beside ``turn.py`` which assembles with it (``contextasm``
itself reads nothing).

System prompt (``.contenox/system.md`` or the built-in default), repo instructions (first of
``AGENTS.md``, ``.contenox/instructions.md``, ``CONTRIBUTING.md``, capped), the current diff
(``git diff HEAD`` for tracked files, new untracked files, unsaved editor buffers vs disk),
pins, and the repo map from the index. Paths are sorted and formatting fixed, so an unchanged
workspace yields byte-identical inputs. Git runs as an argument list (never a shell) with
optional locks off, so it never contends with the developer's own git commands; a folder that
is not a git work tree (or a machine without git) simply has no git part.
"""

from __future__ import annotations

import difflib
import logging
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contextasm.defaults import DEFAULT_SYSTEM_PROMPT
from contextasm.inputs import Pin, RepoInstructions, RepoMap
from contextasm.tokens import default_token_counter
from repo_index.safe_read import FileTooLarge, read_regular_file

#: Open editor buffers: ``{path: text}``, paths absolute or relative to the workspace root.
Buffers = Mapping[str, str] | Mapping[Path, str]

logger = logging.getLogger(__name__)

SYSTEM_PROMPT_FILE = ".contenox/system.md"
INSTRUCTION_FILES = ("AGENTS.md", ".contenox/instructions.md", "CONTRIBUTING.md")
MAX_INSTRUCTIONS_CHARS = 16_000
MAX_UNTRACKED_FILE_BYTES = 16 * 1024
MAX_UNTRACKED_FILES = 100
#: Files larger than this are never read for a prompt (pins, instructions, diff bases).
MAX_TEXT_FILE_BYTES = 1_000_000
MAX_UNTRACKED_TOTAL_BYTES = 128 * 1024
GIT_TIMEOUT_S = 15.0


def load_system_prompt(root: str | os.PathLike[str]) -> str:
    """``.contenox/system.md`` when present and non-empty, else the built-in default."""
    text = _read_text(Path(root) / SYSTEM_PROMPT_FILE, Path(root))
    if text is not None and text.strip():
        return text
    return DEFAULT_SYSTEM_PROMPT


def load_repo_instructions(
    root: str | os.PathLike[str], *, max_chars: int = MAX_INSTRUCTIONS_CHARS
) -> RepoInstructions | None:
    """The first non-empty of ``INSTRUCTION_FILES``, cut at a line boundary to ``max_chars``."""
    for name in INSTRUCTION_FILES:
        text = _read_text(Path(root) / name, Path(root))
        if text is None or not text.strip():
            continue
        text = text.replace("\r\n", "\n")
        if len(text) > max_chars:
            cut = text.rfind("\n", 0, max_chars)
            text = text[: cut if cut > 0 else max_chars] + f"\n(truncated at {max_chars} chars)\n"
        return RepoInstructions(text=text, source=name)
    return None


# -- diff ------------------------------------------------------------------------------------


def current_diff(root: str | os.PathLike[str], buffers: Buffers | None = None) -> str:
    """Tracked changes vs HEAD, new untracked files, then unsaved buffers vs disk."""
    root = Path(root)
    parts = [git_diff_head(root), untracked_files_diff(root), buffers_diff(root, buffers or {})]
    return "".join(p for p in parts if p)


def git_diff_head(root: str | os.PathLike[str]) -> str:
    """``git diff HEAD`` for the tracked files under ``root`` ('' outside a git work tree)."""
    out = _git(
        Path(root),
        "diff",
        "HEAD",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--no-renames",
        "--relative",
        "--unified=3",
        "--diff-algorithm=myers",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        "--ignore-submodules",
    )
    return _ensure_newline(out or "")


def untracked_files(root: str | os.PathLike[str]) -> list[str]:
    """Untracked, not ignored files under ``root`` (relative, sorted; [] outside git)."""
    out = _git(Path(root), "ls-files", "--others", "--exclude-standard", "-z")
    return sorted(p for p in (out or "").split("\0") if p)


def untracked_files_diff(root: str | os.PathLike[str]) -> str:
    """New untracked files as additions; binary or large ones as a one-line note."""
    root = Path(root)
    out: list[str] = []
    total = 0
    names = untracked_files(root)
    for i, rel in enumerate(names):
        if i >= MAX_UNTRACKED_FILES or total >= MAX_UNTRACKED_TOTAL_BYTES:
            out.append(f"({len(names) - i} more untracked files not shown)\n")
            break
        # git lists an untracked symlink as a file: it is read only when its target lies
        # inside the workspace too, and only when that is a regular file.
        try:
            data = read_regular_file(root / rel, max_bytes=MAX_UNTRACKED_FILE_BYTES,
                                     roots=[root]).data
        except FileTooLarge:
            out.append(f"diff --untracked a/{rel} b/{rel}\nnew file (large, over "
                       f"{MAX_UNTRACKED_FILE_BYTES} bytes, not shown)\n")
            continue
        except OSError:
            continue
        if b"\0" in data[:8192]:
            out.append(
                f"diff --untracked a/{rel} b/{rel}\nnew file (binary, {len(data)} bytes, "
                "not shown)\n"
            )
            continue
        total += len(data)
        out.append(_unified(rel, None, data.decode("utf-8", errors="replace"), "untracked"))
    return "".join(out)


def buffers_diff(root: str | os.PathLike[str], buffers: Buffers) -> str:
    """Unsaved editor buffers vs the file on disk (paths absolute or relative to ``root``)."""
    root = Path(root)
    rels: dict[str, str] = {}
    for name, text in buffers.items():
        rel = workspace_relative(root, name)
        if rel is None:
            logger.debug("buffer %s is outside the workspace; not diffed", name)
            continue
        rels[rel] = text
    out: list[str] = []
    for rel in sorted(rels):
        disk = _read_text(root / rel, root)
        text = rels[rel]
        if disk is not None and disk.splitlines() == text.splitlines():
            continue
        out.append(_unified(rel, disk, text, "unsaved"))
    return "".join(out)


def workspace_relative(root: Path, name: str | os.PathLike[str]) -> str | None:
    """``name`` as a POSIX path relative to ``root``, or None when it lies outside."""
    p = Path(name)
    if not p.is_absolute():
        p = root / p
    try:
        rel = Path(os.path.normpath(p)).relative_to(os.path.normpath(root))
    except ValueError:
        return None
    return rel.as_posix()


def _unified(rel: str, old: str | None, new: str, tag: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines() if old is not None else [],
        new.splitlines(),
        fromfile=f"a/{rel}" if old is not None else "/dev/null",
        tofile=f"b/{rel}",
        lineterm="",
        n=3,
    )
    body = "\n".join(lines)
    return f"diff --{tag} a/{rel} b/{rel}\n{body}\n" if body else ""


def _git(root: Path, *args: str) -> str | None:
    env = {
        **os.environ,
        "GIT_OPTIONAL_LOCKS": "0",  # never take index.lock: the developer's git must not fail
        "GIT_PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    cmd = ["git", "-c", "core.quotePath=false", "-c", "color.ui=never", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, timeout=GIT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.info("git %s in %s unavailable: %s", args[0], root, exc)
        return None
    if proc.returncode != 0:
        # Not a work tree, no HEAD yet, ...: the diff simply has no git part.
        logger.debug(
            "git %s in %s: exit %d: %s",
            args[0],
            root,
            proc.returncode,
            proc.stderr.decode("utf-8", errors="replace").strip(),
        )
        return None
    return proc.stdout.decode("utf-8", errors="replace")


def _ensure_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _read_text(path: Path, root: Path) -> str | None:
    """A file's text when it is a regular file whose real path lies under ``root``."""
    try:
        data = read_regular_file(path, max_bytes=MAX_TEXT_FILE_BYTES, roots=[root]).data
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


# -- pins and the repo map ------------------------------------------------------------


def file_text(
    root: str | os.PathLike[str], path: str | os.PathLike[str], buffers: Buffers | None = None
) -> str | None:
    """The text the developer sees: the open buffer if any, else the file on disk."""
    root = Path(root)
    rel = workspace_relative(root, path)
    for name, text in (buffers or {}).items():
        if rel is not None and workspace_relative(root, name) == rel:
            return text
    return None if rel is None else _read_text(root / rel, root)


def load_pin(
    root: str | os.PathLike[str],
    path: str | os.PathLike[str],
    start_line: int | None = None,
    end_line: int | None = None,
    buffers: Buffers | None = None,
) -> Pin | None:
    """A ``Pin`` of ``path`` (whole file or the given range, clamped); None if unreadable."""
    text = file_text(root, path, buffers)
    if text is None:
        return None
    lines = text.splitlines()
    start = max(1, start_line or 1)
    end = min(len(lines), end_line or len(lines))
    if end < start:
        return None
    rel = workspace_relative(Path(root), path) or os.fspath(path)
    return Pin(path=rel, start_line=start, end_line=end, text="\n".join(lines[start - 1 : end]))


def repo_map_from_index(
    index: Any, tokenizer: Any, budget_tokens: int, focus_files: Sequence[str]
) -> RepoMap | None:
    """Segment E from a ``repo_index.RepoIndex``, budgeted in the model's own tokens (via
    ``tokenizer.tokenize``), focused on ``focus_files``; None when the budget is 0 or the map
    is empty. The returned ``RepoMap.render`` lets the budget shrink the map later.

    Callers focus it on open/pinned files, never on the question, so the map (and so the
    stable prefix) is the same for every question about the same editor state."""
    if budget_tokens <= 0:
        return None
    focus = list(focus_files)

    counter = default_token_counter()

    def count(text: str) -> int:
        return counter.count(tokenizer, text)

    def map_at(budget: int) -> Any:
        return index.repo_map(budget_tokens=budget, focus_files=focus, count_tokens=count)

    def render(budget: int) -> tuple[str, str]:
        m = map_at(budget)
        return m.text, m.digest

    first = map_at(budget_tokens)
    if not first.text.strip():
        return None
    return RepoMap(text=first.text, digest=first.digest, render=render,
                   files=tuple(first.files))
