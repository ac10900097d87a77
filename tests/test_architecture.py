"""The package structure the code relies on, as a contract: no import cycle, the layers below
import only what the rules allow, the composition root is the only module that knows every
feature, the benchmark uses the server's public modules only. Every layer rule is also checked
on the real graph with one violation planted, so a rule that can no longer fail is noticed.

The import graph is grimp's (the graph library behind import-linter); it counts every import,
``TYPE_CHECKING`` blocks and function-local imports included. The same check from a shell:
``python -m pytest tests/test_architecture.py``.
"""

from __future__ import annotations

import grimp
import pytest

PACKAGES = ("contenox_lsp", "contenox_bench", "contextasm", "engine", "repo_index")

#: What the benchmark may import from the server: the protocol tweaks its LSP client needs,
#: the completion prompt layout, decode and post-processing (its typing trace rebuilds the
#: server's prompts; the completion eval's baselines answer as the server does, the BM25 one
#: querying with the server's place),
#: the turn pipeline with its code-segment budget and the one context budget (the context eval
#: scores the prompts it builds, split as the server splits it), and the CLI's input error
#: (its commands run under ``contenox-lsp``).
SERVER_PUBLIC = {"contenox_lsp", "contenox_lsp.protocol", "contenox_lsp.completion.prompt",
                 "contenox_lsp.completion.window", "contenox_lsp.completion.postprocess",
                 "contenox_lsp.completion.decode", "contenox_lsp.completion.retrieval",
                 "contenox_lsp.turn", "contenox_lsp.code_segment",
                 "contenox_lsp.context_budget", "contenox_lsp.errors",
                 "contenox_lsp.process"}  # process: the GIL switch interval the bench mirrors


#: Modules of contextasm that may touch the filesystem: the snapshot store keeps its own cache
#: directory. Nothing else there reads a file, runs a process or opens a socket: the
#: workspace is read by the product (contenox_lsp.workspace_reads).
CONTEXTASM_IO = {"contextasm.store"}
IO_MODULES = {"os", "pathlib", "subprocess", "shutil", "fcntl", "tempfile", "socket", "io",
              "urllib", "httpx"}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True)


def _modules(graph: grimp.ImportGraph, package: str) -> set[str]:
    return set(graph.find_descendants(package)) | {package}


def _ours(module: str) -> str | None:
    top = module.split(".")[0]
    return top if top in PACKAGES else None


def layer_violations(graph: grimp.ImportGraph) -> dict[str, list[tuple[str, str]]]:
    """Each layer rule and the direct imports that break it."""
    found: dict[str, list[tuple[str, str]]] = {rule: [] for rule in LAYER_RULES}
    for package in PACKAGES:
        for importer in sorted(_modules(graph, package)):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                theirs = _ours(imported)
                if package == "contextasm" and theirs not in (None, "contextasm"):
                    found["contextasm imports nothing of ours"].append((importer, imported))
                if (package == "contextasm" and importer not in CONTEXTASM_IO
                        and imported.split(".")[0] in IO_MODULES):
                    found["contextasm does no I/O but its snapshot store's"].append(
                        (importer, imported))
                if package == "repo_index" and theirs not in (None, "repo_index", "contextasm"):
                    found["repo_index imports contextasm only"].append((importer, imported))
                if package == "engine" and theirs not in (None, "engine", "contextasm"):
                    found["engine imports contextasm only"].append((importer, imported))
                if theirs == "contenox_bench" and package != "contenox_bench":
                    found["nothing imports contenox_bench"].append((importer, imported))
                if importer.startswith(HANDLERS) and _engine_side(graph, importer, imported):
                    found["handlers reach the engine side through Runtime only"].append(
                        (importer, imported))
                if importer.startswith(PURE) and imported.startswith(RUNTIME):
                    found["the pure completion and next-edit modules import no runtime"].append(
                        (importer, imported))
    return found


HANDLERS = "contenox_lsp.handlers"
RUNTIME = "contenox_lsp.runtime"
#: The pure parts of the features, which handlers may import: prompt layouts, cursor windows,
#: post-processing, the edit history and the edit arithmetic.
PURE = ("contenox_lsp.completion", "contenox_lsp.next_edit")


def _engine_side(graph: grimp.ImportGraph, importer: str, imported: str) -> bool:
    """Whether a handler's import goes around ``Runtime``: into a module inside the runtime
    package, below it to a lower layer, or for a name of the package other than ``Runtime``."""
    if imported.startswith(RUNTIME + ".") or _ours(imported) in ("engine", "contextasm",
                                                                 "repo_index"):
        return True
    if imported != RUNTIME:
        return False
    details = graph.get_import_details(importer=importer, imported=imported)
    names = {n.strip() for d in details if " import " in d["line_contents"]
             for n in d["line_contents"].split(" import ", 1)[1].strip("()").split(",")}
    return not details or names != {"Runtime"}


