"""Segment J on real files and the real parser: definition chunks, the symbol graph around the
cursor (a private helper two hops from a test), lexical search kept in step with edits, the
code budget (whole, then headers), the shared budget that a huge diff or paste cannot take."""

from __future__ import annotations

import dataclasses
import random
import re
from dataclasses import replace
from pathlib import Path

import pytest
from test_contextasm_support import LlamaVocabTokenizer, load_tokenizer, make_identity

from contenox_lsp.code_segment import (
    HEADER_WIDTH,
    QUESTION_MIN_TOKENS,
    CodeBudget,
    CodeRequest,
    SteadyRate,
    code_inputs,
    header_line,
    question_cap,
    render_snippet,
)
from contenox_lsp.turn import read_disk_text
from contextasm import CodeSnippet, ContextInputs, RepoMap, SegmentKind, UserTurn, assemble
from contextasm.errors import ContextOverflowError
from contextasm.render import FILES_HEADING
from repo_index import RepoIndex, lexical
from repo_index.chunks import chunks_of, enclosing
from repo_index.code_search import QUESTION_REASON, CodeFinder, FileHit, Snippet, mirrored_name
from repo_index.lexical import LexicalIndex, terms

PARSER = '''\
"""Parsing of configuration text."""
import re


class Parser:
    """Parses key=value lines."""

    separator = "="

    def __init__(self, strict):
        self.strict = strict

    def parse(self, text):
        out = {}
        for line in text.splitlines():
            key, value = self._split(line)
            out[key] = value
        return out

    def _split(self, line):
        key, _, value = line.partition(self.separator)
        return key.strip(), _unquote(value)


def _unquote(value):
    value = value.strip()
    if value[:1] == value[-1:] == '"':
        return value[1:-1]
    return value


def load(path):
    with open(path) as f:
        return Parser(strict=True).parse(f.read())


def unrelated_helper():
    return 42
'''

TEST = '''\
from config.parser import Parser, load


def test_quoted_values():
    parser = Parser(strict=False)
    assert parser.parse('a = "b"') == {"a": "b"}
'''


@pytest.fixture(scope="module")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "__init__.py").write_text("")
    (tmp_path / "config" / "parser.py").write_text(PARSER)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_parser.py").write_text(TEST)
    return tmp_path


def finder_for(root: Path) -> CodeFinder:
    index = RepoIndex([root], use_cache=False)
    index.build()
    return CodeFinder(index, read_disk_text)


def qualnames(snippets: list) -> list[str]:
    return [s.chunk.qualname for s in snippets]


# -- chunks -----------------------------------------------------------------------------------


def test_chunks_are_functions_methods_and_class_outlines(workspace: Path) -> None:
    finder = finder_for(workspace)
    path = str(workspace / "config" / "parser.py")
    chunks = chunks_of(finder.index.raw_definitions(path))
    assert [c.qualname for c in chunks] == [
        "Parser", "Parser.__init__", "Parser.parse", "Parser._split", "_unquote", "load",
        "unrelated_helper",
    ]
    lines = PARSER.split("\n")
    outline = [t for _, t in chunks[0].lines(lines)]
    assert '    separator = "="' in outline and "    def parse(self, text):" in outline
    assert "        out = {}" not in outline  # method bodies are their own chunks
    here = enclosing(chunks, PARSER.split("\n").index("            out[key] = value"))
    assert here is not None and here.qualname == "Parser.parse"


# -- the symbol graph -------------------------------------------------------------------------


def test_the_graph_reaches_a_private_helper_two_hops_from_the_test(workspace: Path) -> None:
    """test → Parser.parse (hop 1, named in the test) → Parser._split (``self._split``,
    hop 2, a private helper), and ``Parser(...)`` reaches the dunder ``__init__`` nobody
    names; what nothing on the path uses stays out."""
    finder = finder_for(workspace)
    test = str(workspace / "tests" / "test_parser.py")
    line = TEST.split("\n").index("    parser = Parser(strict=False)")
    found = qualnames(finder.around_cursor(test, line))
    assert "Parser.parse" in found and "Parser" in found
    assert "Parser.__init__" in found  # a dunder the test never names
    assert "Parser._split" in found  # two hops: parse → self._split
    assert "unrelated_helper" not in found and "load" not in found
    assert found.index("Parser.parse") < found.index("Parser._split")
    # Deterministic: the same index gives the same list.
    again = qualnames(finder.around_cursor(test, 4))
    assert again == qualnames(finder.around_cursor(test, 4))


def test_lexical_search_follows_edits_file_by_file(workspace: Path) -> None:
    finder = finder_for(workspace)
    assert finder.sync() == 3  # parser.py, __init__.py, test_parser.py
    hits = finder.search("strip the quotes around a value")
    assert qualnames(hits)[0] == "_unquote"
    # An edit of one file: only that file is redone, and the new text is what is found.
    path = workspace / "config" / "parser.py"
    path.write_text(PARSER + "\n\ndef dequote_everything(value):\n    return value.strip('\"')\n")
    finder.index.update(path)
    assert finder.sync() == 1
    assert "dequote_everything" in qualnames(finder.search("dequote everything"))


