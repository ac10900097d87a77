"""Imports resolved to workspace files (``repo_index.imports``) and what the graph walk at the
cursor makes of them (``CodeFinder.around_cursor``): a name defined in several files is
followed to the one the module imports it from, on the real repo index."""

from __future__ import annotations

import os
from pathlib import Path

from contenox_lsp.turn import read_disk_text
from repo_index import RepoIndex
from repo_index.code_search import MAX_DEFINERS, CodeFinder
from repo_index.imports import Import, ModuleFiles, python_imports, scope_of

SOURCE = '''\
import os.path as osp, json
from .sibling import (
    one as uno,
    two,
)
from .. import parent_mod
from pkg.core import *
"from fake import nothing"


def f():
    from pkg.util import helper  # a local import counts too
    return helper()
'''

EXPECTED = [
    Import("os.path", None), Import("json", None), Import("sibling", "one", 1),
    Import("sibling", "two", 1), Import("", "parent_mod", 2), Import("pkg.util", "helper"),
]


def test_imports_are_read_from_the_syntax_tree_and_from_lines_when_it_does_not_parse() -> None:
    assert python_imports(SOURCE) == EXPECTED
    broken = SOURCE + "\ndef g(:\n"  # mid-edit: no syntax tree, the lines still say it
    assert python_imports(broken) == EXPECTED


def test_modules_resolve_to_files_relative_absolute_and_nearest_copy() -> None:
    root = os.path.join(os.sep, "w")
    paths = [os.path.join(root, *p.split("/")) for p in (
        "src/pkg/__init__.py", "src/pkg/util.py", "src/pkg/sub/__init__.py",
        "src/pkg/sub/mod.py", "src/pkg/sub/sibling.py", "vendor/pkg/util.py", "README.md")]
    files = ModuleFiles(frozenset(paths))
    mod = paths[3]
    assert files.resolve(Import("pkg.util", "helper"), mod) == [paths[1]]  # not vendor/'s
    assert files.resolve(Import("sibling", "one", 1), mod) == [paths[4]]
    assert files.resolve(Import("", "util", 2), mod) == [paths[0], paths[1]]  # pkg, pkg/util
    assert files.resolve(Import("pkg", "sub"), mod) == [paths[0], paths[2]]
    assert files.resolve(Import("json", None), mod) == []
    scope = scope_of([Import("pkg.util", "helper"), Import("pkg.sub", None),
                      Import("json", "loads")], mod, files)
    assert scope.names == {"helper": frozenset({paths[1]})}  # json is not the workspace's


def _definer(i: int) -> str:
    return f"def helper(x):\n    return x + {i}\n\n\nclass Thing{i}:\n    pass\n"


def test_the_walk_follows_a_common_name_to_the_module_it_is_imported_from(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    # More files define ``helper`` than the walk follows by name alone.
    for i in range(MAX_DEFINERS + 1):
        (pkg / f"m{i}.py").write_text(_definer(i), "utf-8")
    (pkg / "__init__.py").write_text("from .m3 import helper\n", "utf-8")
    tests = tmp_path / "tests"
    tests.mkdir()
    direct = tests / "test_direct.py"
    direct.write_text("from pkg.m5 import helper\n\n\ndef test_it():\n    assert helper(1)\n")
    reexported = tests / "test_reexported.py"
    reexported.write_text("from pkg import helper\n\n\ndef test_it():\n    assert helper(1)\n")
    plain = tests / "test_plain.py"
    plain.write_text("def test_it():\n    assert helper(1)\n")
    index = RepoIndex([tmp_path], use_cache=False)
    index.build()
    finder = CodeFinder(index, read_disk_text)

    def helpers(test: Path) -> list[str]:
        return [Path(s.path).name for s in finder.around_cursor(str(test), 4)
                if s.chunk.name == "helper"]

    assert helpers(direct) == ["m5.py"]
    assert helpers(reexported) == ["m3.py"]  # through the package's __init__
    assert helpers(plain) == []  # by name alone: too many definers to follow