LAYER_RULES = (
    "contextasm imports nothing of ours",
    "contextasm does no I/O but its snapshot store's",
    "repo_index imports contextasm only",
    "engine imports contextasm only",
    "nothing imports contenox_bench",
    "handlers reach the engine side through Runtime only",
    "the pure completion and next-edit modules import no runtime",
)
#: One import that breaks each rule, planted in the real graph.
PLANTED = {
    "contextasm imports nothing of ours": ("contextasm.assembly", "repo_index.safe_read"),
    "contextasm does no I/O but its snapshot store's": ("contextasm.render", "subprocess"),
    "repo_index imports contextasm only": ("repo_index.index", "engine.profile"),
    "engine imports contextasm only": ("engine.session", "contenox_lsp.paths"),
    "nothing imports contenox_bench": ("contenox_lsp.runtime.core", "contenox_bench.stats"),
    "handlers reach the engine side through Runtime only": ("contenox_lsp.handlers.completion",
                                                            "contenox_lsp.runtime.worker"),
    "the pure completion and next-edit modules import no runtime": (
        "contenox_lsp.completion.window", "contenox_lsp.runtime.speculation"),
}


def test_the_layers_hold(graph: grimp.ImportGraph) -> None:
    assert {rule: v for rule, v in layer_violations(graph).items() if v} == {}


@pytest.mark.parametrize("rule", LAYER_RULES)
def test_each_layer_rule_finds_a_planted_violation(graph: grimp.ImportGraph, rule: str) -> None:
    importer, imported = PLANTED[rule]
    added = imported not in graph.modules
    graph.add_import(importer=importer, imported=imported)
    try:
        broken = {r for r, v in layer_violations(graph).items() if v}
    finally:
        graph.remove_import(importer=importer, imported=imported)
        if added:
            graph.remove_module(imported)
    assert broken == {rule}


def test_a_handler_importing_another_name_of_the_runtime_breaks_the_rule(
        graph: grimp.ImportGraph) -> None:
    """``from contenox_lsp.runtime import Runtime`` is the one import allowed; any other name
    of the package (a service, a helper re-exported there) is going around it."""
    importer = "contenox_lsp.handlers.next_edit"
    assert "contenox_lsp.runtime" not in graph.find_modules_directly_imported_by(importer)
    graph.add_import(importer=importer, imported="contenox_lsp.runtime", line_number=1,
                     line_contents="from contenox_lsp.runtime import InlineOffer, Runtime")
    try:
        broken = {r for r, v in layer_violations(graph).items() if v}
    finally:
        graph.remove_import(importer=importer, imported="contenox_lsp.runtime")
    assert broken == {"handlers reach the engine side through Runtime only"}


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


def test_no_cycle_between_packages(graph: grimp.ImportGraph) -> None:
    """Counting every import (TYPE_CHECKING and function-local ones too)."""
    both_ways = [(a, b) for a in PACKAGES for b in PACKAGES if a < b
                 and graph.chain_exists(importer=a, imported=b, as_packages=True)
                 and graph.chain_exists(importer=b, imported=a, as_packages=True)]
    assert both_ways == []


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
    for module in ("contenox_lsp.server", "contenox_lsp.runtime"):
        for feature in ("contenox_lsp.handlers", "contenox_lsp.app", "contenox_lsp.cli"):
            assert not graph.chain_exists(importer=module, imported=feature, as_packages=True), (
                module, feature)


def test_the_cli_reaches_the_bench_only_through_its_entry_points() -> None:
    """``contenox-lsp bench`` and ``eval`` are contenox_bench's, registered under the entry
    point group the CLI reads (pyproject.toml): the CLI names no module of it."""
    import ast
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    declared = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    group = declared["project"]["entry-points"]["contenox_lsp.commands"]
    assert set(group) == {"bench", "eval-context", "eval-compare", "eval-next-edit",
                          "eval-completion", "eval-ranker"}
    assert all(target.startswith("contenox_bench.") for target in group.values())
    cli = ast.parse((root / "contenox_lsp" / "cli.py").read_text(encoding="utf-8"))
    named = {node.module for node in ast.walk(cli) if isinstance(node, ast.ImportFrom)}
    named |= {a.name for node in ast.walk(cli) if isinstance(node, ast.Import)
              for a in node.names}
    assert not {m for m in named if m and m.startswith("contenox_bench")}


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
