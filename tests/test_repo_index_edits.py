"""repo_index: LSP positions → bytes, incremental re-parse and region splicing.

The oracle everywhere is a full parse + full extraction of the final text: whatever path the
incremental code takes, the symbols must come out identical.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repo_index import languages
from repo_index.extract import extract
from repo_index.incremental import open_document, reparse
from repo_index.symbols import FileSymbols
from repo_index.textedit import (
    EditError,
    apply_edits,
    diff_edit,
    encode_text,
    envelope,
    point_at,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])


def full(lang: str, text: str) -> FileSymbols:
    loaded = languages.load(lang)
    source = encode_text(text)
    return extract(loaded, source, loaded.parser().parse(source))


def units(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-16":
        return len(text.encode("utf-16-le")) // 2
    return len(text)


def lsp_range(text: str, start: int, end: int, encoding: str) -> dict[str, Any]:
    """LSP range for str offsets ``[start, end)`` of ``text`` (lines split at \\n only)."""

    def pos(offset: int) -> dict[str, int]:
        line = text.count("\n", 0, offset)
        line_start = text.rfind("\n", 0, offset) + 1
        return {"line": line, "character": units(text[line_start:offset], encoding)}

    return {"start": pos(start), "end": pos(end)}


def change(text: str, start: int, end: int, new: str, encoding: str = "utf-16") -> dict[str, Any]:
    return {"range": lsp_range(text, start, end, encoding), "text": new}


# ---------------------------------------------------------------- positions and edits


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_non_ascii_positions_map_to_utf8_bytes(encoding: str) -> None:
    text = "a = 'é😀x'\nb = 2\n"
    at = text.index("x")
    new_text, edits = apply_edits(
        encode_text(text), [change(text, at, at + 1, "ü", encoding)], encoding
    )
    assert new_text.decode() == "a = 'é😀ü'\nb = 2\n"
    (edit,) = edits
    assert edit.start_byte == len(text[:at].encode())
    assert edit.start_point == (0, len("a = 'é😀".encode()))
    assert edit.new_end_byte - edit.start_byte == len("ü".encode())


def test_utf16_position_inside_a_surrogate_pair_clamps_to_the_character_start() -> None:
    text = "😀z\n"
    # character 1 is the middle of the emoji's surrogate pair
    edit = {
        "range": {"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 1}},
        "text": "!",
    }
    result, _ = apply_edits(encode_text(text), [edit], "utf-16")
    assert result.decode() == "!😀z\n"


def test_crlf_and_cr_line_endings() -> None:
    text = "one\r\ntwo\rthree\nfour"
    source = encode_text(text)
    edit = {
        "range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 5}},
        "text": "THREE",
    }
    result, (e,) = apply_edits(source, [edit], "utf-16")
    assert result == b"one\r\ntwo\rTHREE\nfour"
    # tree-sitter rows count \n only: "three" starts on row 1 (after the \r\n)
    assert e.start_point == point_at(source, source.index(b"three")) == (1, 4)


def test_positions_past_the_end_clamp() -> None:
    source = b"ab\ncd"
    edit = {
        "range": {"start": {"line": 0, "character": 99}, "end": {"line": 7, "character": 0}},
        "text": "!",
    }
    result, _ = apply_edits(source, [edit], "utf-16")
    assert result == b"ab!"


def test_sequential_edits_and_full_document_change() -> None:
    text = "x = 1\ny = 2\n"
    first = change(text, 0, 1, "xx")
    after = "xx = 1\ny = 2\n"
    second = change(after, after.index("y"), after.index("y") + 1, "yy")
    result, edits = apply_edits(encode_text(text), [first, second], "utf-16")
    assert result == b"xx = 1\nyy = 2\n"
    assert envelope(edits) == (0, result.index(b"yy") + 2)
    whole, _ = apply_edits(encode_text(text), [{"text": "z = 3\n"}], "utf-16")
    assert whole == b"z = 3\n"


def test_malformed_edits_raise() -> None:
    with pytest.raises(EditError):
        apply_edits(b"abc", [{"range": {"start": {"line": 0}, "end": {}}, "text": "x"}])
    with pytest.raises(EditError):
        apply_edits(
            b"abc",
            [
                {
                    "range": {
                        "start": {"line": 0, "character": 2},
                        "end": {"line": 0, "character": 1},
                    },
                    "text": "",
                }
            ],
        )
    with pytest.raises(ValueError):
        apply_edits(b"abc", [], "latin-1")


def test_diff_edit_is_the_differing_middle() -> None:
    e = diff_edit(b"abcXYdef", b"abcZdef")
    assert (e.start_byte, e.old_end_byte, e.new_end_byte) == (3, 5, 4)
    e = diff_edit(b"aaaa", b"aaaaaa")
    assert (e.start_byte, e.old_end_byte, e.new_end_byte) == (4, 4, 6)


# ---------------------------------------------------------------- incremental == full

PY_SOURCE = '''"""Module docstring."""
import os


class Store:
    """A store."""

    LIMIT = 3

    def get(self, key: str) -> str:
        value = os.environ.get(key, "")
        return value.strip()

    def put(self, key: str, value: str) -> None:
        os.environ[key] = value


def helper(x: int) -> int:
    # comment
    total = 0
    for i in range(x):
        total += compute(i)
    return total


def compute(i):
    return i * 2
'''


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_body_edit_with_non_ascii_equals_full_reindex(encoding: str) -> None:
    lang = languages.load("python")
    doc = open_document(lang, encode_text(PY_SOURCE))
    at = PY_SOURCE.index("total = 0")
    text = PY_SOURCE[:at] + "note = 'ünïcødé 😀'\n    " + PY_SOURCE[at:]
    edit = change(PY_SOURCE, at, at, "note = 'ünïcødé 😀'\n    ", encoding)
    result = reparse(doc, lang, encode_text(text), [edit], encoding)
    assert result.mode == "region"
    assert result.document.symbols == full("python", text)
    # and a second edit after the non-ASCII text, positions counted in the same encoding
    at2 = text.index("compute(i)")
    text2 = text[:at2] + "compute2(i)" + text[at2 + len("compute(i)") :]
    edit2 = change(text, at2, at2 + len("compute(i)"), "compute2(i)", encoding)
    result2 = reparse(result.document, lang, encode_text(text2), [edit2], encoding)
    assert result2.mode in ("region", "incremental")
    assert result2.document.symbols == full("python", text2)


def test_inconsistent_edits_fall_back_to_a_full_parse() -> None:
    lang = languages.load("python")
    doc = open_document(lang, encode_text(PY_SOURCE))
    text = PY_SOURCE.replace("def compute(i):", "def compute(i, j):")
    bogus = change(PY_SOURCE, 0, 0, "# not what happened\n")
    result = reparse(doc, lang, encode_text(text), [bogus])
    assert result.mode == "full"
    assert result.document.symbols == full("python", text)


def test_no_edits_uses_the_text_difference() -> None:
    lang = languages.load("python")
    doc = open_document(lang, encode_text(PY_SOURCE))
    text = PY_SOURCE.replace("return value.strip()", "return value.strip().lower()")
    result = reparse(doc, lang, encode_text(text), None)
    assert result.mode == "region"
    assert result.document.symbols == full("python", text)


def test_enclosing_definitions_get_their_new_extent() -> None:
    lang = languages.load("python")
    doc = open_document(lang, encode_text(PY_SOURCE))
    at = PY_SOURCE.index("    def put")
    addition = "    def extra(self):\n        return 1\n\n"
    text = PY_SOURCE[:at] + addition + PY_SOURCE[at:]
    result = reparse(doc, lang, encode_text(text), [change(PY_SOURCE, at, at, addition)])
    assert result.document.symbols == full("python", text)
    store = next(d for d in result.document.symbols.defs if d.name == "Store")
    assert store.end_line == text[: text.index("os.environ[key] = value")].count("\n")


SNIPPETS = [
    "x",
    " ",
    "\n",
    "    ",
    "(",
    ")",
    ":",
    "'",
    '"""',
    "# c\n",
    "def g(a):\n    return a\n",
    "class K:\n    pass\n",
    "foo(bar)",
    "é😀",
    "",
]


