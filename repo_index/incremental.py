"""Re-index one open document after an edit: incremental parse, then re-extract only the
region the edit can have affected and splice it into the previous symbols.

The region is the edited range plus tree-sitter's changed ranges, grown to whole *units*
(children of a block-like node: statements, members, top-level definitions) and whole lines.
tags patterns never look across units, so every symbol whose name lies outside the region is
unchanged apart from a shift; definitions whose extent overlaps the region (those enclosing
it, and those named after their body like ``typedef struct {…} name;``) are re-derived from
the new tree. Reference counts are updated from the region's change, and when no definition
changed name, kind, signature or nesting the outline is reused as is. When the region is most
of the file, a plain full extraction is cheaper and simpler.

Syntax errors end the incremental path: tree-sitter's error recovery depends on the previous
tree, so a broken buffer is parsed afresh to keep "incremental == full re-index" exact.
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tree_sitter as ts

from repo_index.extract import extract, extract_defs, extract_range
from repo_index.languages import LoadedLanguage
from repo_index.symbols import Definition, FileSymbols
from repo_index.syntax import is_container
from repo_index.textedit import ByteEdit, EditError, apply_edits, diff_edit, envelope

log = logging.getLogger(__name__)

_FULL_EXTRACT_SHARE = 0.5  # re-extract everything when the region is at least this share


@dataclass
class OpenDocument:
    """What the index keeps for a file being edited: its text, tree and symbols."""

    lang: LoadedLanguage
    source: bytes
    tree: ts.Tree
    symbols: FileSymbols


@dataclass(frozen=True)
class Reparse:
    document: OpenDocument
    mode: str  # "full", "incremental", "region" or "unchanged"


def open_document(lang: LoadedLanguage, source: bytes) -> OpenDocument:
    tree = lang.parser().parse(source)
    return OpenDocument(lang, source, tree, extract(lang, source, tree))


def reparse(
    doc: OpenDocument | None,
    lang: LoadedLanguage,
    source: bytes,
    edits: Sequence[Any] | None = None,
    encoding: str = "utf-16",
) -> Reparse:
    """The document after the change. With LSP ``edits`` the old tree is edited with them;
    without, the edit is the differing middle of old and new text. Edits that do not
    reproduce ``source`` exactly are discarded in favour of a full parse."""
    if doc is None or doc.lang is not lang:
        return Reparse(open_document(lang, source), "full")
    if source == doc.source:
        return Reparse(doc, "unchanged")
    byte_edits: list[ByteEdit]
    if edits is not None:
        try:
            result, byte_edits = apply_edits(doc.source, edits, encoding)
        except EditError as exc:
            log.debug("unusable edits (%s); full parse", exc)
            return Reparse(open_document(lang, source), "full")
        if result != source:
            log.debug("edits do not reproduce the new text; full parse")
            return Reparse(open_document(lang, source), "full")
    else:
        byte_edits = [diff_edit(doc.source, source)]
    old_tree = doc.tree.copy()
    for e in byte_edits:
        old_tree.edit(
            e.start_byte,
            e.old_end_byte,
            e.new_end_byte,
            e.start_point,
            e.old_end_point,
            e.new_end_point,
        )
    tree = lang.parser().parse(source, old_tree)
    if tree.root_node.has_error:
        # Error recovery depends on the previous tree, so an incremental parse of broken
        # code can differ from a fresh one; the index must equal a fresh parse.
        return Reparse(open_document(lang, source), "full")
    lo, hi = envelope(byte_edits)
    changed = old_tree.changed_ranges(tree)
    symbols = _splice(doc, lang, source, tree, lo, hi, changed)
    if symbols is None:
        return Reparse(OpenDocument(lang, source, tree, extract(lang, source, tree)), "incremental")
    return Reparse(OpenDocument(lang, source, tree, symbols), "region")


def _region(
    tree: ts.Tree, source: bytes, lo: int, hi: int, changed: Sequence[ts.Range]
) -> tuple[int, int, set[int]]:
    """Line-aligned unit region covering ``[lo, hi)`` and the changed ranges, plus the start
    bytes of the nodes enclosing it (definitions starting there may have grown or shrunk)."""
    start, end = lo, hi
    for r in changed:
        start, end = min(start, r.start_byte), max(end, r.end_byte)
    size = len(source)
    start, end = max(0, min(start, size)), max(0, min(end, size))
    root = tree.root_node
    node = root.descendant_for_byte_range(start, max(end, min(start + 1, size))) or root
    while node.parent is not None and not is_container(node) and not is_container(node.parent):
        node = node.parent
    if is_container(node) or node.parent is None:
        # The change lies between units (whitespace, comments, or across several of them):
        # the region is the units it touches, not the whole container.
        container = node
        # A TreeCursor, not Node.first_child_for_byte: the latter crashes (py-tree-sitter
        # 0.25) when no child ends after the byte.
        cursor = container.walk()
        if cursor.goto_first_child_for_byte(start) is not None:
            while True:
                child = cursor.node
                if child is None or child.start_byte > end:
                    break
                start, end = min(start, child.start_byte), max(end, child.end_byte)
                if not cursor.goto_next_sibling():
                    break
    else:
        container = node.parent
        start, end = min(start, node.start_byte), max(end, node.end_byte)
    enclosing: set[int] = set()
    up: ts.Node | None = container
    while up is not None:
        enclosing.add(up.start_byte)
        up = up.parent
    start = source.rfind(b"\n", 0, start) + 1
    if end > 0 and source[end - 1 : end] != b"\n":
        eol = source.find(b"\n", end)
        end = size if eol == -1 else eol + 1
    return start, end, enclosing


def _splice(
    doc: OpenDocument,
    lang: LoadedLanguage,
    source: bytes,
    tree: ts.Tree,
    lo: int,
    hi: int,
    changed: Sequence[ts.Range],
) -> FileSymbols | None:
    """New symbols from the old ones plus a region re-extraction, or None to extract all."""
    old_source = doc.source
    start, end, enclosing = _region(tree, source, lo, hi, changed)
    if end - start >= _FULL_EXTRACT_SHARE * max(len(source), 1):
        return None
    delta = len(source) - len(old_source)
    old_end = end - delta
    if old_end < start or (0 < old_end < len(old_source) and old_source[old_end - 1] != 10):
        return None  # the region does not map back onto line boundaries: be safe
    line_delta = source.count(b"\n", start, end) - old_source.count(b"\n", start, old_end)

    new_defs, new_names, new_pos = extract_range(lang, source, tree, start, end)
    old = doc.symbols
    root = tree.root_node
    defs: list[Definition] = []
    region_old: list[Definition] = []
    # Whether every definition kept its name, kind and signature (the outline may then be
    # reused once nesting is confirmed unchanged).
    same_shape = True
    new_def = Definition.__new__
    for d in old.defs:
        at = d.name_byte
        if start <= at < old_end:
            region_old.append(d)
            if len(region_old) == 1:
                defs.extend(new_defs)
            continue
        is_after = at >= old_end
        if d.start_byte < old_end and (d.end_byte > start or d.start_byte in enclosing):
            # Overlaps (usually: encloses) the region: its extent, and for a definition
            # whose name follows its body (``typedef struct {…} name;``) its signature,
            # must be read from the new tree.
            new_at = at + delta if is_after else at
            again = extract_defs(lang, source, root, new_at, new_at + 1)
            if len(again) != 1 or again[0].name != d.name:
                return None
            if again[0].signature != d.signature or again[0].kind != d.kind:
                same_shape = False
            defs.append(again[0])
        elif is_after:  # shifted, otherwise unchanged
            name, kind, at, line, col, start_b, end_b, start_l, end_l, sig = d
            defs.append(
                new_def(
                    Definition,
                    name,
                    kind,
                    at + delta,
                    line + line_delta,
                    col,
                    start_b + delta,
                    end_b + delta,
                    start_l + line_delta,
                    end_l + line_delta,
                    sig,
                )
            )
        else:
            defs.append(d)
    if not region_old:
        # Nothing old in the region: the new definitions go where the region is.
        split = sum(1 for d in defs if d.name_byte < start)
        defs[split:split] = new_defs
    if same_shape:
        same_shape = [(d.name, d.kind, d.signature) for d in region_old] == [
            (d.name, d.kind, d.signature) for d in new_defs
        ]

    old_pos = old.ref_pos
    n_refs = len(old.ref_names)
    first = _bisect_bytes(old_pos, n_refs, start)
    after = _bisect_bytes(old_pos, n_refs, old_end)
    names = old.ref_names[:first] + tuple(new_names) + old.ref_names[after:]
    pos = array("I", old_pos[: 3 * first])
    pos.extend(new_pos)
    tail = old_pos[3 * after :]
    if delta or line_delta:
        # Shift byte and line columns of the triples with C-level maps, not a Python loop.
        tail[0::3] = array("I", map(delta.__add__, tail[0::3]))
        tail[1::3] = array("I", map(line_delta.__add__, tail[1::3]))
    pos.extend(tail)
    spliced = FileSymbols(tuple(defs), names, pos)
    if same_shape and spliced.parents() == old.parents():
        spliced.inherit_shape(old)  # the outline is provably unchanged: no need to rebuild it
    if old._counts is not None:
        # Update the use counts from the region's change instead of recounting the file.
        counts = old._counts.copy()
        removed = old.ref_names[first:after]
        counts.subtract(removed)
        counts.update(new_names)
        for name in set(removed):
            if counts[name] <= 0:
                del counts[name]
        spliced._counts = counts
    return spliced


def _bisect_bytes(pos: Sequence[int], count: int, byte: int) -> int:
    """First reference index whose byte offset is >= ``byte``."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if pos[3 * mid] < byte:
            lo = mid + 1
        else:
            hi = mid
    return lo
