"""The package structure the code relies on: no import cycle, the composition root is the only
module that knows every feature, the benchmark uses the server's public modules only.

The import graph is grimp's (the graph library behind import-linter); it counts every import,
``TYPE_CHECKING`` blocks and function-local imports included. The same check from a shell:
``python -m pytest tests/test_architecture.py``.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("contenox_lsp", "contenox_bench", "contextasm", "engine", "repo_index")

#: What the benchmark may import from the server: the protocol tweaks its LSP client needs,
#: the completion prompt layout (its typing trace rebuilds the server's prompts), and the turn
#: pipeline with its code-segment budget (the context eval scores the prompts it builds).
SERVER_PUBLIC = {"contenox_lsp", "contenox_lsp.protocol", "contenox_lsp.completion.prompt",
                 "contenox_lsp.completion.window", "contenox_lsp.turn",
                 "contenox_lsp.code_segment"}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


def cycles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, ...]]:
    """One shortest cycle through each import edge of ``package`` that closes one."""
    found: set[frozenset[str]] = set()
    out: list[tuple[str, ...]] = []
    for a in sorted(graph.find_descendants(package) | {package}):
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            if not b.startswith(package):
                continue
            chain = graph.find_shortest_chain(importer=b, imported=a)
            if chain is not None and frozenset(chain) not in found:
                found.add(frozenset(chain))
                out.append((a, *chain))
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(graph: grimp.ImportGraph, package: str) -> None:
    assert cycles(graph, package) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    g.add_import(importer="p.c", imported="p.a")
    assert cycles(g, "p") == [("p.a", "p.b", "p.c", "p.a")]


def test_only_the_composition_root_imports_the_handlers(graph: grimp.ImportGraph) -> None:
    importers = {m for m in graph.find_modules_that_directly_import("contenox_lsp.handlers")}
    for handler in graph.find_children("contenox_lsp.handlers"):
        importers |= {m for m in graph.find_modules_that_directly_import(handler)
                      if not m.startswith("contenox_lsp.handlers")}
    assert importers == {"contenox_lsp.app"}


def test_the_server_and_runtime_import_no_feature(graph: grimp.ImportGraph) -> None:
    for module in ("contenox_lsp.server", "contenox_lsp.runtime", "contenox_lsp.idle_prefill"):
        for feature in ("contenox_lsp.handlers", "contenox_lsp.app", "contenox_lsp.cli"):
            assert not graph.chain_exists(importer=module, imported=feature, as_packages=True), (
                module, feature)


def test_lower_layers_do_not_import_the_server(graph: grimp.ImportGraph) -> None:
    for lower in ("contextasm", "engine", "repo_index"):
        for upper in ("contenox_lsp", "contenox_bench"):
            assert not graph.chain_exists(importer=lower, imported=upper, as_packages=True)


def test_the_benchmark_uses_public_server_modules_only(graph: grimp.ImportGraph) -> None:
    used = set()
    for module in graph.find_descendants("contenox_bench") | {"contenox_bench"}:
        used |= {m for m in graph.find_modules_directly_imported_by(module)
                 if m.split(".")[0] == "contenox_lsp"}
    assert used <= SERVER_PUBLIC, used - SERVER_PUBLIC
