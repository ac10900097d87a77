"""The ctxeval task set: reading a ``tasks.json`` and laying a task's tree out as a folder
(fields: ``../shared/ctxeval/README.md``)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def load_tasks(path: Path) -> list[dict[str, Any]]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    tasks = doc["tasks"] if isinstance(doc, dict) else doc
    if not isinstance(tasks, list) or not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def workspace_of(task: Mapping[str, Any], base: Path, scratch: Path) -> Path:
    """The task's tree as a folder: extracted from its archive into ``scratch`` (the archive
    holds one top folder named after the task) or the folder the task names."""
    src = base / str(task["tree"])
    if src.is_dir():
        return src
    dest = scratch / str(task["id"])
    if not dest.is_dir():
        with tarfile.open(src) as tar:
            tar.extractall(scratch, filter="data")  # no absolute paths, links out, devices
    return dest


def repo_of(task: Mapping[str, Any]) -> str:
    return str(task.get("repo") or task["id"].rsplit("-", 1)[0])

