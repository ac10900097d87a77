"""A small JSON object on disk that caches facts by key (probe results, remembered rates).

A missing or damaged file reads as empty: these are hints that can be measured again, never
a reason to fail. Writes go to a temporary file that is renamed into place, so a reader never
sees half a file.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def read_map(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_entry(path: Path, key: str, value: Any) -> None:
    """Set ``key`` to ``value`` in the file (a failure is logged, not raised)."""
    doc = read_map(path)
    doc[key] = value
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not write %s: %s", path, exc)
