"""``contenox-lsp eval completion``: the CrossCodeEval-style tasks it builds from a repository,
and one end-to-end run through the real server and the embedded model beside the window-only
prompt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contenox_bench.completion_eval import score, typed_text
from contenox_bench.completion_tasks import CompletionTask, build_tasks

HELPERS = '''"""Helpers."""

LIMIT = 10


def clamp(value, low=0):
    return max(low, min(value, LIMIT))


class Window:
    def __init__(self, size):
        self.size = clamp(size)
'''

USER = '''"""Uses the helpers."""
from shapes.helpers import Window, clamp as squeeze
from . import helpers
from .helpers import LIMIT
import os


def area(w):
    # clamp here is a comment, not code
    side = squeeze(w, low=1)
    frame = Window(side * 2)
    text = "Window in a string"
    return side * frame.size + LIMIT


def other(obj):
    return obj.clamp(3) + len(os.sep)
'''


def _repo(root: Path) -> Path:
    (root / "shapes").mkdir(parents=True)
    (root / "shapes" / "__init__.py").write_text("", encoding="utf-8")
    (root / "shapes" / "helpers.py").write_text(HELPERS, encoding="utf-8")
    (root / "shapes" / "user.py").write_text(USER, encoding="utf-8")
    return root


def test_tasks_are_the_uses_of_definitions_imported_from_the_repository(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    tasks = build_tasks(root, n=10, seed=0, per_file=10)
    lines = USER.split("\n")
    got = {(t.path, lines[t.line][: t.character], t.expected, t.identifier, t.defined_in)
           for t in tasks}
    assert got == {
        ("shapes/user.py", "    side = ", "squeeze(w, low=1)", "squeeze", "shapes/helpers.py"),
        ("shapes/user.py", "    frame = ", "Window(side * 2)", "Window", "shapes/helpers.py"),
        ("shapes/user.py", "    return side * frame.size + ", "LIMIT", "LIMIT",
         "shapes/helpers.py"),
    }  # not: import lines, the comment, the string, obj.clamp, os (not the repository's)
    assert [t.to_dict() for t in build_tasks(root, n=2, seed=3, per_file=10)] == \
        [t.to_dict() for t in build_tasks(root, n=2, seed=3, per_file=10)]
    assert len(build_tasks(root, n=10, seed=0, per_file=1)) == 1


def test_the_line_is_cut_at_the_cursor_and_scored_on_its_first_line() -> None:
    task = CompletionTask("m.py:2", "m.py", 1, 11, "squeeze(w, low=1)", "squeeze", "h.py")
    assert typed_text("a\n    side = squeeze(w, low=1)\nb", task) == "a\n    side = \nb"
    exact = score("squeeze(w, low=1)\nmore", task)
    assert exact["exact"] and exact["identifier"] and exact["edit_similarity"] == 100
    near = score("squeeze(w)", task)
    assert not near["exact"] and near["identifier"] and 0 < near["edit_similarity"] < 100
    assert score(None, task) == {"answer": "", "exact": False, "edit_similarity": 0.0,
                                 "identifier": False}


def test_eval_completion_runs_the_server_and_both_baselines(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    out = tmp_path / "out"
    env = {**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", "eval", "completion", "--repo", str(root),
         "--n", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((out / "completion-eval.json").read_text(encoding="utf-8"))
    assert doc["summary"]["tasks"] == 2 and len(doc["rows"]) == 2
    for system in ("server", "window", "bm25"):
        m = doc["summary"][system]
        assert 0 <= m["exact_match"] <= 1 and 0 <= m["edit_similarity"] <= 100
        assert 0 <= m["identifier_match"] <= 1
    planned = json.loads((out / "completion-tasks.json").read_text(encoding="utf-8"))
    assert [r["task"] for r in doc["rows"]] == planned["tasks"]
    for row in doc["rows"]:  # what the server's prompt carried, next to what its place chose
        assert isinstance(row["server"]["prompt"]["lastContextFiles"], list)
        assert row["server"]["prompt"]["lastDecodeTokens"] >= 0
        assert isinstance(row["place_context_files"], list)
    # The same place gives the same prompt whatever the eval asked before it.
    assert doc["summary"]["server_context_as_chosen"] == 2
    assert "window only" in proc.stdout and "BM25" in proc.stdout and "exact match" in proc.stdout
    for other in ("window", "bm25"):
        diff = doc["summary"][f"server_minus_{other}"]["exact_match"]
        assert diff["ci95"][0] <= diff["mean"] <= diff["ci95"][1]
        duel = doc["summary"][f"server_vs_{other}_exact"]
        assert duel["won"] + duel["lost"] <= 2
    again = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", "eval", "completion", "--repo",
         str(tmp_path / "nowhere"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode != 0 and "no such repository folder" in again.stderr
