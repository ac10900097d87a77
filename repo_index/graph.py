"""The cross-file symbol graph: for every name, which files define it and which use it.

Kept incrementally: replacing one file's symbols touches only that file's names. The graph
counts changes so that the ranking can tell a reshuffle-worthy change from drift.
"""

from __future__ import annotations

from collections import Counter

from repo_index.symbols import FileSymbols


def _apply(
    table: dict[str, dict[str, int]], path: str, old: Counter[str], new: Counter[str]
) -> tuple[int, int]:
    """Move ``path``'s row in ``table`` from ``old`` to ``new`` counts: (the number of names
    whose count changed, entries added minus removed). Only changed names are touched: an
    edit changes few of a file's."""
    if dict.__eq__(old, new):  # C-level; Counter.__eq__ is a Python generator
        return 0, 0
    changed = entries = 0
    for name in old.keys() | new.keys():
        n = new.get(name, 0)
        was = old.get(name, 0)
        if was == n:
            continue
        changed += 1
        row = table.get(name)
        if n:
            entries += not was
            if row is None:
                table[name] = {path: n}
            else:
                row[path] = n
        elif row is not None:
            entries -= 1
            row.pop(path, None)
            if not row:
                del table[name]
    return changed, entries


def _fill(table: dict[str, dict[str, int]], path: str, counts: Counter[str]) -> None:
    for name, n in counts.items():
        row = table.get(name)
        if row is None:
            table[name] = {path: n}
        else:
            row[path] = n


_EMPTY: Counter[str] = Counter()


class SymbolGraph:
    def __init__(self) -> None:
        # name -> {path: count}; ``outline`` counts the definitions shown in outlines: those
        # are what other files can meaningfully refer to; ``nested`` those inside functions
        # (kept apart, not as a table of all definitions: that would repeat the outline's).
        self.nested: dict[str, dict[str, int]] = {}
        self.outline: dict[str, dict[str, int]] = {}
        self.used: dict[str, dict[str, int]] = {}
        self._files: dict[str, tuple[Counter[str], Counter[str], Counter[str]]] = {}
        self.version = 0  # bumps on any change
        self.file_set_version = 0  # bumps when a file appears or disappears
        self.churn = 0  # names whose definitions or reference counts changed, cumulative
        self._used_entries = 0  # (file, name) entries of ``used``: size() without a scan

    def __contains__(self, path: str) -> bool:
        return path in self._files

    def paths(self) -> list[str]:
        return sorted(self._files)

    def set_file(self, path: str, symbols: FileSymbols | None) -> bool:
        """Replace one file's contribution (None: a file without symbols). True if changed."""
        if symbols is None:
            new = (_EMPTY, _EMPTY, _EMPTY)
        else:
            nested, outline = symbols.name_counts()
            new = (nested, outline, symbols.ref_counts())
        old = self._files.get(path)
        if old is None:
            _fill(self.nested, path, new[0])
            _fill(self.outline, path, new[1])
            _fill(self.used, path, new[2])
            self._used_entries += len(new[2])
            self.file_set_version += 1
        else:
            _apply(self.nested, path, old[0], new[0])
            changed = _apply(self.outline, path, old[1], new[1])[0]
            used_changed, entries = _apply(self.used, path, old[2], new[2])
            changed += used_changed
            self._used_entries += entries
            if not changed and dict.__eq__(old[0], new[0]):
                return False
            self.churn += changed
        self._files[path] = new
        self.version += 1
        return True

    def remove_file(self, path: str) -> bool:
        old = self._files.pop(path, None)
        if old is None:
            return False
        _apply(self.nested, path, old[0], _EMPTY)
        _apply(self.outline, path, old[1], _EMPTY)
        self._used_entries += _apply(self.used, path, old[2], _EMPTY)[1]
        self.version += 1
        self.file_set_version += 1
        return True

    def definers(self, name: str) -> list[str]:
        """The files defining ``name`` (in their outline or inside a function), sorted."""
        return sorted(self.outline.get(name, {}).keys() | self.nested.get(name, {}).keys())

    def size(self) -> int:
        """Number of (file, name) reference entries: the scale churn is measured against.
        Kept as a count: ``RepoIndex`` asks after every edit that changed references."""
        return self._used_entries
