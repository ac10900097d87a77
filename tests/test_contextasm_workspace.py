"""Gathering inputs from a workspace: system prompt override, instructions order and cap, git
diff vs HEAD, untracked files, unsaved buffers, non-git folders, determinism."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from contenox_lsp.turn import TurnSpec, WorkspaceState, gather, turn_at
from contenox_lsp.workspace_reads import (
    buffers_diff,
    current_diff,
    git_diff_head,
    load_pin,
    load_repo_instructions,
    load_system_prompt,
    untracked_files,
)
from contextasm import DEFAULT_SYSTEM_PROMPT, default_tool_schemas
from contextasm.difftools import focus_order, parse_diff

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(root: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "parse.py").write_text(
        "def parse(text):\n" + "".join(f"    x{i} = {i}\n" for i in range(40)) + "    return x0\n"
    )
    (root / "README.md").write_text("# demo\n")
    (root / ".gitignore").write_text("*.log\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_system_prompt_default_and_override(tmp_path: Path):
    assert load_system_prompt(tmp_path) == DEFAULT_SYSTEM_PROMPT
    (tmp_path / ".contenox").mkdir()
    (tmp_path / ".contenox" / "system.md").write_text("   \n")
    assert load_system_prompt(tmp_path) == DEFAULT_SYSTEM_PROMPT  # blank file: default
    (tmp_path / ".contenox" / "system.md").write_text("Be brief.\n")
    assert load_system_prompt(tmp_path) == "Be brief.\n"


def test_repo_instructions_priority_and_cap(tmp_path: Path):
    assert load_repo_instructions(tmp_path) is None
    (tmp_path / "CONTRIBUTING.md").write_text("contributing\n")
    assert load_repo_instructions(tmp_path).source == "CONTRIBUTING.md"
    (tmp_path / ".contenox").mkdir()
    (tmp_path / ".contenox" / "instructions.md").write_text("contenox\n")
    assert load_repo_instructions(tmp_path).source == ".contenox/instructions.md"
    (tmp_path / "AGENTS.md").write_text("line\n" * 10_000)
    instr = load_repo_instructions(tmp_path, max_chars=1000)
    assert instr is not None and instr.source == "AGENTS.md"
    assert len(instr.text) < 1100 and instr.text.endswith("(truncated at 1000 chars)\n")
    assert instr.text.startswith("line\nline\n")


def test_default_tool_schemas():
    schemas = default_tool_schemas()
    assert [s["name"] for s in schemas] == ["explain", "fix", "docstring", "pin", "unpin"]
    for s in schemas:
        assert s["parameters"]["type"] == "object"
        assert set(s["parameters"]["required"]) <= set(s["parameters"]["properties"])
    assert default_tool_schemas() == schemas  # fresh, equal copies


@needs_git
def test_git_diff_untracked_and_buffers(repo: Path):
    assert current_diff(repo) == ""
    parse = repo / "pkg" / "parse.py"
    parse.write_text(parse.read_text().replace("x5 = 5", "x5 = 55"))
    (repo / "pkg" / "new.py").write_text("NEW = 1\n")
    (repo / "debug.log").write_text("ignored\n")
    (repo / "blob.bin").write_bytes(b"\0\1\2" * 10)
    diff = current_diff(repo, {str(repo / "README.md"): "# demo\n\nunsaved line\n"})
    assert "diff --git a/pkg/parse.py b/pkg/parse.py" in diff
    assert "-    x5 = 5\n+    x5 = 55\n" in diff
    assert "diff --untracked a/pkg/new.py b/pkg/new.py" in diff and "+NEW = 1" in diff
    assert "debug.log" not in diff
    assert "new file (binary, 30 bytes, not shown)" in diff
    assert "diff --unsaved a/README.md b/README.md" in diff and "+unsaved line" in diff
    # Order: tracked, untracked (sorted), buffers.
    assert diff.index("pkg/parse.py") < diff.index("blob.bin") < diff.index("pkg/new.py")
    assert diff.index("pkg/new.py") < diff.index("--unsaved")
    assert untracked_files(repo) == ["blob.bin", "pkg/new.py"]
    # Deterministic, and parseable into hunks by the budget step.
    assert current_diff(repo, {"README.md": "# demo\n\nunsaved line\n"}) == diff
    parsed = parse_diff(diff)
    assert [f.path for f in parsed.files] == ["pkg/parse.py", "blob.bin", "pkg/new.py", "README.md"]
    order = focus_order(parsed, file_path="pkg/parse.py", line=7, question="")
    assert order[0] == (0, 0)


@needs_git
def test_buffer_equal_to_disk_is_not_a_diff(repo: Path):
    text = (repo / "README.md").read_text()
    assert buffers_diff(repo, {"README.md": text}) == ""
    assert buffers_diff(repo, {"README.md": text.replace("\n", "\r\n")}) == ""
    assert buffers_diff(repo, {"/somewhere/else.py": "x"}) == ""  # outside the workspace


@needs_git
def test_subdirectory_of_a_repo_is_relative(repo: Path):
    parse = repo / "pkg" / "parse.py"
    parse.write_text(parse.read_text() + "# tail\n")
    (repo / "README.md").write_text("# changed\n")
    diff = git_diff_head(repo / "pkg")
    assert "a/parse.py" in diff and "README" not in diff


def test_non_git_folder_has_only_buffer_diffs(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    assert current_diff(tmp_path) == ""
    diff = current_diff(tmp_path, {"a.py": "x = 2\n", "b.py": "y = 1\n"})
    assert "diff --unsaved a/a.py b/a.py" in diff and "-x = 1\n+x = 2" in diff
    assert "--- /dev/null\n+++ b/b.py" in diff  # a buffer never saved is a new file


def test_pins(tmp_path: Path):
    text = "\n".join(f"line {i}" for i in range(1, 101))
    (tmp_path / "m.py").write_text(text + "\n")
    pin = load_pin(tmp_path, "m.py", 10, 12)
    assert pin is not None and (pin.start_line, pin.end_line) == (10, 12)
    assert pin.text == "line 10\nline 11\nline 12"
    whole = load_pin(tmp_path, str(tmp_path / "m.py"))
    assert whole is not None and whole.path == "m.py" and whole.end_line == 100
    from_buffer = load_pin(tmp_path, "m.py", 1, 1, buffers={str(tmp_path / "m.py"): "edited\n"})
    assert from_buffer is not None and from_buffer.text == "edited"
    assert load_pin(tmp_path, "missing.py") is None


@needs_git
def test_the_turn_inputs_are_deterministic(repo: Path):
    """The product's pipeline (``contenox_lsp.turn``): the same editor state gives the same
    inputs, however the file is named."""
    (repo / "AGENTS.md").write_text("Use tabs.\n")
    path = (repo / "pkg" / "parse.py").resolve()
    edited = path.read_text() + "# edit\n"
    state = WorkspaceState(roots=(repo.resolve(),), open_buffers={path: edited})
    turns = [turn_at(state.roots, path, "why?", text=edited, line=9) for _ in range(2)]
    a, b = (gather(state, t, None) for t in turns)
    assert a == b
    assert a.user.file_path == "pkg/parse.py" and a.user.line == 10
    assert a.user.cursor_context is not None and "x8 = 8" in a.user.cursor_context
    assert a.repo_instructions is not None and a.repo_instructions.source == "AGENTS.md"
    assert "+# edit" in a.diff and "AGENTS.md" in a.diff  # untracked AGENTS.md
    assert a.tool_schemas[0]["name"] == "explain"
    assert a.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert gather(state, TurnSpec(question="why?"), None).user.file_path is None
