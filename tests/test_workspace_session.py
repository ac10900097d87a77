"""Workspace-aware turns on a real repository copy, the real index and the real model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.workspace_session import TurnRequest, WorkspaceTurn
from contextasm import SegmentKind, SnapshotStore

N_GEN = 12


def _git(root: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, env=env)


def make_repo(dest: Path) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    shutil.copytree(stdlib / "json", dest / "json", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "AGENTS.md").write_text("Keep answers short. Python 3.11.\n", "utf-8")
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "init")
    return dest


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CONTENOX_CACHE_DIR", str(tmp_path / "cache"))
    return make_repo(tmp_path / "repo")


@pytest.fixture()
def ws(repo: Path, tmp_path: Path, llama_session: Any) -> Iterator[WorkspaceTurn]:
    store = SnapshotStore(tmp_path / "snaps", 1 << 30)
    yield WorkspaceTurn(repo, llama_session, budget=ContextBudget(map_cap=256, code_cap=1536),
                        store=store)


def greedy_after(session: Any, tokens: list[int]) -> tuple[int, list[int]]:
    r = session.prefill(tokens)
    return r.reused_tokens, session.generate(max_tokens=N_GEN).tokens


def cold(session: Any, tokens: list[int]) -> list[int]:
    session.reset()
    return greedy_after(session, tokens)[1]


def edit_file(path: Path, old: str, new: str) -> str:
    text = path.read_text("utf-8")
    assert old in text
    text = text.replace(old, new, 1)
    path.write_text(text, "utf-8")
    return text


def test_body_edit_makes_only_the_diff_onward_new(ws: WorkspaceTurn, repo: Path) -> None:
    s = ws.session
    target = repo / "json" / "decoder.py"
    turn = TurnRequest("What does JSONObject return?", file=target, line=140, max_tokens=N_GEN)
    before = ws.assemble(turn)
    s.reset()
    s.prefill(before.tokens)

    old, new = (
        "    s, end = s_and_end\n    pairs = []",
        "    s, end = s_and_end  # touched\n    pairs = []",
    )
    text = edit_file(target, old, new)
    ws.index.update(str(target), text)
    after = ws.assemble(turn)

    assert (
        after.segment(SegmentKind.REPO_MAP).token_hash
        == before.segment(SegmentKind.REPO_MAP).token_hash
    )
    diff = after.segment(SegmentKind.DIFF)
    assert diff is not None and "touched" in diff.text
    n, reason = after.manifest.reusable_prefix(before.manifest)
    assert n == diff.token_start and "diff" in reason

    reused, warm = greedy_after(s, after.tokens)
    assert diff.token_start <= reused < diff.token_end
    assert warm == cold(s, after.tokens)


def test_signature_edit_misses_from_the_repo_map(ws: WorkspaceTurn, repo: Path) -> None:
    s = ws.session
    target = repo / "json" / "decoder.py"
    turn = TurnRequest("Explain the scanner.", file=target, line=70, max_tokens=N_GEN)
    before = ws.assemble(turn)
    s.reset()
    s.prefill(before.tokens)

    scanner = repo / "json" / "scanner.py"
    sig = "def py_make_scanner(context):"
    assert sig in before.segment(SegmentKind.REPO_MAP).text  # type: ignore[union-attr]
    text = edit_file(scanner, sig, "def py_make_scanner(context, strict_mode=None):")
    ws.index.update(str(scanner), text)
    after = ws.assemble(turn)

    old_map = before.segment(SegmentKind.REPO_MAP)
    new_map = after.segment(SegmentKind.REPO_MAP)
    assert old_map is not None and new_map is not None
    assert "strict_mode" in new_map.text and new_map.token_hash != old_map.token_hash
    n, reason = after.manifest.reusable_prefix(before.manifest)
    assert n == new_map.token_start and "repo map" in reason

    reused, warm = greedy_after(s, after.tokens)
    # Everything before the map is reused, in whole chunks (the map need not start on one).
    chunk = s.reuse_granularity
    assert new_map.token_start // chunk * chunk <= reused < new_map.token_end
    assert warm == cold(s, after.tokens)


def test_second_ask_restores_the_stable_prefix_from_disk(ws: WorkspaceTurn, repo: Path) -> None:
    s = ws.session
    turn = TurnRequest(
        "What is JSONDecodeError?", file=repo / "json" / "__init__.py", line=10, max_tokens=4
    )
    s.reset()
    first = ws.ask(turn, lambda _p: None)
    assert first.metrics["restoredFromSnapshot"] == 0
    stable = first.metrics["stableTokens"]
    assert stable > 0
    if s.snapshots_past_window is False and stable > s._model.n_swa:
        # This CPU restores a sliding window inexactly (engine/llama/snapshots.py): the
        # stable prefix is not saved, and the next process prefills it again.
        assert first.metrics["stableSnapshotSaved"] is False
        s.reset()
        second = ws.ask(turn, lambda _p: None)
        assert second.metrics["restoredFromSnapshot"] == 0 and second.text == first.text
        return
    assert first.metrics["stableSnapshotSaved"] is True

    s.reset()  # what a new process starts with
    explained = ws.explain(turn)[1]
    assert explained.totals.reused == stable
    assert {r.label: r.status for r in explained.rows}["system"] == "cached"

    second = ws.ask(turn, lambda _p: None)
    assert second.metrics["restoredFromSnapshot"] == stable
    assert second.metrics["reusedTokens"] >= stable
    assert (
        second.metrics["newTokens"]
        == first.metrics["promptTokens"] - second.metrics["reusedTokens"]
    )
    assert second.text == first.text


def _cli(*args: str, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_cli_ask_twice_reuses_the_stable_prefix(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    env = {**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cache")}
    args = (
        "ask",
        "Where is the JSON scanner?",
        "--workspace",
        str(repo),
        "--map-tokens",
        "256",
        "--max-tokens",
        "4",
        "--json",
    )
    first = _cli(*args, env=env)["metrics"]
    second = _cli(*args, env=env)["metrics"]
    assert first["reusedTokens"] == 0
    if not first["stableSnapshotSaved"]:
        # Only where this CPU restores a sliding window inexactly, which model info says.
        info = _cli("model", "info", "--json", env=env)
        assert info["exactReuse"]["snapshotsPastWindow"].startswith("refused"), info
        assert second["restoredFromSnapshot"] == 0
        return
    assert second["restoredFromSnapshot"] == first["stableTokens"] > 0
    assert second["newTokens"] < first["newTokens"]

    explained = _cli(
        "explain-context",
        "--workspace",
        str(repo),
        "--map-tokens",
        "256",
        "--question",
        "Where is the JSON scanner?",
        "--json",
        env=env,
    )
    assert explained["cachedFrom"] == "snapshot"
    statuses = {row["label"]: row["status"] for row in explained["segments"]}
    assert statuses["system"] == statuses["repo map"] == "cached"
    assert statuses["user"] == "new"


def test_cli_rejects_file_outside_workspace(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "elsewhere.py"
    outside.write_text("x = 1\n", "utf-8")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "contenox_lsp.cli",
            "ask",
            "q",
            "--workspace",
            str(repo),
            "--file",
            str(outside),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert out.returncode == 1
    assert "outside the workspace" in out.stderr
    assert out.stdout == ""


def test_cli_ask_streams_the_answer_and_summarises_on_stderr(tmp_path: Path) -> None:
    """The README's main job: the answer on stdout, one summary line on stderr."""
    repo = make_repo(tmp_path / "repo")
    out = subprocess.run(
        [sys.executable, "-m", "contenox_lsp", "ask", "Where is the JSON scanner?",
         "--workspace", str(repo), "--map-tokens", "128", "--max-tokens", "4"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("\n")
    summary = [ln for ln in out.stderr.splitlines() if "prompt tokens reused" in ln]
    assert len(summary) == 1 and "ttft" in summary[0], out.stderr


def test_a_test_output_leads_the_question_code_with_its_traceback(
    ws: WorkspaceTurn, repo: Path, tmp_path: Path
) -> None:
    decoder = (repo / "json" / "decoder.py").read_text("utf-8").split("\n")
    raw_decode = next(i for i, ln in enumerate(decoder) if "def raw_decode(" in ln)
    raising = next(i for i in range(raw_decode, len(decoder))
                   if "raise JSONDecodeError" in decoder[i]) + 1
    trace = ("Traceback (most recent call last):\n"
             f'  File "json/decoder.py", line {raising}, in raw_decode\n'
             "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n")
    turn = TurnRequest("Why does this fail?", max_tokens=N_GEN,
                       outputs=(("test", "pytest", trace),))
    asm = ws.assemble(turn)
    labels = [s.label for s in asm.segments]
    assert "test output pytest" in labels
    [code] = [s for s in asm.segments if s.label == "code (question)"]
    first = code.text.split("\n")[2]  # after the segment's heading and a blank line
    assert first.endswith("JSONDecoder.raw_decode (in the output's traceback)")
    plain = ws.assemble(TurnRequest("Why does this fail?", max_tokens=N_GEN))
    assert "traceback" not in "".join(s.text for s in plain.segments)

    # The CLI: --test-output FILE, or '-' for stdin; a file it cannot read is a clear error.
    env = {**os.environ, "CONTENOX_CACHE_DIR": str(tmp_path / "cli-cache")}
    base = [sys.executable, "-m", "contenox_lsp.cli", "explain-context", "--workspace",
            str(repo), "--question", "Why does this fail?", "--json"]
    out = subprocess.run([*base, "--test-output", "-"], input=trace, capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "test output stdin" in [s["label"] for s in json.loads(out.stdout)["segments"]]
    missing = subprocess.run([*base, "--test-output", str(tmp_path / "nope.log")],
                             capture_output=True, text=True, env=env, timeout=600)
    assert missing.returncode == 1
    error = json.loads(missing.stdout)["error"]  # with --json, the error is JSON too
    assert error["code"] == "invalid_params"
    assert error["message"].startswith("--test-output: cannot read")
