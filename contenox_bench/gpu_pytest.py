"""pytest plugin for the GPU check (``contenox_bench/scripts/gpu_check.sh``): every profile a
test loads offloads all layers to the GPU and reads the model from ``$CONTENOX_GPU_MODEL``.

    python -m pytest -p contenox_bench.gpu_pytest tests/test_engine_exact.py
"""

from __future__ import annotations

import os
from typing import Any

import engine
import engine.profile

MODEL_ENV = "CONTENOX_GPU_MODEL"


def pytest_configure(config: Any) -> None:
    original = engine.profile.load_profile
    model = os.environ[MODEL_ENV]

    def load_profile(path: Any = None) -> engine.profile.Profile:
        return original(path).with_overrides(
            {"context.n_gpu_layers": -1, "model.path": model}, source="gpu check")

    engine.load_profile = load_profile
    engine.profile.load_profile = load_profile