def test_lexical_index_update_equals_a_fresh_build() -> None:
    docs_a = [(1, "parse_config", "def parse_config(text): return split(text)")]
    docs_b = [(3, "split", "def split(text): return text.split()")]
    docs_b2 = [(3, "split_lines", "def split_lines(text): return text.splitlines()")]
    edited = LexicalIndex()
    edited.set_file("a.py", "1", docs_a)
    edited.set_file("b.py", "1", docs_b)
    edited.set_file("b.py", "2", docs_b2)
    fresh = LexicalIndex()
    fresh.set_file("a.py", "1", docs_a)
    fresh.set_file("b.py", "2", docs_b2)
    query = {t: 1.0 for t in terms("split lines of the config text")}
    assert edited.search(query, 5) == fresh.search(query, 5)
    edited.remove_file("b.py")
    assert [k for _, k in edited.search(query, 5)] == [("a.py", 1)]
    assert terms("parseConfig HTTPServer snake_case assembled") == [
        "parseconfig", "pars", "config", "httpserver", "http", "server", "snake_case",
        "snake", "case", "assembled", "assembl"]  # parts and single words stemmed


def test_a_lexical_index_after_edits_and_compaction_scores_as_a_fresh_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Files replaced and removed at random (dead documents compacted away often): every
    search gives the same scores, bit for bit, and keys as an index built from the files as
    they are now."""
    monkeypatch.setattr(lexical, "COMPACT_MIN_DEAD", 3)
    rng = random.Random(11)
    words = ["parse", "split", "config", "value", "quote", "strip", "line", "text", "key",
             "loads", "dumps", "encode", "decode", "buffer", "stream", "token"]

    def docs(path: str, version: int) -> list[tuple[int, str, str]]:
        # Now and then a word repeated past what a posting's count holds (kept aside).
        return [(line, rng.choice(words),
                 " ".join(rng.choice(words) for _ in range(rng.randrange(1, 30)))
                 + f" {rng.choice(words)}" * rng.choice((0, 0, 0, 254, 255, 300)))
                for line in range(rng.randrange(0, 5))]

    edited, current = LexicalIndex(), {}
    for step in range(120):
        path = f"f{rng.randrange(12)}.py"
        if rng.random() < 0.25:
            edited.remove_file(path)
            current.pop(path, None)
        else:
            current[path] = docs(path, step)
            edited.set_file(path, str(step), current[path])
        fresh = LexicalIndex()
        for p, d in sorted(current.items()):
            fresh.set_file(p, "v", d)
        query = {t: rng.choice((0.3, 1.0)) for t in rng.sample(words, 4)}
        assert edited.search(query, 8) == fresh.search(query, 8), step
    assert len(edited._doc_file) < 3 * max(1, edited._n_docs) + 3  # the dead were compacted
    monkeypatch.setattr(lexical, "COMPACT_MIN_DEAD", 0)  # compact at every removal now
    for path in list(current):
        edited.remove_file(path)
    # Removing everything leaves nothing behind: documents, files, terms.
    assert edited.search({t: 1.0 for t in words}, 8) == []
    assert (len(edited._doc_file), len(edited._paths), len(edited._vocab)) == (0, 0, 0)
    assert edited._big_tf == {}


# -- choosing within the budget ---------------------------------------------------------------


def request(root: Path, question: str, line: int | None = 5, pins=()) -> CodeRequest:
    return CodeRequest(roots=[root], buffers={}, pins=list(pins),
                       path=Path("tests/test_parser.py"), line=line, question=question)


def test_the_cursor_part_does_not_depend_on_the_question(workspace: Path,
                                                         gemma: LlamaVocabTokenizer) -> None:
    finder = finder_for(workspace)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    budget = CodeBudget(600)
    idle = code_inputs(finder, request(workspace, ""), count, budget, read_disk_text)
    asked = code_inputs(finder, request(workspace, "how are quotes stripped?"), count, budget,
                        read_disk_text)
    assert idle[0] == asked[0] and idle[0]  # the idle prefill builds exactly this
    assert idle[1] == ()
    # No definition is shown whole twice: one the cursor part could only give its header may
    # be shown whole in the question part.
    cursor_part = {(c.path, c.line): c.text for c in asked[0]}
    for c in asked[1]:
        header = cursor_part.get((c.path, c.line))
        if header is not None:
            assert header.endswith("...") and len(c.text) > len(header), (header, c.text)
    assert all(c.path == "config/parser.py" for c in asked[0])


def test_the_question_part_leaves_out_the_function_at_the_cursor(
        workspace: Path, gemma: LlamaVocabTokenizer) -> None:
    """The test the cursor is in matches a question that names it, but the cursor context
    already shows where the user is: its room goes to the code it uses."""
    finder = finder_for(workspace)
    question = "test quoted values parser strict parse"
    assert "test_quoted_values" in qualnames(finder.search(question))  # it would match

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    cursor, asked = code_inputs(finder, request(workspace, question), count, CodeBudget(1200),
                                read_disk_text)
    assert asked and all(c.title.split()[0] != "test_quoted_values" for c in cursor + asked)


def test_a_question_about_the_function_at_the_cursor_adds_no_look_alikes(
        workspace: Path, gemma: LlamaVocabTokenizer) -> None:
    """A question that names only what the context shows whole (the function at the cursor)
    gets no question part: the parts of that name would only find other definitions that
    share a word with it. A name the context does not show still gets searched."""
    finder = finder_for(workspace)
    question = "What does test_quoted_values do?"
    assert finder.search(question)  # "quoted", "values": _unquote, parse ... look alike

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    _, asked = code_inputs(finder, request(workspace, question), count, CodeBudget(1200),
                           read_disk_text)
    assert asked == ()
    _, asked = code_inputs(finder, request(workspace, "Does test_quoted_values call "
                                           "unrelated_helper?"), count, CodeBudget(1200),
                           read_disk_text)
    assert "unrelated_helper" in [c.title.split()[0] for c in asked]


def test_whole_definitions_go_by_score_per_token(workspace: Path,
                                                 gemma: LlamaVocabTokenizer) -> None:
    """Of equally likely definitions the short ones are shown whole first: one long one does
    not take the room of several short ones (the rest still get their headers)."""
    from contenox_lsp.code_segment import SIGNATURE_SHARE, _choose

    finder = finder_for(workspace)
    hits = finder.search("parse split unquote load value line", limit=10)
    by_length = sorted(hits, key=lambda s: (-len(s.lines), s.chunk.qualname))
    longest, shorter = by_length[0], by_length[1:]
    assert len(longest.lines) > 2 * min(len(s.lines) for s in shorter)
    same = [dataclasses.replace(s, score=1.0) for s in by_length]  # longest ranked first

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    def tokens(s: Snippet) -> int:
        return count(f"{s.display}:{s.chunk.def_line + 1} {s.chunk.qualname} "
                     f"({s.reason})\n{render_snippet(s)}\n") + 8

    short_tokens = sum(tokens(s) for s in shorter[:2])
    # The two cheapest whole, not the longest too.
    room = int((short_tokens + 2) / (1 - SIGNATURE_SHARE)) + 1
    chosen, used, whole = _choose(same, room, count, ())
    assert used <= room
    assert {s.key for s in sorted(shorter, key=tokens)[:2]} <= whole
    assert longest.key not in whole
    rank = {(s.display, s.chunk.def_line + 1): i for i, s in enumerate(same)}
    # Shown in rank order, whatever order they were taken in: those whole, then the headers.
    assert [c.header_only for c in chosen] == sorted(c.header_only for c in chosen)
    for header_only in (False, True):
        order = [rank[(c.path, c.line)] for c in chosen if c.header_only is header_only]
        assert order == sorted(order)


def test_a_large_part_keeps_a_fixed_room_for_headers(tmp_path: Path, gemma: LlamaVocabTokenizer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The headers' share of a part is at most ``MAX_HEADER_TOKENS``: in a large part, whole
    definitions may use all but that, more than ``1 - SIGNATURE_SHARE`` of it."""
    from contenox_lsp import code_segment
    from contenox_lsp.code_segment import MAX_HEADER_TOKENS, SIGNATURE_SHARE, _choose

    src = "".join(f"def step_{i}(rows):\n" + "".join(
        f"    rows = rows + [compute_{i}_{j}(rows)]\n" for j in range(30)) + "    return rows\n\n\n"
        for i in range(8))
    (tmp_path / "steps.py").write_text(src)
    hits = [dataclasses.replace(s, score=1.0)
            for s in finder_for(tmp_path).search("rows step", limit=8)]
    assert len(hits) == 8

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    def tokens(s: Snippet) -> int:
        return count(f"{s.display}:{s.chunk.def_line + 1} {s.chunk.qualname} "
                     f"({s.reason})\n{render_snippet(s)}\n") + 8

    costs = sorted(tokens(s) for s in hits)
    whole_cost = sum(costs[:6])
    room = whole_cost + MAX_HEADER_TOKENS
    assert room * SIGNATURE_SHARE > MAX_HEADER_TOKENS  # the cap binds here
    _, used, whole = _choose(hits, room, count, ())
    assert len(whole) == 6 and used <= room
    # With the share alone, as before, one of the six no longer fits whole.
    monkeypatch.setattr(code_segment, "MAX_HEADER_TOKENS", room)
    _, _, whole = _choose(hits, room, count, ())
    assert len(whole) == 5


