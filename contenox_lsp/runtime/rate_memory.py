"""The prefill rate that bounds the question's code, kept across restarts.

``questionCodeMs`` bounds the code an ask's question pulls in by what the engine prefills in
that time. A measured rate moves only outside a band (``SteadyRate``), but a fresh process
has measured nothing, so a restarted server built a different (unbounded) prompt than the
warm one for the same editor state. The rate is therefore remembered per engine identity
(profile id and backend build, which names the CPU features the kernels use) in
``<cache dir>/prefill-rates.json``: a restarted server starts from the rate the last one
settled on, and the prompt stays a function of the editor state and the profile.
"""

from __future__ import annotations

from pathlib import Path

from engine.json_map import read_map, write_entry

FILE_NAME = "prefill-rates.json"


def rate_key(profile_id: str, backend_version: str) -> str:
    return f"{profile_id}|{backend_version}"


def load_rate(path: Path, key: str) -> float | None:
    """The remembered rate (tokens/s) for ``key``; None when there is none (or the file is
    damaged: a lost hint, never an error)."""
    value = read_map(path).get(key)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def store_rate(path: Path, key: str, tokens_per_s: float) -> None:
    """Remember ``tokens_per_s`` for ``key``."""
    write_entry(path, key, round(tokens_per_s, 3))
