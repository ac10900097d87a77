"""A model's rewrite of a region → one minimal replacement, or nothing worth showing."""

from __future__ import annotations

from dataclasses import dataclass

from contenox_lsp.next_edit.history import common_ends
from contenox_lsp.next_edit.layout import CURSOR, ZETA_CURSOR


@dataclass(frozen=True)
class Replacement:
    """Replace ``start``..``end`` (``(line, column)``, str indices) with ``text``."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def rewritten_region(raw: str, end_texts: tuple[str, ...], n_lines: int,
                     begin_text: str = "", cut_short: bool = False) -> str | None:
    """The region text a model wrote (``raw``, from after ``begin_text`` when it wrote that),
    cut at the first end text. ``cut_short``: the token or time budget ended the decoding, not
    the model: without an end text the rewrite is then the region's line count of it, or None
    when it did not get that far (unfinished)."""
    if begin_text and begin_text in raw:
        raw = raw[raw.index(begin_text) + len(begin_text):].removeprefix("\n")
    cut = min((i for i in (raw.find(t) for t in end_texts) if i >= 0), default=-1)
    if cut >= 0:
        text = raw[:cut]
    elif cut_short:
        if raw.count("\n") < n_lines:
            return None
        text = "\n".join(raw.split("\n")[:n_lines])  # it ran on past the region
    else:
        text = raw  # the model ended the text (end of generation)
    return text.replace(CURSOR, "").replace(ZETA_CURSOR, "").rstrip("\n")


#: Complete lines of the rewrite that must match the region again, after a change, before
#: decoding stops early (and what they say must be more than brackets and blanks).
REJOIN_LINES = 2
REJOIN_MIN_CHARS = 8


def rejoined(region: tuple[str, ...], written: str) -> str | None:
    """The whole rewrite when the text written so far has changed the region and then re-joined
    it for ``REJOIN_LINES`` complete lines (the rest of the region is taken as unchanged, so
    decoding can stop); None while that is not so. Cursor markers are ignored."""
    full = written.replace(CURSOR, "").replace(ZETA_CURSOR, "").split("\n")[:-1]
    if len(full) < REJOIN_LINES:
        return None
    first = next((i for i, line in enumerate(full) if i >= len(region) or line != region[i]),
                 None)
    if first is None or len(full) - REJOIN_LINES < first:
        return None  # nothing changed yet, or the run overlaps the change
    tail = full[-REJOIN_LINES:]
    if len("".join(tail).strip()) < REJOIN_MIN_CHARS:
        return None
    for j in range(first + 1, len(region) - REJOIN_LINES + 1):
        if list(region[j:j + REJOIN_LINES]) == tail:
            return "\n".join([*full, *region[j + REJOIN_LINES:]])
    return None


def following_lines(lines: list[str], end: int, limit: int = 8) -> tuple[str, ...]:
    """The document's lines from ``end`` (the region's end) through the ``REJOIN_LINES``-th
    non-blank one (at most ``limit`` lines): what a model that runs on past the region writes
    next."""
    out: list[str] = []
    seen = 0
    for line in lines[end:end + limit]:
        out.append(line)
        seen += bool(line.strip())
        if seen == REJOIN_LINES:
            return tuple(out)
    return ()


def ran_past(written: str, after: tuple[str, ...]) -> str | None:
    """The rewrite when the text written so far has run on past the region — its last
    complete lines are ``after`` (``following_lines``: a model copying the file does not stop
    at the region's end) — else None."""
    if not after or len("".join(after).strip()) < REJOIN_MIN_CHARS:
        return None
    full = written.replace(CURSOR, "").replace(ZETA_CURSOR, "").split("\n")[:-1]
    if len(full) < len(after) or tuple(full[-len(after):]) != after:
        return None
    return "\n".join(full[:-len(after)])


def minimal_replacement(start_line: int, lines: tuple[str, ...], new: str) -> Replacement | None:
    """The smallest replacement that turns the region (``lines`` from ``start_line``) into
    ``new``; None when nothing changes or only whitespace does."""
    old = "\n".join(lines)
    if old == new:
        return None
    p, q = common_ends(old, new)
    removed, inserted = old[p:len(old) - q], new[p:len(new) - q]
    if not removed.strip() and not inserted.strip():
        return None  # whitespace only
    return Replacement(_position(old, p, start_line), _position(old, len(old) - q, start_line),
                       inserted)


def apply(text: str, rep: Replacement) -> str:
    """``text`` with ``rep`` applied (positions in str indices)."""
    lines = text.split("\n")

    def offset(pos: tuple[int, int]) -> int:
        return sum(len(line) + 1 for line in lines[:pos[0]]) + pos[1]

    return text[:offset(rep.start)] + rep.text + text[offset(rep.end):]


def _position(text: str, index: int, start_line: int) -> tuple[int, int]:
    before = text[:index]
    return start_line + before.count("\n"), index - (before.rfind("\n") + 1)
