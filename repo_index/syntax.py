"""Grammar-independent facts about syntax trees shared by extraction and incremental update."""

from __future__ import annotations

import tree_sitter as ts

# Nodes that hold a sequence of independent units (statements, members, top-level items):
# tags patterns never look across their children, which is what makes re-extracting one
# unit after an edit safe.
CONTAINERS = frozenset(
    {
        "module",
        "program",
        "source_file",
        "translation_unit",
        "compound_statement",
        "declaration_list",
        "field_declaration_list",
    }
)
_CONTAINER_SUFFIXES = ("block", "body")


def is_container(node: ts.Node) -> bool:
    kind = node.type
    return kind in CONTAINERS or kind.endswith(_CONTAINER_SUFFIXES)


def header_anchor(owner: ts.Node) -> ts.Node:
    """The outermost node around ``owner`` that starts on the same line and stays inside the
    same unit (``export``, ``const``, ``typedef`` around a definition). A definition's
    signature starts there: never at text outside its own unit, such as a comment before it
    on the same line."""
    row = owner.start_point[0]
    anchor = owner
    parent = anchor.parent
    while parent is not None and not is_container(parent) and parent.start_point[0] == row:
        anchor = parent
        parent = anchor.parent
    return anchor
