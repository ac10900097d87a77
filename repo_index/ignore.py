"""gitignore-style ignore rules for one workspace root, with git's precedence.

Layers, lowest precedence first (a later layer's decision wins; inside a layer the last
matching pattern wins, ``!`` re-includes):

1. built-in defaults (VCS folders, caches, ``node_modules``),
2. ``$GIT_DIR/info/exclude``,
3. ``.gitignore`` files from the repository top level down to the path's own folder
   (deeper files override shallower ones, patterns are relative to their folder),
4. patterns passed by the caller (``RepoIndex(ignore_patterns=...)``),
5. ``<root>/.contenox/ignore`` (the user's word on what the model should not see).

As in git, nothing below an ignored folder can be re-included: the walker never enters it.
Not supported: ``core.excludesFile`` (the user's global gitignore).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from pathspec import GitIgnoreSpec

from repo_index.safe_read import read_regular_file

log = logging.getLogger(__name__)

DEFAULT_IGNORES: tuple[str, ...] = (
    ".git/",
    ".hg/",
    ".svn/",
    "node_modules/",
    "__pycache__/",
    ".venv/",
    ".tox/",
    ".nox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    "*.pyc",
    "*.pyo",
    ".DS_Store",
)


class _Layer:
    __slots__ = ("base", "label", "spec")

    def __init__(self, base: str, label: str, spec: GitIgnoreSpec) -> None:
        self.base = base  # absolute folder the patterns are relative to
        self.label = label  # shown in skip reports
        self.spec = spec

    def decide(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included, None: no pattern matched."""
        if path == self.base:
            return None
        rel = path[len(self.base) + 1 :].replace(os.sep, "/")
        if is_dir:
            rel += "/"
        return self.spec.check_file(rel).include


def _read_lines(path: str) -> list[str] | None:
    try:
        data = read_regular_file(path).data
        return data.decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read ignore file %s: %s", path, exc)
        return None


def _spec(lines: Sequence[str], label: str) -> GitIgnoreSpec | None:
    try:
        spec = GitIgnoreSpec.from_lines(lines)
    except Exception as exc:  # a malformed pattern must not stop indexing
        log.warning("ignoring malformed ignore file %s: %s", label, exc)
        return None
    return spec if spec.patterns else None


def _git_dir(root: str) -> tuple[str | None, str | None]:
    """(work tree top level, git dir holding ``info/exclude``) for ``root``, if in a repo."""
    here = root
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.isdir(dot_git):
            return here, dot_git
        if os.path.isfile(dot_git):  # worktree or submodule: "gitdir: <path>"
            lines = _read_lines(dot_git) or []
            for line in lines:
                if line.startswith("gitdir:"):
                    git_dir = os.path.normpath(os.path.join(here, line[7:].strip()))
                    common = _read_lines(os.path.join(git_dir, "commondir"))
                    if common:
                        git_dir = os.path.normpath(os.path.join(git_dir, common[0].strip()))
                    return here, git_dir
            return here, None
        parent = os.path.dirname(here)
        if parent == here:
            return None, None
        here = parent


class IgnoreRules:
    """Ignore decisions for paths under one root. Folder ``.gitignore`` files are read once,
    when the folder is first asked about."""

    def __init__(
        self,
        root: str,
        extra_patterns: Sequence[str] = (),
        default_patterns: Sequence[str] = DEFAULT_IGNORES,
    ) -> None:
        self.root = root
        self._low: list[_Layer] = []
        self._high: list[_Layer] = []
        self._folders: dict[str, _Layer | None] = {}
        self._chains: dict[str, list[_Layer]] = {}
        defaults = _spec(default_patterns, "defaults")
        if defaults is not None:
            self._low.append(_Layer(root, "built-in defaults", defaults))
        top, git_dir = _git_dir(root)
        self._top = top if top is not None else root
        if git_dir is not None:
            exclude = os.path.join(git_dir, "info", "exclude")
            spec = _spec(_read_lines(exclude) or [], exclude)
            if spec is not None:
                self._low.append(_Layer(self._top, ".git/info/exclude", spec))
        if self._top != root and self._root_is_ignored():
            # The folder sits in a part of an enclosing repository that the repository
            # ignores (e.g. a Python install inside ~/.pyenv): its rules are about the
            # enclosing repository, not this workspace, so they do not apply here.
            log.debug("%s is ignored by the repository at %s; not using its rules", root, top)
            self._low = [layer for layer in self._low if layer.label != ".git/info/exclude"]
            self._top = root
            self._folders.clear()
            self._chains.clear()
        extra = _spec(extra_patterns, "settings")
        if extra is not None:
            self._high.append(_Layer(root, "ignore_patterns setting", extra))
        own = os.path.join(root, ".contenox", "ignore")
        spec = _spec(_read_lines(own) or [], own)
        if spec is not None:
            self._high.append(_Layer(root, ".contenox/ignore", spec))

    def _folder_layer(self, folder: str) -> _Layer | None:
        if folder in self._folders:
            return self._folders[folder]
        layer = None
        lines = _read_lines(os.path.join(folder, ".gitignore"))
        if lines:
            if folder.startswith(self.root):
                label = os.path.relpath(os.path.join(folder, ".gitignore"), self.root)
            else:
                label = os.path.join(folder, ".gitignore")
            spec = _spec(lines, label)
            if spec is not None:
                layer = _Layer(folder, label.replace(os.sep, "/"), spec)
        self._folders[folder] = layer
        return layer

    def _chain(self, folder: str) -> list[_Layer]:
        """All layers that apply inside ``folder``, in precedence order (lowest first)."""
        chain = self._chains.get(folder)
        if chain is None:
            chain = [*self._low, *self._gitignores(folder), *self._high]
            self._chains[folder] = chain
        return chain

    def _gitignores(self, folder: str) -> list[_Layer]:
        """``.gitignore`` layers that apply inside ``folder``, shallowest first."""
        folders: list[str] = []
        here = folder
        while True:
            folders.append(here)
            if here == self._top or len(here) <= len(self._top):
                break
            parent = os.path.dirname(here)
            if parent == here:
                break
            here = parent
        out: list[_Layer] = []
        for f in reversed(folders):
            layer = self._folder_layer(f)
            if layer is not None:
                out.append(layer)
        return out

    def _root_is_ignored(self) -> bool:
        here = self.root
        while len(here) > len(self._top):
            if self.ignored_by(here, True) is not None:
                return True
            here = os.path.dirname(here)
        return False

    def ignored_by(self, path: str, is_dir: bool) -> str | None:
        """The label of the rule source that ignores ``path`` (absolute), or None."""
        verdict: bool | None = None
        label = ""
        for layer in self._chain(os.path.dirname(path)):
            decision = layer.decide(path, is_dir)
            if decision is not None:
                verdict, label = decision, layer.label
        return label if verdict else None
