"""CrossCodeEval-style completion tasks from a Python repository: lines that use a definition
imported from another file of the same repository, with the cursor right before that
identifier and the rest of the line to complete.

A candidate is the first use, on a line outside import statements, of a name bound by
``from X import name [as local]`` where ``X`` is a module of the repository (absolute, with or
without a ``src/`` layout, or relative) and ``name`` is defined at its top level (a function, a
class or an assignment). Attribute names (``obj.name``), strings and comments do not count.
Lines whose text before the cursor is not ASCII are left out (editor position units are then
plain characters). Sampling is seeded: the same repository and seed give the same tasks.
"""

from __future__ import annotations

import ast
import io
import random
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Folders never searched for source files.
SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", "build", "dist",
             ".tox", ".nox", ".mypy_cache", ".pytest_cache", "site-packages"}
#: The shortest rest of a line worth completing (shorter ones are trivially right or wrong).
MIN_EXPECTED_CHARS = 4


@dataclass(frozen=True)
class CompletionTask:
    id: str
    path: str  # relative to the repository root, "/"-separated
    line: int  # 0-based
    character: int  # the cursor: a str index into the line (ASCII before it)
    expected: str  # the rest of the line from the cursor, trailing blanks off
    identifier: str  # the imported name at the cursor
    defined_in: str  # the file that defines it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def source_files(root: Path) -> list[Path]:
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p in SKIP_DIRS or p.startswith(".") for p in parts[:-1]):
            continue
        out.append(path)
    return out


def module_names(root: Path, files: list[Path]) -> dict[str, Path]:
    """Dotted module name -> file, for the plain and the ``src/`` layout."""
    names: dict[str, Path] = {}
    for path in files:
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        names.setdefault(".".join(parts), path)
        if parts[0] == "src" and len(parts) > 1:
            names.setdefault(".".join(parts[1:]), path)
    return names


def top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _package_of(root: Path, path: Path, level: int) -> list[str]:
    """The package a relative import of ``level`` dots starts from (``pkg/b.py`` and
    ``pkg/__init__.py`` at level 1: ``pkg``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)[:-1]
    drop = level - 1
    return parts[: len(parts) - drop] if drop <= len(parts) else []


def _resolve(root: Path, path: Path, node: ast.ImportFrom, modules: dict[str, Path]
             ) -> Path | None:
    if node.level:
        base = _package_of(root, path, node.level)
        dotted = ".".join([*base, *([node.module] if node.module else [])])
        if base and base[0] == "src":
            dotted = dotted.split(".", 1)[1] if "." in dotted else ""
    else:
        dotted = node.module or ""
    return modules.get(dotted) if dotted else None


def imported_definitions(root: Path, path: Path, tree: ast.Module, modules: dict[str, Path],
                         parsed: dict[Path, ast.Module | None]) -> dict[str, Path]:
    """local name -> the file that defines it, for this file's repository imports."""
    found: dict[str, Path] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _resolve(root, path, node, modules)
        if target is None or target == path:
            continue
        if target not in parsed:
            parsed[target] = _parse(target)
        defs = parsed[target]
        if defs is None:
            continue
        names = top_level_names(defs)
        for alias in node.names:
            if alias.name in names:
                found[alias.asname or alias.name] = target
    return found


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _import_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            end = node.end_lineno or node.lineno
            lines.update(range(node.lineno - 1, end))
    return lines


def candidates_in(root: Path, path: Path, modules: dict[str, Path],
                  parsed: dict[Path, ast.Module | None]) -> list[CompletionTask]:
    tree = parsed.get(path) or _parse(path)
    parsed[path] = tree
    if tree is None:
        return []
    imported = imported_definitions(root, path, tree, modules, parsed)
    if not imported:
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    skip = _import_lines(tree)
    rel = path.relative_to(root).as_posix()
    out: list[CompletionTask] = []
    seen_lines: set[int] = set()
    previous: tokenize.TokenInfo | None = None
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    for tok in tokens:
        prev, previous = previous, tok
        if tok.type != tokenize.NAME or tok.string not in imported:
            continue
        line, col = tok.start[0] - 1, tok.start[1]
        if line in skip or line in seen_lines or line >= len(lines):
            continue
        if prev is not None and prev.type == tokenize.OP and prev.string == ".":
            continue  # an attribute of something else
        before, rest = lines[line][:col], lines[line][col:].rstrip()
        if not before.isascii() or len(rest) < MIN_EXPECTED_CHARS:
            continue
        seen_lines.add(line)
        out.append(CompletionTask(f"{rel}:{line + 1}", rel, line, col, rest, tok.string,
                                  imported[tok.string].relative_to(root).as_posix()))
    return out


def build_tasks(root: Path, n: int, seed: int = 0, per_file: int = 3) -> list[CompletionTask]:
    """Up to ``n`` tasks from ``root``, at most ``per_file`` from one file, seeded."""
    files = source_files(root)
    modules = module_names(root, files)
    parsed: dict[Path, ast.Module | None] = {}
    rng = random.Random(seed)
    pool: list[CompletionTask] = []
    for path in files:
        found = candidates_in(root, path, modules, parsed)
        rng.shuffle(found)
        pool.extend(found[:per_file])
    chosen = rng.sample(pool, min(n, len(pool)))
    return sorted(chosen, key=lambda t: (t.path, t.line))