def test_a_prefill_rate_bounds_the_question_part_only(workspace: Path,
                                                      gemma: LlamaVocabTokenizer) -> None:
    """The question's code is prefilled at the ask: ``question_cap`` bounds it at what the
    engine computes in the time given, never below a floor; the room it keeps goes to the
    cursor part (prefilled in idle time), unless ``absorb`` is off."""
    budget = CodeBudget(1200, cursor_share=0.1)  # most definitions left to the question
    assert question_cap(None, 1000) is None  # no rate measured yet
    assert question_cap(500.0, 0) is None  # no bound asked for
    assert question_cap(300.0, 500) == 150
    assert question_cap(10.0, 1000) == QUESTION_MIN_TOKENS
    bounded = replace(budget, question_max=question_cap(140.0, 1000))
    assert bounded.cursor_tokens == 1200 - 140
    kept = replace(budget, absorb=False, question_max=question_cap(140.0, 1000))
    assert kept.cursor_tokens == budget.cursor_tokens

    finder = finder_for(workspace)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    def cost(snippets: tuple[CodeSnippet, ...]) -> int:
        return sum(count(f"{c.path}:{c.line} {c.title}\n{c.text}\n") + 8 for c in snippets)

    question = request(workspace, "how are quotes stripped and values loaded?")
    free = code_inputs(finder, question, count, budget, read_disk_text)
    capped = code_inputs(finder, question, count, kept, read_disk_text)
    assert capped[0] == free[0] and capped[0]  # the cursor part is the same
    assert cost(free[1]) > 140 >= cost(capped[1]) > 0
    absorbed = code_inputs(finder, question, count, bounded, read_disk_text)
    assert cost(absorbed[0]) > cost(free[0])  # more of the cursor's definitions shown
    assert 140 >= cost(absorbed[1])


