"""The question search's learned ranking (``repo_index.question_rank``) on real files and the
real parser, and its fit (``contenox_bench.ranker_fit``): the candidates and their labels
come from the same search the server runs; the fit finds which feature marks the answer and
is checked on a repository it was not fitted on."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_ctxeval import SOURCE, TEST

from contenox_bench import ranker_fit
from contenox_lsp.cli import main
from contenox_lsp.code_segment import CodeBudget, CodeRequest, code_inputs
from contenox_lsp.turn import read_disk_text
from repo_index import RepoIndex
from repo_index.code_search import CodeFinder
from repo_index.lexical import LexicalIndex, terms
from repo_index.question_rank import DEFAULT_RANKER, FEATURES, QuestionRanker

RENDER = "def render_header(value):\n    return value.title()\n"


def finder_for(root: Path) -> CodeFinder:
    index = RepoIndex([root], use_cache=False)
    index.build()
    finder = CodeFinder(index, read_disk_text)
    finder.sync()
    return finder


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def names(snippets: list[Any]) -> list[str]:
    return [f"{Path(s.path).name}:{s.chunk.qualname}" for s in snippets]


def test_query_scores_add_up_and_give_each_documents_score() -> None:
    lex = LexicalIndex()
    lex.set_file("a.py", "1", [(0, "parse", "def parse(text): return split(text)"),
                               (5, "split", "def split(text): return text.split()")])
    lex.set_file("b.py", "1", [(0, "render", "def render(page): return page")])
    words, names = {t: 1.0 for t in terms("split the text")}, {t: 1.0 for t in terms("render")}
    scores = lex.scores(words)
    searched = {key: score for score, key in lex.search(words, 10)}
    assert scores.of(("a.py", 0)) == searched[("a.py", 0)] > 0
    assert scores.of(("b.py", 0)) == 0.0 and scores.of(("c.py", 0)) == 0.0  # no term; no file
    # Two queries' scores add up to their sum's (BM25 is linear in the term weights).
    both = {**words, **{t: 0.3 for t in names}}
    summed = scores.plus(lex.scores(names), 0.3).top(10)
    assert [k for _, k in summed] == [k for _, k in lex.search(both, 10)]
    assert [s for s, _ in summed] == pytest.approx([s for s, _ in lex.search(both, 10)])


def test_source_ranks_above_test_code_with_the_same_words(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/render.py": RENDER, "tests/helpers.py": RENDER})
    finder = finder_for(tmp_path)
    assert names(finder.search("render the header")) == [
        "render.py:render_header", "helpers.py:render_header"]


def test_the_cursors_graph_brings_and_lifts_a_definition(tmp_path: Path) -> None:
    """A definition the question's words miss is still a candidate when the cursor's code
    reaches it; of two equal matches, the one the graph reaches ranks first."""
    write(tmp_path, {
        "pkg/alpha.py": RENDER,
        "pkg/beta.py": RENDER,
        "pkg/gamma.py": "def compute_totals(rows):\n    return sum(rows)\n",
    })
    finder = finder_for(tmp_path)
    beta = str(tmp_path / "pkg/beta.py")
    gamma = str(tmp_path / "pkg/gamma.py")
    assert names(finder.search("render the header")) == [
        "alpha.py:render_header", "beta.py:render_header"]  # a tie: by path
    graph = {(beta, 0): 2.0, (gamma, 0): 1.0}
    reached = names(finder.search("render the header", graph=graph))
    assert reached[0] == "beta.py:render_header"
    assert "gamma.py:compute_totals" in reached  # no word of the question, the graph's
    why = {names([s])[0]: s.reason for s in finder.search("render the header", graph=graph)}
    assert why["gamma.py:compute_totals"] == "used by the code at the cursor"
    assert why["beta.py:render_header"] == "matches the question"
    assert "gamma.py:compute_totals" not in names(finder.search("render the header"))


def test_the_questions_own_match_stays_a_candidate_whatever_the_cursor_repeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The identifiers near the cursor weigh by how often they occur: repeated ones can fill
    the pool the ranker sees. The question's own best hits are candidates all the same (its
    one rare word, ``norwegian``, names the class the fix is in)."""
    from repo_index import code_search

    monkeypatch.setattr(code_search, "RERANK_POOL", 3)
    formatting = "".join(
        f"def format_timeframe_{i}(timeframe, delta):\n"
        f"    return format_timeframe(timeframe, delta) + format_timeframe(timeframe, {i})\n\n\n"
        for i in range(4))
    others = "".join(f"def helper_{i}(rows):\n    return sorted(rows)[{i}]\n\n\n"
                     for i in range(30))
    write(tmp_path, {
        "pkg/formatting.py": formatting,
        "pkg/helpers.py": others,
        "pkg/locales.py": "class NorwegianLocale(Locale):\n    ordinal = '.'\n",
    })
    finder = finder_for(tmp_path)
    question = "Fix ordinals for norwegian languages"
    cursor_names = ["format_timeframe"] * 8
    found = names(finder.search(question, cursor_names, limit=10))
    assert "locales.py:NorwegianLocale" in found
    assert sum(n.startswith("formatting.py:") for n in found) == 3  # the cursor's pool of 3