@settings(
    max_examples=60,
    deadline=None,
    database=None,  # no example database in the checkout
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_random_edit_sequences_match_full_reindex(data: st.DataObject) -> None:
    """Any sequence of edits (including ones that break the syntax) gives the same symbols as
    indexing the final text from scratch."""
    lang = languages.load("python")
    text = PY_SOURCE
    doc = open_document(lang, encode_text(text))
    encoding = data.draw(st.sampled_from(["utf-16", "utf-8", "utf-32"]))
    for _ in range(data.draw(st.integers(1, 6))):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 40)))
        new = data.draw(st.sampled_from(SNIPPETS))
        edit = change(text, start, end, new, encoding)
        text = text[:start] + new + text[end:]
        doc = reparse(doc, lang, encode_text(text), [edit], encoding).document
        expected = full("python", text)
        assert doc.symbols == expected
        assert doc.symbols.ref_counts() == expected.ref_counts()  # kept incrementally


def test_one_line_edits_in_a_stdlib_module_stay_regional() -> None:
    """Typing inside function bodies of a real 2,000-line module re-extracts only a region
    and still equals a full re-index."""
    source = (STDLIB / "subprocess.py").read_text()
    lang = languages.load("python")
    doc = open_document(lang, encode_text(source))
    lines = source.split("\n")
    body_lines = [
        i
        for i, line in enumerate(lines)
        if line.startswith("        ") and line.strip().startswith(("return ", "self."))
    ][:40]
    modes = []
    text = source
    for i in body_lines:
        offset = sum(len(line) + 1 for line in text.split("\n")[:i])
        at = offset + len(text.split("\n")[i])
        edit = change(text, at, at, "  # x")
        text = text[:at] + "  # x" + text[at:]
        result = reparse(doc, lang, encode_text(text), [edit])
        modes.append(result.mode)
        doc = result.document
    assert doc.symbols == full("python", text)
    assert modes.count("region") >= len(modes) * 0.8


