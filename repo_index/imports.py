"""What a Python module imports, resolved to the workspace's files.

The symbol graph matches names by name (what tree-sitter tags give), so a name defined in
several files (``close``, ``parse``, ``Request``) is ambiguous. A module's imports say which one
it means: ``from pkg.utils import make_str`` names the file (and a package's ``__init__``
that imports it from elsewhere names that file in turn).

Imports are read with Python's ``ast`` when the file parses, else line by line (an editor's
buffer is often mid-edit); imports anywhere in the module count (a function's too), strings and
comments never do.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

# ``from .a.b import (x as y, z)`` / ``import a.b as c, d`` on one logical line.
_FROM = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+\(?([^)#]*)")
_IMPORT = re.compile(r"^\s*import\s+([\w.,\s]+?)\s*(?:#.*)?$")


@dataclass(frozen=True)
class Import:
    """``from {'.' * level}{module} import {name}`` (``name`` None: ``import {module}``)."""

    module: str
    name: str | None
    level: int = 0


def python_imports(text: str) -> list[Import]:
    """The imports of a Python module's text, in order."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return _imports_by_line(text)
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Import(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out += [Import(node.module or "", a.name, node.level) for a in node.names
                    if a.name != "*"]
    return out


def _imports_by_line(text: str) -> list[Import]:
    out: list[Import] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if "(" in line and line.lstrip().startswith("from") and ")" not in line:
            while i + 1 < len(lines) and ")" not in line:  # a parenthesised name list
                i += 1
                line += " " + lines[i]
        i += 1
        m = _FROM.match(line)
        if m:
            for part in m.group(3).split(","):
                name = part.split(" as ")[0].strip()
                if name.isidentifier():
                    out.append(Import(m.group(2), name, len(m.group(1))))
            continue
        m = _IMPORT.match(line)
        if m:
            for part in m.group(1).split(","):
                module = part.split(" as ")[0].strip()
                if module and all(p.isidentifier() for p in module.split(".")):
                    out.append(Import(module, None))
    return out


@dataclass
class ModuleFiles:
    """Dotted module names → the workspace's files (``a/b.py`` and ``a/b/__init__.py`` are
    ``a.b``; so are ``src/a/b.py`` and any other prefix: a module is found by its suffix)."""

    paths: frozenset[str]
    # a module's last name -> (its dotted path's parts, file): one entry per file
    _by_last: dict[str, list[tuple[list[str], str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path in sorted(self.paths):
            parts = path.replace(os.sep, "/").split("/")
            stem, ext = os.path.splitext(parts[-1])
            if ext not in (".py", ".pyi"):
                continue
            parts = parts[:-1] if stem == "__init__" else [*parts[:-1], stem]
            if parts:
                self._by_last.setdefault(parts[-1], []).append((parts, path))

    def resolve(self, imp: Import, source: str) -> list[str]:
        """The files ``imp`` (in ``source``) refers to: the module, and for ``from m import
        x`` also ``m/x.py`` when ``x`` is a submodule. Several candidates (vendored copies):
        those sharing the most folders with ``source``."""
        if imp.level:
            base = os.path.dirname(source)
            for _ in range(imp.level - 1):
                base = os.path.dirname(base)
            stem = os.path.join(base, *imp.module.split(".")) if imp.module else base
            found = [p for p in (stem + ".py", stem + ".pyi", os.path.join(stem, "__init__.py"))
                     if p in self.paths]
            if imp.name is not None:
                sub = os.path.join(stem, imp.name)
                found += [p for p in (sub + ".py", os.path.join(sub, "__init__.py"))
                          if p in self.paths]
            return found
        found = self._nearest(imp.module, source)
        if imp.name is not None:
            found += self._nearest(f"{imp.module}.{imp.name}", source)
        return found

    def _nearest(self, module: str, source: str) -> list[str]:
        dotted = module.split(".")
        candidates = [path for parts, path in self._by_last.get(dotted[-1], ())
                      if parts[-len(dotted):] == dotted]
        if len(candidates) <= 1:
            return list(candidates)
        folders = source.replace(os.sep, "/").split("/")[:-1]

        def shared(path: str) -> int:
            n = 0
            for a, b in zip(folders, path.replace(os.sep, "/").split("/"), strict=False):
                if a != b:
                    break
                n += 1
            return n

        best = max(map(shared, candidates))
        return [p for p in candidates if shared(p) == best]


@dataclass(frozen=True)
class ImportScope:
    """What one module's imports say about the names it uses: a name imported with ``from m
    import name`` → the files of ``m`` (and ``m/name.py`` when it is a submodule). Only these
    exact imports narrow a name's definitions: preferring every module a file imports
    (``import m``) for the attributes it uses was measured too (leave-one-repository-out,
    153 tasks) and moved nothing but noise."""

    names: dict[str, frozenset[str]]


def scope_of(imports: Iterable[Import], source: str, files: ModuleFiles) -> ImportScope:
    names: dict[str, set[str]] = {}
    for imp in imports:
        if imp.name is None:
            continue
        found = files.resolve(imp, source)
        if found:
            names.setdefault(imp.name, set()).update(found)
    return ImportScope({k: frozenset(v) for k, v in names.items()})
