"""repo_index on big workspaces (issue 32): what an edit's map costs must not grow with the
workspace. A map after an outline change patches its candidates file by file (at 20,000 files
a rebuild cost seconds per signature edit), and the graph keeps its size as a count. The
oracle is always the slow way: the patched candidates, and every map drawn from them, equal
what scoring every file afresh gives; the count equals a scan."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from repo_index import RepoIndex, languages, render
from repo_index import rank as rank_module
from repo_index.extract import extract
from repo_index.graph import SymbolGraph
from repo_index.rank import Ranking
from repo_index.render import Candidates, FileView
from repo_index.symbols import FileSymbols
from repo_index.textedit import encode_text


def symbols(text: str) -> FileSymbols:
    lang = languages.load("python")
    source = encode_text(text)
    return extract(lang, source, lang.parser().parse(source))


def module(i: int, variant: int = 0) -> str:
    extra = ", flag: bool = False" * variant
    return (f"class Thing{i}:\n    def method_{i}(self{extra}):\n        return helper_{i}()\n\n\n"
            f"def helper_{i}(x=1{extra}):\n    return Thing{(i + 1) % 7}()\n\n\n"
            f"def _private_{i}():\n    pass\n")


def view(i: int, variant: int = 0) -> FileView:
    return FileView(f"/w/m{i}.py", f"m{i}.py", symbols(module(i, variant)))


def test_replaced_files_stream_like_a_fresh_build(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    n = 12
    ranking = Ranking(
        {f"/w/m{i}.py": rng.random() for i in range(n)},
        {name: rng.random() / 10
         for i in range(n) for name in (f"Thing{i}", f"helper_{i}", f"method_{i}")},
        1,
    )
    current = {i: view(i) for i in range(n)}
    patched = Candidates(current.values(), ranking, ("helper_3",))
    monkeypatch.setattr(render, "COMPACT_FILES", 5)  # the fold into the base runs too
    for step in range(30):
        i = rng.randrange(n + 2)
        if i >= n and i in current and rng.random() < 0.5:
            del current[i]  # a file removed
            patched.replace(f"/w/m{i}.py", None)
        else:
            current[i] = view(i, rng.randrange(3))  # changed signatures, or a new file
            patched.replace(f"/w/m{i}.py", current[i])
        fresh = Candidates(current.values(), ranking, ("helper_3",))
        assert patched.items == fresh.items, step
        assert all(patched.item(key) == it
                   for key, it in zip(fresh.keys_of(fresh.items), fresh.items, strict=True))
        assert patched.item(("/w/m99.py", "", "gone", "function", "0")) is None
        assert patched.views == fresh.views
        for budget in (40, 120):
            assert render.render(patched, budget)[0] == render.render(fresh, budget)[0]


def _edit(text: str, rng: random.Random) -> str:
    """A signature change, a rename, a new or removed definition, or a body edit."""
    lines = text.splitlines(keepends=True)
    defs = [k for k, line in enumerate(lines) if line.lstrip().startswith("def ")]
    k = rng.choice(defs)
    kind = rng.randrange(5)
    if kind == 0:
        lines[k] = lines[k].replace("):", ", extra: int = 0):", 1)
    elif kind == 1:
        lines[k] = lines[k].replace("def ", "def renamed_", 1)
    elif kind == 2:
        lines.append(f"\n\ndef added_{rng.randrange(1000)}(a, b):\n    return helper_1(a)\n")
    elif kind == 3 and len(defs) > 1:
        lines[k] = lines[k].replace("def ", "async def ", 1)
    else:
        indent = lines[k][: len(lines[k]) - len(lines[k].lstrip())]
        lines.insert(k + 1, f"{indent}    value = helper_2()\n")
    return "".join(lines)


def _workspace(tmp_path: Path, n_modules: int) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(n_modules):
        (root / f"m{i}.py").write_text(module(i), encoding="utf-8")
    return root


def _built(root: Path, cache_dir: Path) -> RepoIndex:
    idx = RepoIndex([root], cache_dir=cache_dir, workers=1)
    idx.build()
    return idx


def test_maps_after_edits_equal_maps_from_rebuilt_candidates(tmp_path: Path) -> None:
    root = _workspace(tmp_path, 24)
    idx = _built(root, tmp_path / "a")
    control = _built(root, tmp_path / "b")
    rng = random.Random(3)
    texts = {p: Path(p).read_text("utf-8") for p in idx.files()}
    switches, last_focus = 0, None
    for step in range(40):
        path = rng.choice(sorted(texts))
        texts[path] = _edit(texts[path], rng)
        idx.update(path, texts[path])
        control.update(path, texts[path])
        if step % 13 == 12:  # the buffer closed unsaved: back to the disk's text
            del texts[path]
            texts[path] = Path(path).read_text("utf-8")
            idx.update(path)
            control.update(path)
        for focus in ((), (path,)):
            switches += focus != last_focus
            last_focus = focus
            for budget in (80, 300):
                for r in control._rankings.values():
                    r.candidates = None  # the control scores every file afresh
                got = idx.repo_map(budget, focus)
                assert got == control.repo_map(budget, focus), (step, budget, focus)
    # A patch per edit; a rebuild only with a new ranking (a new focus, or too much churn) or
    # when the focus changes (only the ranking in use keeps its candidates: memory).
    assert idx.stats.candidate_builds <= idx.stats.rankings + switches + 1
    assert control.stats.candidate_builds > 150 > idx.stats.candidate_builds


def test_a_signature_edit_shows_without_rebuilding_the_candidates(tmp_path: Path) -> None:
    root = _workspace(tmp_path, 8)
    idx = _built(root, tmp_path / "c")
    before = idx.repo_map(2048)
    assert "def helper_2(x=1):" in before.text
    path = str(root / "m2.py")
    assert idx.update(path, module(2, 1))
    after = idx.repo_map(2048)
    assert "def helper_2(x=1, flag: bool = False):" in after.text
    assert "def helper_2(x=1):" not in after.text
    assert idx.stats.candidate_builds == 1
    idx.build()  # everything may have changed: scored afresh
    idx.repo_map(2048)
    assert idx.stats.candidate_builds == 2


def test_graph_size_is_kept_as_a_count() -> None:
    rng = random.Random(5)
    graph = SymbolGraph()
    texts = [module(i, v) for i in range(6) for v in range(3)]
    texts += ["x = helper_1(helper_1(Thing2()))\n", "", "import os\nos.sep\n"]
    for _ in range(200):
        path = f"/w/f{rng.randrange(8)}.py"
        if rng.random() < 0.2:
            graph.remove_file(path)
        else:
            text = rng.choice(texts)
            graph.set_file(path, symbols(text) if text or rng.random() < 0.5 else None)
        assert graph.size() == sum(len(row) for row in graph.used.values())


def test_focus_weights_from_the_kept_graph_are_the_direct_formula_bit_for_bit(
    tmp_path: Path,
) -> None:
    """The kept graph applies the focus factors to the edges they touch; every edge weight and
    outgoing total must be what the formula gives computed directly (the map is promised to
    be byte-identical for the same index and focus)."""
    idx = _built(_workspace(tmp_path, 30), tmp_path / "r")
    graph = idx._ensure_graph()
    paths = graph.paths()
    g = rank_module.prepare(graph, paths)
    for focus_files, idents in (((), ()), ((paths[4],), ()), ((paths[1], paths[9]), ("helper_3",)),
                                ((), ("Thing2", "method_5", "absent"))):
        focus_ix = {g.index[p] for p in focus_files}
        weight, total_out = rank_module._focused(g, focus_ix, idents)
        expected_total = [0.0] * len(paths)
        e = 0
        for k, name in enumerate(g.names):
            base = rank_module.name_weight(name, g.n_definers[k], idents)
            for p, count in sorted(graph.used[name].items()):
                r = g.index[p]
                w = base * math.sqrt(count)
                if r in focus_ix:
                    w *= rank_module.FOCUS_FILE_BOOST
                if name in languages.common_names_for(p):
                    w *= rank_module.BUILTIN_FACTOR
                assert (g.edge_user[e], weight[e]) == (r, w), (name, p)
                expected_total[r] += w
                e += 1
        assert e == len(weight) and list(total_out) == expected_total


def test_a_new_focus_reuses_the_rank_graph_and_maps_as_a_fresh_index(tmp_path: Path) -> None:
    root = _workspace(tmp_path, 24)
    idx = _built(root, tmp_path / "a")
    control = _built(root, tmp_path / "b")
    files = sorted(idx.files())
    for focus, idents in (((), ()), ((files[3],), ()), ((files[8],), ("helper_5",)),
                          ((files[3], files[12]), ())):
        control._rank_graph = None  # the control builds PageRank's graph afresh every time
        got = idx.repo_map(300, focus, idents, stable=False)
        assert got == control.repo_map(300, focus, idents, stable=False), (focus, idents)
    assert idx.stats.rank_graphs == 1 and control.stats.rank_graphs == 4
    idx.update(files[2], module(2, 1))  # a signature edit: the graph changed
    assert idx.repo_map(300, (files[20],), stable=False).text
    assert idx.stats.rank_graphs == 2