@pytest.mark.parametrize(
    ("lang", "text", "old", "new"),
    [
        (
            "javascript",
            "class A {\n  m() {\n    return f(1);\n  }\n}\nfunction f(x) { return x; }\n",
            "f(1)",
            "f(2) + g()",
        ),
        (
            "typescript",
            "interface I { a(): void }\nclass C implements I {\n  a(): void {\n"
            "    console.log(1);\n  }\n}\n",
            "console.log(1)",
            "helper(C)",
        ),
        (
            "go",
            "package p\n\nfunc A() int {\n\treturn B()\n}\n\nfunc B() int { return 1 }\n",
            "return B()",
            "return B() + C()",
        ),
        ("rust", "fn a() -> u32 {\n    b()\n}\n\nfn b() -> u32 { 1 }\n", "b()\n", "b() + c()\n"),
        (
            "java",
            "class A {\n  int m() {\n    return n();\n  }\n  int n() { return 1; }\n}\n",
            "return n();",
            "return n() + o();",
        ),
        (
            "c",
            "int b(void);\nint a(void) {\n  return b();\n}\n",
            "return b();",
            "return b() + c();",
        ),
        (
            "cpp",
            "namespace n {\nint a() {\n  return b();\n}\n}\n",
            "return b();",
            "return b() + c();",
        ),
        (  # the name follows the edited body: its extent and signature must be re-read
            "c",
            "typedef struct {\n    int x;\n} point_t;\n\nint f(void);\n",
            "    int x;\n",
            "    int x;\n    int y;\n    int z;\n",
        ),
    ],
)
def test_body_edits_in_other_languages_equal_full_reindex(
    lang: str, text: str, old: str, new: str
) -> None:
    loaded = languages.load(lang)
    doc = open_document(loaded, encode_text(text))
    at = text.index(old)
    text2 = text[:at] + new + text[at + len(old) :]
    result = reparse(doc, loaded, encode_text(text2), [change(text, at, at + len(old), new)])
    assert result.mode in ("region", "incremental")
    assert result.document.symbols == full(lang, text2)
