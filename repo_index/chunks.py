"""Definition-sized chunks of a file: what the code segment shows and what lexical search ranks.

A chunk is one function or method that is not nested in another function (nested helpers stay
part of their parent's chunk), or the *outline* of a class: its own lines with the bodies of
its methods left out (each method keeps its ``def`` line), so class attributes, decorators and
nested constants are shown without repeating the methods. Lines are 0-based and inclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repo_index.symbols import FUNCTION_KINDS, Definition, compute_parents

CLASS_KINDS = frozenset({"class", "interface", "struct", "trait", "impl"})


@dataclass(frozen=True)
class Chunk:
    """One definition-sized chunk of a file."""

    name: str
    qualname: str  # ``Class.method`` for methods, the name otherwise
    kind: str  # "function" or "class"
    def_line: int  # the line with the definition's name (``def NAME``/``class NAME``)
    start_line: int  # first line shown (decorators included)
    end_line: int
    skip: tuple[tuple[int, int], ...] = ()  # method bodies left out of a class outline

    def lines(self, text_lines: Sequence[str]) -> list[tuple[int, str]]:
        """``(line number, text)`` of every line shown, in order."""
        out = []
        last = min(self.end_line, len(text_lines) - 1)
        skip = iter(self.skip)
        gap = next(skip, None)
        i = self.start_line
        while i <= last:
            if gap is not None and gap[0] <= i:
                i = gap[1] + 1
                gap = next(skip, None)
                continue
            out.append((i, text_lines[i]))
            i += 1
        return out


def chunks_of(defs: Sequence[Definition]) -> list[Chunk]:
    """The chunks of a file from its definitions (``RepoIndex.raw_definitions``), in source
    order. Definitions inside a function belong to that function's chunk."""
    defs = tuple(defs)
    parents = compute_parents(defs)
    inside_function = [False] * len(defs)
    order = sorted(range(len(defs)), key=lambda i: (defs[i].start_byte, -defs[i].end_byte))
    for i in order:  # parents come before children in extent order
        p = parents[i]
        inside_function[i] = p >= 0 and (defs[p].kind in FUNCTION_KINDS or inside_function[p])
    chunks: list[Chunk] = []
    for i in order:
        d = defs[i]
        if inside_function[i]:
            continue
        p = parents[i]
        container = defs[p].name if p >= 0 else ""
        qualname = f"{container}.{d.name}" if container else d.name
        start = min(d.start_line, d.line)
        if d.kind in FUNCTION_KINDS:
            chunks.append(Chunk(d.name, qualname, "function", d.line, start, d.end_line))
        elif d.kind in CLASS_KINDS:
            methods = sorted(
                (defs[j].line + 1, defs[j].end_line)
                for j in range(len(defs))
                if parents[j] == i
                and defs[j].kind in FUNCTION_KINDS
                and defs[j].end_line > defs[j].line
            )
            chunks.append(
                Chunk(d.name, qualname, "class", d.line, start, d.end_line, tuple(methods))
            )
    return chunks


def enclosing(chunks: Sequence[Chunk], line: int) -> Chunk | None:
    """The innermost function chunk containing 0-based ``line`` (a class outline otherwise)."""
    best: Chunk | None = None
    for c in chunks:
        if c.start_line <= line <= c.end_line and (
            best is None
            or (c.kind == "function" and best.kind != "function")
            or (c.kind == best.kind and c.start_line >= best.start_line)
        ):
            best = c
    return best