def test_the_rate_behind_the_bound_ignores_noise() -> None:
    """Each prefill moves the measured rate a little; the bound (and so the prompt an explain
    shows right after an ask) moves only when the rate leaves a band around the one in use."""
    rate = SteadyRate()
    assert rate.update(None) is None
    assert rate.update(200.0) == 200.0
    assert rate.update(250.0) == 200.0 and rate.update(140.0) == 200.0
    assert rate.update(320.0) == 320.0  # beyond 1.5x: a different machine load, or model
    assert rate.update(None) == 320.0


def test_a_pinned_definition_is_not_repeated(workspace: Path, gemma: LlamaVocabTokenizer) -> None:
    finder = finder_for(workspace)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    parser = str(workspace / "config" / "parser.py")
    pinned = code_inputs(finder, request(workspace, "", pins=[(parser, None, None)]), count,
                         CodeBudget(600), read_disk_text)
    assert pinned == ((), ())


def test_what_does_not_fit_whole_keeps_its_header(workspace: Path, gemma: LlamaVocabTokenizer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from contenox_lsp import code_segment

    monkeypatch.setattr(code_segment, "SIGNATURE_SHARE", 0.5)  # room for several headers
    finder = finder_for(workspace)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    roomy = code_inputs(finder, request(workspace, ""), count, CodeBudget(2000, 1.0),
                        read_disk_text)[0]
    tight = code_inputs(finder, request(workspace, ""), count, CodeBudget(160, 1.0),
                        read_disk_text)[0]
    whole = {c.title.split()[0]: c.text for c in roomy}
    assert not any(c.header_only for c in roomy)
    assert len(tight) >= 2
    headers_only = [c for c in tight if c.header_only]
    assert headers_only, "a tight budget shows some definitions by their header"
    assert tight[-len(headers_only):] == tuple(headers_only)  # listed after the whole ones
    for c in headers_only:
        def_line = next(ln for ln in whole[c.title].split("\n") if not ln.lstrip().startswith("@"))
        assert c.text == def_line.strip() + " ..."  # one line: the header, its body elided


def test_the_chosen_code_costs_what_it_counted(workspace: Path,
                                               gemma: LlamaVocabTokenizer) -> None:
    """What ``_choose`` says it used covers the segment as rendered, the header list's
    heading included: the fit in ``assemble_within`` trusts it, and a part that keeps
    overrunning is dropped."""
    from contenox_lsp.code_segment import _choose
    from contextasm import render

    finder = finder_for(workspace)
    hits = finder.search("parse split unquote load value line strict", limit=10)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    heading = count("# Code that matches the question\n\n")
    files = [FileHit(f"/ws/pkg/module_{i}.py", f"pkg/module_{i}.py", 0, 1.0) for i in range(12)]
    with_headers = with_files = 0
    for room in range(60, 600, 20):
        for more in ((), files):
            chosen, used, _ = _choose(hits, room, count, (), implied_reason=QUESTION_REASON,
                                      files=more)
            assert used <= room
            shown = "".join(text for text, _ in render.code("Code that matches the question",
                                                            chosen))
            assert count(shown) <= used + heading, (room, len(more))
            with_headers += any(c.header_only for c in chosen)
            with_files += any(c.file_only for c in chosen)
    # The rooms where a header list, and a line of files, is shown were checked.
    assert with_headers >= 3 and with_files >= 3


def test_a_header_is_one_line(tmp_path: Path) -> None:
    src = (
        "@decorated\n"
        "def spread(\n"
        "    first: int,  # the first\n"
        "    second: str = '#not a comment',\n"
        ") -> int:  # returns the sum\n"
        "    return first\n\n\n"
        "def wide(" + ", ".join(f"argument_{i}" for i in range(20)) + "):\n"
        "    return None\n\n\n"
        "class Shape(Base):\n"
        "    sides = 3\n"
    )
    (tmp_path / "shapes.py").write_text(src)
    finder = finder_for(tmp_path)
    shown = {s.chunk.qualname: header_line(s)
             for s in finder.search("spread wide shape first argument sides", limit=5)}
    assert shown["spread"] == "def spread(first: int, second: str = '#not a comment') -> int: ..."
    assert shown["wide"].startswith("def wide(argument_0, argument_1, ")
    assert shown["wide"].endswith(", ...): ...") and len(shown["wide"]) <= HEADER_WIDTH + 12
    assert shown["Shape"] == "class Shape(Base): ..."


def test_a_long_definition_shows_its_head_and_the_lines_that_match(tmp_path: Path) -> None:
    body = "\n".join(f"    step_{i} = compute({i})" for i in range(200))
    src = f"def long_function(x):\n{body}\n    checksum = validate_checksum(x)\n    return x\n"
    (tmp_path / "big.py").write_text(src)
    finder = finder_for(tmp_path)
    [snippet] = finder.search("validate checksum")
    text = render_snippet(snippet, {"validate", "checksum"})
    lines = text.split("\n")
    assert lines[0] == "def long_function(x):"
    assert "    checksum = validate_checksum(x)" in lines  # the matching line, shown whole
    assert "    step_150 = compute(150)" not in lines
    assert any(ln.strip() == "..." for ln in lines)
    assert len(lines) <= 70
    head_only = render_snippet(snippet).split("\n")  # no focus: the first lines only
    assert "    checksum = validate_checksum(x)" not in head_only


def test_a_part_with_more_room_shows_more_of_a_long_definition(
        tmp_path: Path, gemma: LlamaVocabTokenizer) -> None:
    """A long definition shows at most ``MAX_SNIPPET_LINES`` lines in a part of an ordinary
    size, and one line per ``TOKENS_PER_SNIPPET_LINE`` tokens of a larger part's room."""
    from contenox_lsp.code_segment import (
        MAX_SNIPPET_LINES,
        TOKENS_PER_SNIPPET_LINE,
        _choose,
        snippet_lines,
    )

    body = "\n".join(f"    step_{i} = compute({i})" for i in range(300))
    (tmp_path / "big.py").write_text(f"def long_function(x):\n{body}\n    return x\n")
    finder = finder_for(tmp_path)
    [snippet] = finder.search("long function")

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    def steps_shown(room: int) -> int:
        [chosen], _, whole = _choose([snippet], room, count, ())
        assert whole == {snippet.key}
        return sum(ln.startswith("    step_") for ln in chosen.text.split("\n"))

    small, large = 2000, 6000
    assert snippet_lines(small) == MAX_SNIPPET_LINES
    assert snippet_lines(large) == large // TOKENS_PER_SNIPPET_LINE > MAX_SNIPPET_LINES
    assert steps_shown(small) == MAX_SNIPPET_LINES - 1  # the def line and the first steps
    assert steps_shown(large) == large // TOKENS_PER_SNIPPET_LINE - 1


def test_a_docstring_is_shown_by_its_first_line(tmp_path: Path) -> None:
    prose = "\n".join(f"    Paragraph line {i} about the checksum." for i in range(12))
    src = (f'class Store:\n    """Keeps records.\n\n{prose}\n    """\n\n    limit = 3\n\n'
           f'    def save(self, x):\n        """\n        Save x after checking it.\n\n{prose}\n'
           f'        """\n        checksum = validate_checksum(x)\n        return x\n\n\n'
           f'def short(x):\n    """One line."""\n    return x\n')
    (tmp_path / "store.py").write_text(src)
    finder = finder_for(tmp_path)
    shown = {s.chunk.qualname: render_snippet(s).split("\n")
             for s in finder.search("store save checksum short", limit=5)}
    # The class outline: its summary, the gap, the closing quotes, then the code.
    assert shown["Store"][:4] == ["class Store:", '    """Keeps records.', "    ...", '    """']
    assert "    limit = 3" in shown["Store"]
    # A bare opening quote: the line after it is the summary.
    save = shown["Store.save"]
    assert save[:5] == ["    def save(self, x):", '        """',
                        "        Save x after checking it.", "        ...", '        """']
    assert "        checksum = validate_checksum(x)" in save
    assert not any("Paragraph line" in ln for lines in shown.values() for ln in lines)
    # A one-line docstring stays as it is.
    assert shown["short"] == ["def short(x):", '    """One line."""', "    return x"]


# -- one budget, shared -----------------------------------------------------------------------


def _inputs(diff: str = "", selection: str | None = None) -> ContextInputs:
    return ContextInputs(
        system_prompt="You help with code.",
        repo_map=RepoMap("\n".join(f"pkg/m{i}.py:\n  def f{i}(x)" for i in range(60)), "d"),
        diff=diff,
        cursor_code=(CodeSnippet("pkg/a.py", 3, "helper (used by f)",
                                 "def helper():\n    return 1"),),
        question_code=(CodeSnippet("pkg/b.py", 9, "g (matches the question)",
                                   "def g():\n    return 2"),),
        user=UserTurn(question="Why?", selection=selection, file_path="pkg/a.py", line=3),
    )


def test_a_huge_diff_truncates_itself_and_the_code_segments_stay(
    gemma: LlamaVocabTokenizer,
) -> None:
    hunks = "".join(
        f"diff --git a/gen{i}.py b/gen{i}.py\n--- a/gen{i}.py\n+++ b/gen{i}.py\n@@ -1,1 +1,40 @@\n"
        + "".join(f"+generated_{i}_{j} = {j}\n" for j in range(40))
        for i in range(30)
    )
    ident = dataclasses.replace(make_identity(gemma), n_ctx=3000)
    asm = assemble(_inputs(diff=hunks), gemma, ident, max_new_tokens=100)
    diff = asm.segment(SegmentKind.DIFF)
    assert diff is not None and diff.truncated
    assert diff.n_tokens <= int(asm.limit * 0.35)
    labels = {s.label: s for s in asm.segments}
    assert "code (cursor)" in labels and "code (question)" in labels
    assert not labels["repo map"].truncated


def test_a_huge_pasted_selection_truncates_itself_and_the_map_stays(
    gemma: LlamaVocabTokenizer,
) -> None:
    paste = "\n".join(f"row_{i} = [{', '.join(str(j) for j in range(12))}]" for i in range(400))
    ident = dataclasses.replace(make_identity(gemma), n_ctx=3000)
    asm = assemble(_inputs(selection=paste), gemma, ident, max_new_tokens=100)
    user = asm.segment(SegmentKind.USER)
    assert user is not None and user.truncated and "selection truncated" in user.text
    assert "Question: Why?" in user.text
    assert not asm.segment(SegmentKind.REPO_MAP).truncated  # type: ignore[union-attr]
    assert {s.label for s in asm.segments} >= {"code (cursor)", "code (question)"}


# -- the source a test module mirrors ---------------------------------------------------------


def test_a_test_module_names_the_source_it_mirrors(tmp_path: Path) -> None:
    assert mirrored_name("tests/test_client.py") == "client.py"
    assert mirrored_name("pkg/client_test.py") == "client.py"
    assert mirrored_name("tests/conftest.py") is None
    assert mirrored_name("pkg/client.py") is None
    for rel in ("pkg/__init__.py", "pkg/client.py", "pkg/http/__init__.py", "pkg/http/client.py",
                "pkg/util/__init__.py", "tests/http/test_client.py", "tests/test_util.py",
                "tests/test_nothing.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("def f():\n    return 1\n")
    finder = finder_for(tmp_path)
    rel = lambda paths: [str(Path(p).relative_to(tmp_path)) for p in paths]  # noqa: E731
    # Of two client.py, the one whose folders share "http" with the test's.
    assert rel(finder.mirrored_sources(str(tmp_path / "tests/http/test_client.py"))) == [
        "pkg/http/client.py"]
    assert rel(finder.mirrored_sources(str(tmp_path / "tests/test_util.py"))) == [
        "pkg/util/__init__.py"]
    assert finder.mirrored_sources(str(tmp_path / "tests/test_nothing.py")) == []
    assert finder.mirrored_sources(str(tmp_path / "pkg/client.py")) == []


def test_the_mirrored_source_ranks_above_an_equal_match(tmp_path: Path) -> None:
    body = "def render_header(value):\n    return value.title()\n"
    for rel in ("pkg/alpha.py", "pkg/beta.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_beta.py").write_text("def test_it():\n    pass\n")
    finder = finder_for(tmp_path)
    finder.sync()
    alone = finder.search("render the header")
    assert [Path(s.path).name for s in alone] == ["alpha.py", "beta.py"]  # a tie: by path
    mirrors = finder.mirrored_sources(str(tmp_path / "tests/test_beta.py"))
    boosted = finder.search("render the header", mirror_files=mirrors)
    assert [Path(s.path).name for s in boosted] == ["beta.py", "alpha.py"]


def test_headers_are_listed_after_the_code_and_locate_their_definition(
    gemma: LlamaVocabTokenizer,
) -> None:
    from contenox_bench.ctxeval_metrics import placement_shares, placements, score

    inputs = dataclasses.replace(_inputs(), question_code=(
        CodeSnippet("pkg/b.py", 9, "g", "def g():\n    return 2"),
        CodeSnippet("pkg/c.py", 4, "Shape.area", "def area(self) -> float: ...", header_only=True),
        CodeSnippet("pkg/b.py", 20, "h", "def h(x): ...", header_only=True),
    ))
    asm = assemble(inputs, gemma, make_identity(gemma), max_new_tokens=100)
    [segment] = [s for s in asm.segments if s.label == "code (question)"]
    text = segment.text
    assert text.index("pkg/b.py:9 g\n```") < text.index("Headers of more definitions")
    assert ("pkg/c.py:4 Shape.area\ndef area(self) -> float: ...\n"
            "pkg/b.py:20 h\ndef h(x): ...\n") in text
    assert text.count("```") == 2  # one fence: the definition shown whole
    # A header locates its definition in its file; its body is not shown.
    task = {"gt_files": ["pkg/c.py"], "gt_defs": [
        {"file": "pkg/c.py", "name": "area", "kind": "def", "body_line": "return self.w * self.h"}]}
    assert score(asm, task) == {"file_recall": 1.0, "def_located": 1.0, "body_present": 0.0}
    # Where each definition is: g's code, h's header only, k nowhere (without a body line).
    task["gt_defs"] += [{"file": "pkg/b.py", "name": "g", "qualname": "g", "kind": "def",
                         "body_line": "return 2"},
                        {"file": "pkg/b.py", "name": "h", "kind": "def", "body_line": None},
                        {"file": "pkg/b.py", "name": "k", "kind": "def", "body_line": None}]
    placed = placements(asm, task)
    assert [(d["name"], d["shown"], d["body"]) for d in placed] == [
        ("area", "header", False), ("g", "code", True), ("h", "header", None), ("k", None, None)]
    assert score(asm, task, placed) == score(asm, task) == {
        "file_recall": 1.0, "def_located": 0.75, "body_present": 0.5}
    assert placement_shares([placed, placed[1:2]]) == {
        "code": 0.625, "header": 0.25, "cursor": 0.0, "pin": 0.0, "map": 0.0, "none": 0.125}


def test_the_definitions_a_traceback_ran_through_come_first(workspace: Path,
                                                            gemma: LlamaVocabTokenizer) -> None:
    finder = finder_for(workspace)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    parser = str((workspace / "config" / "parser.py").resolve())
    test = str((workspace / "tests" / "test_parser.py").resolve())
    lines = PARSER.split("\n")
    in_unquote = lines.index("        return value[1:-1]")
    in_split = lines.index("        return key.strip(), _unquote(value)")
    question = "Why does parsing a quoted value fail?"
    plain = code_inputs(finder, request(workspace, question), count, CodeBudget(900, 0.0),
                        read_disk_text)[1]
    assert plain and plain[0].title != "_unquote"
    # Innermost first; the function at the cursor (the test) is where the user is already.
    frames = ((parser, in_unquote), (parser, in_split), (test, 5))
    traced = code_inputs(finder, dataclasses.replace(request(workspace, question), frames=frames),
                         count, CodeBudget(900, 0.0), read_disk_text)[1]
    assert [c.title for c in traced[:2]] == ["_unquote (in the output's traceback)",
                                             "Parser._split (in the output's traceback)"]
    assert not any(c.header_only for c in traced[:2])
    assert "test_quoted_values" not in " ".join(c.title for c in traced)
    # The search's hits follow, once each; "matches the question" is left to the heading.
    rest = [c.title for c in traced[2:]]
    assert rest and not any("matches the question" in t or "traceback" in t for t in rest)
    assert not {"_unquote", "Parser._split"} & {t.split()[0] for t in rest}


def test_more_files_are_named_after_the_headers(tmp_path: Path, gemma: LlamaVocabTokenizer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Past what fits whole or as a header, the question part names the files of more of
    its candidates on one line: source files only, none the context shows already."""
    from contenox_lsp import code_segment
    from contenox_lsp.code_segment import MORE_FILES

    body = ('def render_{n}(value):\n    """Render the header."""\n'
            + "".join(f"    value = value.replace('{i}', 'header {i}')\n" for i in range(12))
            + "    return value\n")
    (tmp_path / "pkg").mkdir()
    for n in range(MORE_FILES + 4):
        (tmp_path / f"pkg/render_{n:02}.py").write_text(body.format(n=n))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_render.py").write_text(
        "from pkg.render_00 import render_0\n\n\ndef test_header_rendering():\n"
        "    assert render_0('header') == 'Header'\n")
    (tmp_path / "tests/test_header.py").write_text("def test_render_the_header():\n    pass\n")
    finder = finder_for(tmp_path)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    req = CodeRequest(roots=[tmp_path], buffers={}, pins=[
                          (str((tmp_path / "pkg/render_04.py").resolve()), 0, 2)],
                      path=Path("tests/test_render.py"), line=5,
                      question="How is the header rendered?",
                      mapped=[str((tmp_path / "pkg/render_03.py").resolve())])
    _, asked = code_inputs(finder, req, count, CodeBudget(400, 0.0), read_disk_text)
    named = [c for c in asked if c.file_only]
    assert named and asked[-len(named):] == tuple(named)  # listed last
    assert len(named) <= MORE_FILES
    shown = {c.path for c in asked if not c.file_only}
    for c in named:
        assert c.path.startswith("pkg/render_") and c.path not in shown
    assert "pkg/render_03.py" not in {c.path for c in named}  # the repo map shows it
    assert "pkg/render_04.py" not in {c.path for c in named}  # a pin shows it
    # In the segment: one line after the headers.
    inputs = dataclasses.replace(_inputs(), question_code=asked)
    asm = assemble(inputs, gemma, make_identity(gemma), max_new_tokens=100)
    [segment] = [s for s in asm.segments if s.label == "code (question)"]
    line = FILES_HEADING + ", ".join(c.path for c in named) + "\n"
    assert line in segment.text
    if any(c.header_only for c in asked):
        assert segment.text.index("Headers of more definitions") < segment.text.index(line)
    # With room for every candidate whole, nothing is left to name.
    _, roomy = code_inputs(finder, req, count, CodeBudget(6000, 0.0), read_disk_text)
    assert roomy and not any(c.file_only for c in roomy)
    # A file is named only for a candidate scoring near enough the best hit (here the
    # source the test imports, which the cursor's code reaches, scores above the rest).
    monkeypatch.setattr(code_segment, "MORE_FILES_MIN_SCORE", 1.0)
    _, strict = code_inputs(finder, req, count, CodeBudget(400, 0.0), read_disk_text)
    assert not any(c.file_only for c in strict)


def test_the_files_the_best_definitions_import_from_are_named_first(
    tmp_path: Path, gemma: LlamaVocabTokenizer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The files line starts with the files the best hits' code imports the names it uses
    from, though they share no word with the question: where the name is defined (past a
    package's ``__init__`` re-exporting it). An import the code does not use, a file the
    context shows and a test module are not named."""
    from contenox_lsp import code_segment

    (tmp_path / "pkg/formats").mkdir(parents=True)
    (tmp_path / "pkg/__init__.py").write_text('"""Rendering."""\n')
    (tmp_path / "pkg/scrubbing.py").write_text(
        '"""Text cleaning."""\n\n\ndef _scrub(text):\n    return text.strip().lower()\n')
    (tmp_path / "pkg/formats/__init__.py").write_text("from pkg.formats.upper import shout\n")
    (tmp_path / "pkg/formats/upper.py").write_text("def shout(text):\n    return text.upper()\n")
    (tmp_path / "pkg/unused.py").write_text("def nothing_here():\n    return 1\n")
    (tmp_path / "pkg/shown.py").write_text("def _wrap(text):\n    return [text]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/fixtures.py").write_text("def sample():\n    return 'x'\n")
    (tmp_path / "pkg/render.py").write_text(
        "from pkg.scrubbing import _scrub\nfrom pkg.unused import nothing_here\n"
        "from pkg.shown import _wrap\nfrom pkg.formats import shout\n"
        "from tests.fixtures import sample\n\n\n"
        "def render_header(value):\n    \"\"\"Render the header.\"\"\"\n"
        + "".join(f"    value = value.replace('{i}', 'header {i}')\n" for i in range(12))
        + "    return _wrap(_scrub(value)), sample(), shout(value)\n")
    for n in range(10):
        (tmp_path / f"pkg/header_{n}.py").write_text(
            f"def header_{n}(value):\n    \"\"\"The header.\"\"\"\n"
            + "".join(f"    value = value + '{i}'\n" for i in range(12))
            + "    return value\n")
    finder = finder_for(tmp_path)

    def count(text: str) -> int:
        return len(gemma.tokenize(text, special=False))

    req = CodeRequest(roots=[tmp_path], buffers={}, pins=[], path=None, line=None,
                      question="How is the header rendered?",
                      mapped=[str((tmp_path / "pkg/shown.py").resolve())])

    def named_files() -> dict[str, int]:
        _, asked = code_inputs(finder, req, count, CodeBudget(400, 0.0), read_disk_text)
        assert asked and asked[0].title == "render_header" and not asked[0].header_only
        return {c.path: c.line for c in asked if c.file_only}

    named = named_files()
    imported = {"pkg/scrubbing.py": 4, "pkg/formats/upper.py": 1}
    assert dict(list(named.items())[:2]) == imported  # first; at the name imported
    assert not {"pkg/unused.py", "pkg/shown.py", "tests/fixtures.py", "pkg/__init__.py",
                "pkg/formats/__init__.py"} & set(named)
    assert {f"pkg/header_{n}.py" for n in range(10)} & set(named)  # then what matches
    # The imported helpers are named for the imports alone: no word of the question finds them.
    monkeypatch.setattr(code_segment, "IMPORTS_FROM", 0)
    assert not set(imported) & set(named_files())


def test_a_shrunk_question_part_drops_the_files_first_and_counts_only_definitions(
    gemma: LlamaVocabTokenizer,
) -> None:
    whole = tuple(CodeSnippet(f"pkg/m{i}.py", 3, f"f{i}",
                              f"def f{i}(x):\n" + "".join(f"    x += {j}\n" for j in range(20))
                              + "    return x") for i in range(4))
    files = tuple(CodeSnippet(f"pkg/other_{i}.py", 1, "", "", file_only=True) for i in range(3))
    inputs = dataclasses.replace(_inputs(), question_code=whole + files)
    full = assemble(inputs, gemma, make_identity(gemma), max_new_tokens=100)
    seen = set()
    for n_ctx in range(full.n_tokens + 400, full.n_tokens - 600, -4):
        ident = dataclasses.replace(make_identity(gemma), n_ctx=n_ctx)
        try:
            asm = assemble(inputs, gemma, ident, max_new_tokens=100)
        except ContextOverflowError:  # too small for the rest of the prompt: done
            break
        segment = next((s for s in asm.segments if s.label == "code (question)"), None)
        if segment is None:
            break
        text = segment.text
        shown_defs = sum(f"pkg/m{i}.py:3 f{i}\n" in text for i in range(4))
        named = [f"pkg/other_{i}.py" for i in range(3) if f"pkg/other_{i}.py" in text]
        if named:
            assert shown_defs == 4  # the files go before any definition does
        left_out = re.search(r"\((\d+) more definitions left out", text)
        assert (int(left_out.group(1)) if left_out else 0) == 4 - shown_defs
        seen.add((shown_defs, len(named)))
    # Rungs with every file, some, none, and fewer definitions were all checked.
    assert {(4, 3), (4, 0)} <= seen and any(0 < f < 3 for _, f in seen)
    assert any(d < 4 for d, _ in seen)
