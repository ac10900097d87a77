"""Run a language's tags query over a parse tree and produce plain symbol records.

One traversal finds both kinds of tags: a match of a definition pattern pairs the ``@name``
node with its ``@definition.<kind>`` node; a match of a reference pattern contributes its
``@name`` node.
"""

from __future__ import annotations

import sys
from array import array

import tree_sitter as ts

from repo_index.languages import LoadedLanguage
from repo_index.signature import owner_of, signature
from repo_index.symbols import Definition, FileSymbols

# When two patterns tag the same name (Rust tags a method both as method and as function),
# the more specific kind wins.
_KIND_PRIORITY = {
    kind: i
    for i, kind in enumerate(
        (
            "method",
            "class",
            "interface",
            "enum",
            "module",
            "type",
            "macro",
            "function",
            "constant",
            "variable",
        )
    )
}
_NO_END = 1 << 62

_Found = tuple[int, str, ts.Node, ts.Node]  # (kind priority, kind, definition node, name)


def _matches(
    lang: LoadedLanguage, root: ts.Node, lo: int, hi: int, size: int, want_refs: bool
) -> tuple[dict[int, _Found], dict[int, ts.Node]]:
    """Definitions and reference names whose names start in ``[lo, hi)``, keyed by byte."""
    cursor = ts.QueryCursor(lang.query)
    if lo > 0 or hi < _NO_END:
        cursor.set_byte_range(lo, min(hi, size))
    def_keys = lang.def_keys
    defs: dict[int, _Found] = {}
    refs: dict[int, ts.Node] = {}
    for pattern, caps in cursor.matches(root):
        names = caps.get("name")
        if not names:
            continue
        name = names[0]
        at = name.start_byte
        if not lo <= at < hi:
            continue
        key = def_keys[pattern]
        if key is None:
            if want_refs:
                refs[at] = name
            continue
        nodes = caps.get(key)
        if not nodes:
            continue
        kind = sys.intern(key[11:])
        rank = _KIND_PRIORITY.get(kind, len(_KIND_PRIORITY))
        seen = defs.get(at)
        if seen is None or rank < seen[0]:
            defs[at] = (rank, kind, nodes[0], name)
    return defs, refs


def _definitions(lang: LoadedLanguage, source: bytes, found: dict[int, _Found]) -> list[Definition]:
    spec = lang.spec
    out: list[Definition] = []
    for at in sorted(found):
        _rank, kind, node, name_node = found[at]
        owner = owner_of(spec, node)
        text = name_node.text or b""
        row, col = name_node.start_point
        out.append(
            Definition(
                sys.intern(text.decode("utf-8", "replace")),
                kind,
                at,
                row,
                col,
                owner.start_byte,
                owner.end_byte,
                owner.start_point[0],
                owner.end_point[0],
                signature(spec, source, owner, name_node),
            )
        )
    return out


def extract_defs(
    lang: LoadedLanguage, source: bytes, root: ts.Node, lo: int = 0, hi: int = _NO_END
) -> list[Definition]:
    """Definitions whose names start in ``[lo, hi)``, sorted by position."""
    found, _refs = _matches(lang, root, lo, hi, len(source), want_refs=False)
    return _definitions(lang, source, found)


def extract_range(
    lang: LoadedLanguage, source: bytes, tree: ts.Tree, lo: int = 0, hi: int = _NO_END
) -> tuple[list[Definition], list[str], list[int]]:
    """Definitions and references whose names start in ``[lo, hi)`` (UTF-8 bytes):
    definitions, reference names, and flat (byte, line, column) reference positions."""
    found, refs = _matches(lang, tree.root_node, lo, hi, len(source), want_refs=True)
    names: list[str] = []
    pos: list[int] = []
    intern = sys.intern
    for at in sorted(refs):
        # A name that is also a definition's name (Go tags every type_identifier) is not a use.
        if at in found:
            continue
        node = refs[at]
        text = node.text or b""
        row, col = node.start_point
        names.append(intern(text.decode("utf-8", "replace")))
        pos += (at, row, col)
    return _definitions(lang, source, found), names, pos


def extract(lang: LoadedLanguage, source: bytes, tree: ts.Tree) -> FileSymbols:
    defs, names, pos = extract_range(lang, source, tree)
    return FileSymbols(tuple(defs), tuple(names), array("I", pos))


def parse_and_extract(lang: LoadedLanguage, source: bytes) -> tuple[ts.Tree, FileSymbols]:
    tree = lang.parser().parse(source)
    return tree, extract(lang, source, tree)
