"""``contenox-lsp eval next-edit``: a real commit replayed through the real server on the
embedded model (a base model: no quality threshold, the figures show the machinery); the
replay itself types the commit faithfully; bad task files are clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contenox_bench.edit_replay import apply_edit, apply_hunk, hunks, load_tasks

CLI = [sys.executable, "-m", "contenox_lsp.cli"]


def test_the_shipped_tasks_replay_to_their_commits() -> None:
    tasks = load_tasks(None)
    assert len(tasks) >= 3
    for t in tasks:
        text = t["before"]
        todo = hunks(t["before"], t["after"])
        assert len(todo) >= 2, t["id"]  # a next hunk to predict
        for h in todo:
            text = apply_hunk(text, h)
        assert text == t["after"], t["id"]


def test_an_lsp_edit_applies_at_its_range() -> None:
    edit = {"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 5}},
            "text": "total"}
    assert apply_edit("def f(x):\n    x = 1\n", edit) == "def f(x):\n    total = 1\n"


@pytest.mark.timeout(900)
def test_eval_next_edit_replays_a_commit_on_the_embedded_model(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([*CLI, "eval", "next-edit", "--task", "contenox-b15cfd7",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exact-region match" in proc.stdout and "reversals dropped" in proc.stdout
    doc = json.loads((out / "next-edit-eval.json").read_text("utf-8"))
    s = doc["summary"]
    assert doc["format"] == "base"
    assert s["tasks"] == 1 and s["requests"] == 3 and s["scored"] == 2  # 3 hunks
    assert 0 <= s["exact"] <= s["shown"] <= s["requests"]
    assert 0.0 <= s["reversal_rate"] <= 1.0
    for row in doc["rows"]:
        assert row["prompt_tokens"] > 0 and row["decode_tokens"] > 0
    # After the first request the idle warm-up ran: a later request prefills its region only.
    later = doc["rows"][1:]
    assert any(r["warm"] and r["new_tokens"] < r["prompt_tokens"] // 2 for r in later)


def test_bad_task_files_are_clear_errors(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, "eval", "next-edit", *args, "--out", str(tmp_path / "o")],
                              capture_output=True, text=True, timeout=120)

    missing = run("--tasks", str(tmp_path / "absent.json"))
    assert missing.returncode != 0 and "no such tasks file" in missing.stderr
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({"tasks": [{"id": "x", "path": "../outside.py",
                                             "before": "a\n", "after": "b\n"}]}), "utf-8")
    bad = run("--tasks", str(forged))
    assert bad.returncode != 0 and "inside the workspace" in bad.stderr
    assert not (tmp_path / "outside.py").exists()
    unknown = run("--task", "no-such-task")
    assert unknown.returncode != 0 and "no such task: no-such-task" in unknown.stderr
    assert not (tmp_path / "o" / "next-edit-eval.json").exists()
