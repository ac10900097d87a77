"""repo_index: what the workspace walk indexes, what it skips, and why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repo_index import RepoIndex


def write(path: Path, text: str | bytes = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def build(root: Path, tmp_path: Path, **kwargs: object) -> RepoIndex:
    idx = RepoIndex([root], cache_dir=tmp_path / "cache", **kwargs)  # type: ignore[arg-type]
    idx.build()
    return idx


def reasons(idx: RepoIndex, root: Path) -> dict[str, tuple[str, str]]:
    return {
        os.path.relpath(s.path, root).replace(os.sep, "/"): (s.reason, s.detail)
        for s in idx.skipped
    }


def indexed(idx: RepoIndex, root: Path) -> set[str]:
    return {os.path.relpath(p, root).replace(os.sep, "/") for p in idx.files()}


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git" / "info").mkdir(parents=True)
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / ".git" / "info" / "exclude", "secret_*.py\n")
    write(root / ".gitignore", "*.log\nbuild/\n!keep.log\n")
    write(root / "src" / ".gitignore", "generated.py\n!important.log\n")
    write(root / ".contenox" / "ignore", "private/\n")
    write(root / "src" / "main.py", "def main():\n    pass\n")
    write(root / "src" / "generated.py")
    write(root / "src" / "important.log", "kept by a nested negation\n")
    write(root / "src" / "noise.log", "dropped\n")
    write(root / "keep.log", "kept by a negation\n")
    write(root / "build" / "out.py")
    write(root / "secret_key.py")
    write(root / "private" / "notes.py")
    write(root / "node_modules" / "lib" / "index.js", "function f() {}\n")
    write(root / "README.md", "# readme\n")
    return root


def test_gitignore_nested_negation_exclude_and_contenox_ignore(repo: Path, tmp_path: Path) -> None:
    idx = build(repo, tmp_path)
    files = indexed(idx, repo)
    assert {"src/main.py", "src/important.log", "keep.log", "README.md"} <= files
    why = reasons(idx, repo)
    assert why["src/generated.py"] == ("ignored", "src/.gitignore")
    assert why["src/noise.log"] == ("ignored", ".gitignore")
    assert why["build"] == ("ignored", ".gitignore")  # the folder, not each file in it
    assert why["secret_key.py"] == ("ignored", ".git/info/exclude")
    assert why["private"] == ("ignored", ".contenox/ignore")
    assert why["node_modules"] == ("ignored", "built-in defaults")
    assert not any(f.startswith((".git/", "build/", "private/", "node_modules/")) for f in files)


def test_binary_and_size_limit(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root / "ok.py", "def ok():\n    pass\n")
    write(root / "blob.bin", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    write(root / "fake.py", b"def x():\x00\n")
    write(root / "huge.py", "x = 1\n" * 400)
    idx = build(root, tmp_path, max_file_bytes=1000)
    why = reasons(idx, root)
    assert why["blob.bin"][0] == "binary"
    assert why["fake.py"][0] == "binary"
    assert why["huge.py"][0] == "too-large"
    assert indexed(idx, root) == {"ok.py"}
    # the verdicts survive a warm start from the cache
    again = build(root, tmp_path, max_file_bytes=1000)
    assert reasons(again, root) == why


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinks_escape_loop_internal_and_broken(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    outside = tmp_path / "outside"
    write(outside / "leak.py", "def leak():\n    pass\n")
    write(root / "pkg" / "mod.py", "def mod():\n    pass\n")
    os.symlink(outside, root / "escape_dir")
    os.symlink(outside / "leak.py", root / "escape_file.py")
    os.symlink(root, root / "pkg" / "loop")
    os.symlink("cycle_b", root / "cycle_a")
    os.symlink("cycle_a", root / "cycle_b")
    os.symlink(root / "pkg" / "mod.py", root / "alias.py")
    os.symlink(root / "missing.py", root / "dangling.py")
    idx = build(root, tmp_path)
    why = {k: v[0] for k, v in reasons(idx, root).items()}
    assert why["escape_dir"] == "symlink-escape"
    assert why["escape_file.py"] == "symlink-escape"
    assert why["pkg/loop"] == "symlink-loop"
    assert why["cycle_a"] == "symlink-loop"
    assert why["cycle_b"] == "symlink-loop"
    assert why["alias.py"] == "symlink-internal"
    assert why["dangling.py"] == "broken-symlink"
    assert indexed(idx, root) == {"pkg/mod.py"}
    assert idx.definitions("leak") == []
    # an editor opening a file through an escaping link does not pull it in either
    assert idx.update(root / "escape_file.py", "def leak():\n    pass\n") is False
    assert idx.definitions("leak") == []


def test_update_respects_ignore_rules(repo: Path, tmp_path: Path) -> None:
    idx = build(repo, tmp_path)
    assert idx.update(repo / "build" / "new.py", "def nope():\n    pass\n") is False
    assert idx.update(repo / "src" / "generated.py", "def nope():\n    pass\n") is False
    assert idx.definitions("nope") == []
    assert idx.update(repo / "src" / "fresh.py", "def yes():\n    pass\n") is True
    assert [s.name for s in idx.definitions("yes")] == ["yes"]
    assert idx.update(tmp_path / "elsewhere.py", "def out():\n    pass\n") is False


def test_changed_gitignore_takes_effect_on_rebuild(repo: Path, tmp_path: Path) -> None:
    idx = build(repo, tmp_path)
    assert idx.is_indexed(repo / "src" / "main.py")
    write(repo / "src" / ".gitignore", "main.py\n")
    idx.update(repo / "src" / ".gitignore")
    assert idx.rescan_needed
    idx.build()
    assert not idx.is_indexed(repo / "src" / "main.py")
    assert not idx.rescan_needed


def test_workspace_inside_an_ignored_part_of_an_enclosing_repository(tmp_path: Path) -> None:
    """Like a Python install inside ~/.pyenv (a git checkout that ignores versions/): the
    enclosing repository's rules are not this workspace's rules."""
    outer = tmp_path / "outer"
    (outer / ".git").mkdir(parents=True)
    write(outer / ".gitignore", "versions/\n*.py\n")
    root = outer / "versions" / "lib"
    write(root / "mod.py", "def mod():\n    pass\n")
    idx = build(root, tmp_path)
    assert indexed(idx, root) == {"mod.py"}


def test_ignore_patterns_and_nested_workspace_folders(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    write(outer / "a.py", "def a():\n    pass\n")
    write(outer / "skip_me" / "b.py", "def b():\n    pass\n")
    write(inner / "c.py", "def c():\n    pass\n")
    idx = RepoIndex([outer, inner], cache_dir=tmp_path / "cache", ignore_patterns=["skip_me/"])
    idx.build()
    files = idx.files()
    assert files.count(str(inner / "c.py")) == 1
    assert str(outer / "skip_me" / "b.py") not in files
    why = {s.path: (s.reason, s.detail) for s in idx.skipped}
    assert why[str(inner)][0] == "nested-root"
    assert why[str(outer / "skip_me")] == ("ignored", "ignore_patterns setting")


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_update_never_indexes_through_a_symlinked_folder(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root / "pkg" / "mod.py", "def mod():\n    pass\n")
    os.symlink(root / "pkg", root / "alias")
    idx = build(root, tmp_path)
    assert idx.update(root / "alias" / "mod.py", "def mod():\n    pass\n") is False
    assert [s.path for s in idx.definitions("mod")] == [str(root / "pkg" / "mod.py")]


def test_update_skips_binary_oversized_and_folders(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root / "a.py", "def a():\n    pass\n")
    idx = build(root, tmp_path, max_file_bytes=200)
    write(root / "blob.py", b"\x00\x01binary")
    assert idx.update(root / "blob.py") is False
    assert idx.update(root / "big.py", "x = 1\n" * 100) is False
    (root / "folder").mkdir()
    assert idx.update(root / "folder") is False
    assert indexed(idx, root) == {"a.py"}
    # a file that grows past the limit leaves the index
    assert idx.update(root / "a.py", "def a():\n    pass\n" + "# pad\n" * 50) is True
    assert indexed(idx, root) == set()