PARSER = '''\
class Parser:
    def __init__(self, text):
        self.text = text
        self.pos = 0

    def skip_comment(self):
        """Skip a comment up to the end of its line."""
        while self.text[self.pos] != "#":
            self.pos += 1


class Lexer:
    def __init__(self, source):
        self.source = source

    def read_comment(self):
        return self.source.split("#", 1)[1]
'''


def test_a_best_methods_constructor_follows_it(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The constructor of the class of one of the best few methods is shown right after it,
    saying why (it has no word of the question: BM25 alone does not find it); not one the
    search leaves out, and not for a method ranked past ``CONSTRUCTOR_FROM``."""
    from repo_index import code_search

    write(tmp_path, {"pkg/parser.py": PARSER,
                     "pkg/tokens.py": "def tokenize(text):\n    return text.split()\n"})
    finder = finder_for(tmp_path)
    parser = str(tmp_path / "pkg/parser.py")
    question = "skipping a comment stops early"
    found = finder.search(question)
    assert names(found)[:2] == ["parser.py:Parser.skip_comment", "parser.py:Parser.__init__"]
    assert found[1].reason == "constructor for Parser.skip_comment"
    assert found[1].score == pytest.approx(found[0].score * code_search.CONSTRUCTOR_SHARE)
    # Both classes' comment methods match; each brings its own constructor.
    both = names(finder.search("comment"))
    assert {"parser.py:Parser.__init__", "parser.py:Lexer.__init__"} <= set(both)
    # Left out of the search: not brought back as a constructor.
    assert "parser.py:Parser.__init__" not in names(finder.search(question,
                                                                 exclude={(parser, 1)}))
    # A function brings nothing, nor does a class nested in a class.
    assert names(finder.search("tokenize words")) == ["tokens.py:tokenize"]
    write(tmp_path / "nested", {"outer.py": "class Outer:\n    def __init__(self):\n"
                                            "        self.size = 1\n\n"
                                            "    class CommentBlock:\n        marker = '#'\n"})
    nested = names(finder_for(tmp_path / "nested").search("comment block marker"))
    assert "outer.py:Outer.CommentBlock" in nested and "outer.py:Outer.__init__" not in nested
    monkeypatch.setattr(code_search, "CONSTRUCTOR_FROM", 1)
    first_only = names(finder.search("comment"))
    assert sum(n.endswith(".__init__") for n in first_only) == 1


def test_a_ranker_needs_one_weight_per_feature() -> None:
    with pytest.raises(ValueError, match=f"{len(FEATURES)} weights"):
        QuestionRanker((1.0, 2.0))
    assert len(DEFAULT_RANKER.weights) == len(FEATURES)


def _synthetic(repo: str, rng: random.Random, n: int) -> list[ranker_fit.Group]:
    """Tasks whose changed definition is the one candidate in the mirrored source (plus
    noise in every other feature)."""
    mirror = FEATURES.index("mirror")
    out = []
    for i in range(n):
        rows = np.array([[rng.gauss(0, 1) for _ in FEATURES] for _ in range(8)])
        rows[:, mirror] = 0.0
        hit = rng.randrange(8)
        rows[hit, mirror] = 1.0
        labels = np.zeros(8, dtype=bool)
        labels[hit] = True
        out.append(ranker_fit.Group(f"{repo}-{i}", repo, rows, labels))
    return out


def test_the_fit_finds_the_feature_that_marks_the_answer() -> None:
    rng = random.Random(7)
    groups = _synthetic("a", rng, 20) + _synthetic("b", rng, 20)
    fitted = ranker_fit.fit(groups)
    mirror = FEATURES.index("mirror")
    assert max(range(len(FEATURES)), key=lambda i: abs(fitted.weights[i])) == mirror
    assert fitted.weights[mirror] > 0
    result = ranker_fit.evaluate(groups)
    held = result["top_k"]["fitted without the task's repository (held out)"]
    assert held["top1"] == 40  # fitted on a's tasks alone, it still ranks b's answers first
    assert result["top_k"]["bm25 alone"]["top1"] < 20  # noise: about one in eight
    with pytest.raises(ValueError, match="no task has a changed definition"):
        ranker_fit.fit([ranker_fit.Group("x", "a", np.zeros((3, len(FEATURES))),
                                         np.zeros(3, dtype=bool))])


def _tree(root: Path, name: str) -> dict[str, Any]:
    write(root / name, {"shapes.py": SOURCE, "test_shapes.py": TEST})
    return {"id": f"{name}-1", "repo": name, "tree": name, "open_file": "test_shapes.py",
            "cursor_line": 5, "question": "Why is the area product wrong?",
            "gt_files": ["shapes.py"],
            "gt_defs": [{"file": "shapes.py", "name": "area", "kind": "def", "def_line": 4,
                         "body_line": "product = width * height"}]}


def test_a_tasks_candidates_are_the_servers_search_labelled_by_its_fix(tmp_path: Path) -> None:
    task = _tree(tmp_path, "one")
    group = ranker_fit.task_group(task, tmp_path / "one")
    assert group.features.shape[1] == len(FEATURES) and group.answerable
    assert int(group.labels.sum()) == 1  # area, found by the graph and the words; labelled
    assert group.features[group.labels][0][FEATURES.index("graph")] > 0


def test_eval_ranker_reports_held_out_figures(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [_tree(tmp_path, "one"), _tree(tmp_path, "two")]}),
                     encoding="utf-8")
    assert main(["eval", "ranker", "--tasks", str(tasks), "--out", str(tmp_path / "out")]) == 0
    report = (tmp_path / "out" / "ranker.md").read_text(encoding="utf-8")
    assert "| fitted without the task's repository (held out) | 2 (1.00)" in report
    doc = json.loads((tmp_path / "out" / "ranker.json").read_text(encoding="utf-8"))
    assert set(doc["fold_weights"]) == {"one", "two"} and len(doc["weights"]) == len(FEATURES)
    assert "held out" in capsys.readouterr().out
    # One repository cannot be held out: a clear error, not a figure.
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"tasks": [_tree(tmp_path, "one")]}), encoding="utf-8")
    assert main(["eval", "ranker", "--tasks", str(one), "--out", str(tmp_path / "o2")]) != 0
    assert "at least two repositories" in capsys.readouterr().err


BOXES = {
    "pkg/util.py": "def make_box(w, h):\n    return (w, h)\n",
    "pkg/shapes.py": "def area(box):\n    return box[0] * box[1]\n",
    "tests/test_shapes.py": (
        "from pkg.util import make_box\nfrom pkg.shapes import area\n\n\n"
        "def test_area():\n"
        "    a = make_box(1, 2)\n    b = make_box(2, 3)\n    c = make_box(3, 4)\n"
        "    d = make_box(4, 5)\n    e = make_box(5, 6)\n"
        "    assert area(b) == 6\n"
    ),
}


def test_an_ask_shows_the_mirrored_source_first_and_the_idle_prompt_agrees(
        tmp_path: Path) -> None:
    """The graph weighs the helper the test calls five times above the function it tests
    once; the ask's order (the ranker, no question) puts the source the test module is
    named after first, and the cursor part the idle prefill builds shows it first too."""
    write(tmp_path, BOXES)
    finder = finder_for(tmp_path)
    test = str(tmp_path / "tests/test_shapes.py")
    graph_order = finder.around_cursor(test, 6)
    assert names(graph_order) == ["util.py:make_box", "shapes.py:area"]
    ranked = finder.ranked_for_ask(graph_order, mirror_files=finder.mirrored_sources(test))
    assert names(ranked) == ["shapes.py:area", "util.py:make_box"]

    def count(text: str) -> int:
        return len(text) // 4

    request = CodeRequest(roots=[tmp_path], buffers={}, pins=[],
                          path=Path("tests/test_shapes.py"), line=7, question="")
    cursor_code, _ = code_inputs(finder, request, count, CodeBudget(400), read_disk_text)
    assert [c.title.split(" ")[0] for c in cursor_code] == ["area", "make_box"]


def _bag_of_words(texts: Sequence[str]) -> np.ndarray:
    """A stand-in for the probe's sentence model (which is no dependency of the tests): unit
    vectors of hashed search terms, so texts sharing words have a positive cosine."""
    out = np.zeros((len(texts), 64))
    for i, text in enumerate(texts):
        for t in terms(text):
            out[i, sum(map(ord, t)) % 64] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms == 0, 1.0, norms)


def test_the_semantic_probe_adds_the_cosine_to_the_servers_candidates(tmp_path: Path) -> None:
    from contenox_bench.scripts import semantic_probe as probe

    task = _tree(tmp_path, "one")
    root = tmp_path / "one"
    # Code that shares no word with the question or the cursor: no candidate, only the pool
    # can bring it.
    write(root, {"colors.py": "def blend(first, second):\n    return first + second\n"})
    group = ranker_fit.task_group(task, root)
    row = probe.task_rows(task, root, probe.EmbeddingCache(_bag_of_words), pool=5)
    # The same candidates in the same order, each with its cosine.
    assert np.allclose(np.array(row["rows"]), group.features)
    assert row["labels"] == group.labels.tolist()
    assert len(row["cosines"]) == len(row["rows"])
    assert all(-1.0 - 1e-9 <= c <= 1.0 + 1e-9 for c in row["cosines"])
    # The pool adds chunks that are not candidates, each with the ranker's features.
    assert 1 <= len(row["extra_rows"]) == len(row["extra_labels"]) == len(row["extra_cosines"])
    assert len(row["extra_rows"]) <= 5
    assert row["extra_cosines"] == sorted(row["extra_cosines"], reverse=True)  # nearest first
    assert all(len(r) == len(FEATURES) for r in row["extra_rows"])
    assert not any(row["extra_labels"])  # the changed definition is a candidate already


def test_the_semantic_probe_credits_a_cosine_that_marks_the_answer() -> None:
    from contenox_bench.scripts import semantic_probe as probe

    rng = random.Random(3)
    rows = []
    for repo in ("a", "b"):
        for i in range(15):
            feats = [[rng.gauss(0, 1) for _ in FEATURES] for _ in range(40)]
            hit = rng.randrange(40)
            cosines = [0.1] * 40
            cosines[hit] = 0.9
            rows.append({"id": f"{repo}-{i}", "repo": repo, "defs": 1, "rows": feats,
                         "labels": [j == hit for j in range(40)], "cosines": cosines,
                         "extra_rows": [], "extra_labels": [], "extra_cosines": []})
    without = probe.located_within(rows, cosine=False, pooled=False)
    with_cosine = probe.located_within(rows, cosine=True, pooled=False)
    assert with_cosine[5] == 30.0  # fitted on the other repository, it still finds each
    assert without[5] < 15.0  # noise alone: about one in eight within the first five
