"""Edit coalescing on the context thread (``contenox_lsp.runtime.context.ContextService``), on
the real repo index: however a burst of incremental edits, disk events and removals interleaves,
folding changes that wait for the thread ends in the index state that indexing the final
text afresh gives. Hypothesis, seeded and bounded."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.runtime import context as ctx
from contenox_lsp.runtime.context import ContextService
from repo_index import RepoIndex

BASE = "".join(f"def f{i}(x):\n    return g{i}(x)\n\n" for i in range(30))

edit = st.tuples(st.integers(0, 200), st.integers(0, 12),
                 st.sampled_from(["", "x", "def h(y):\n    return y\n", "class C:\n    pass\n",
                                  "\n", "ü€", "(", "g1(z)"]))
op = st.one_of(edit.map(lambda e: ("edit", e)), st.just(("disk", None)),
               st.just(("remove", None)))


def symbols(index: RepoIndex, path: Path) -> list[tuple[Any, ...]]:
    return sorted((s.name, s.kind, s.line) for s in index.file_symbols(str(path)))


def apply(text: str, line: int, col: int, new: str) -> tuple[str, dict[str, Any]]:
    lines = text.split("\n")
    line = min(line, len(lines) - 1)
    col = min(col, len(lines[line]))
    offset = sum(len(ln) + 1 for ln in lines[:line]) + col
    change = {"range": {"start": {"line": line, "character": col},
                        "end": {"line": line, "character": col}}, "text": new}
    return text[:offset] + new + text[offset:], change


@settings(max_examples=40, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=60), quiet=st.booleans())
def test_folded_changes_index_like_the_final_text(ops: list[tuple[str, Any]],
                                                  quiet: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = root / "m.py"
        path.write_text(BASE, encoding="utf-8")
        os.environ["CONTENOX_CACHE_DIR"] = str(root / ".cache")
        old_quiet = ctx.FOLD_QUIET_S
        ctx.FOLD_QUIET_S = 0.0 if quiet else old_quiet  # no folding vs. folding
        try:
            final = asyncio.run(run_ops(root, path, ops))
        finally:
            ctx.FOLD_QUIET_S = old_quiet
        service_symbols, expected_text = final
        fresh = RepoIndex([root], cache_dir=root / ".fresh")
        fresh.build()
        if expected_text is None:
            assert service_symbols is None
        else:
            fresh.update(str(path), expected_text)
            assert service_symbols == symbols(fresh, path)


async def run_ops(root: Path, path: Path,
                  ops: list[tuple[str, Any]]) -> tuple[list[tuple[Any, ...]] | None, str | None]:
    service = ContextService([root], ContextBudget(map_cap=256))
    await service.build_index()
    text: str | None = BASE  # the buffer; None once closed (the index then reads the disk)
    try:
        for kind, arg in ops:
            if kind == "edit":
                text, change = apply(text if text is not None else BASE, *arg)
                service.update(path, text, [change], "utf-16")
            elif kind == "disk":
                service.update_from_disk(path)  # the buffer was closed: the disk text counts
                text = None
            else:
                service.remove(path)
                text = None
        final_text = text if text is not None else BASE
        if ops[-1][0] == "remove":
            indexed = await service.call(lambda s: s.index.is_indexed(str(path)))
            assert not indexed
            return None, None
        got = await service.call(lambda s: symbols(s.index, path))
        return got, final_text
    finally:
        service.close()
