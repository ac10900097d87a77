"""The bench profile: the user's profile plus the sizes the run needs, as a TOML file the
server can load (so all four systems of the trace run on identical settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine import EMBEDDED_MODEL, Profile, load_profile


def bench_profile(
    path: str | None, model: str | None, n_ctx: int
) -> tuple[Profile, dict[str, Any]]:
    """(profile, the overrides applied): greedy sampling and a context large enough."""
    profile = load_profile(path)
    if model:
        profile = profile.with_overrides({"model.path": model}, source="cli --model")
    overrides: dict[str, Any] = {"sampler.temperature": 0.0}  # warm == cold needs greedy
    if profile.prompt_format == "auto":
        # The trace's baselines rebuild prompts with the gemma markers; the embedded model
        # reads them (it is Gemma's base model), and every section then measures one framing.
        overrides["prompt.format"] = "gemma"
    if profile.n_ctx < n_ctx:
        overrides["context.n_ctx"] = n_ctx
    return profile.with_overrides(overrides, source="bench"), overrides


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # JSON string escapes are valid TOML basic-string escapes


def write_toml(profile: Profile, path: Path) -> Path:
    sections: dict[str, list[str]] = {}
    for name, value in sorted(profile.values.items()):
        section, key = name.split(".", 1)
        if name == "model.path" and value != EMBEDDED_MODEL:
            value = str(profile.resolve_path(str(value)).resolve())
        if name in ("cache.snapshot_dir", "openvino.model_dir") and value:
            # Relative to the user's profile file, which the written one is not next to.
            value = str(profile.resolve_path(str(value)).resolve())
        sections.setdefault(section, []).append(f"{key} = {_toml_value(value)}")
    text = "\n".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in sections.items())
    path.write_text(text, encoding="utf-8")
    load_profile(path)  # the server must accept it: fail here, not in the server
    return path
