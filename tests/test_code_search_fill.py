"""The code-search fill after a build (``contenox_lsp.runtime.context``): on the real repo
index and lexical index, the server's code search is filled in slices on the context thread,
a request that arrives meanwhile runs between two slices and searches what is indexed so far
(edited files first), and the fill ends with the index a full sync gives."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contenox_lsp.context_budget import ContextBudget
from contenox_lsp.runtime import context as ctx
from contenox_lsp.runtime.context import ContextService, ContextView
from contenox_lsp.turn import read_disk_text
from repo_index import RepoIndex
from repo_index.code_search import CodeFinder, texts_reader

FILES = 8


def _module(i: int, word: str = "") -> str:
    return f"def handler_{i}(request):\n    return respond_{i}(request{word})\n"


def _search(view: ContextView, question: str,
            buffers: dict[str, str]) -> tuple[int, int, list[str]]:
    finder = view.finder
    assert finder is not None
    finder.read_text = texts_reader(buffers, read_disk_text)  # as the server's requests do
    hits = finder.search(question, limit=FILES)
    return finder.indexed_files, finder.pending, [Path(h.path).name for h in hits]


async def _call(service: ContextService, fn: Callable[[ContextView], Any]) -> Any:
    return await asyncio.wait_for(service.call(fn), 60)


def test_a_request_during_the_fill_searches_what_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(FILES):
        (root / f"m{i}.py").write_text(_module(i), "utf-8")
    monkeypatch.setenv("CONTENOX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ctx, "SYNC_SLICE_FILES", 1)
    monkeypatch.setattr(ctx, "SEARCH_SYNC_FILES", 1)
    # Slices 1 and 3 wait until the test has queued what must run behind them.
    hold = {1: threading.Event(), 3: threading.Event()}
    held = {k: threading.Event() for k in hold}
    slices = [0]
    slice_of = ctx.ContextService._code_sync_slice

    def slice_held(self: ContextService, finder: CodeFinder) -> None:
        slices[0] += 1
        if slices[0] in hold:
            held[slices[0]].set()
            assert hold[slices[0]].wait(60)
        slice_of(self, finder)

    monkeypatch.setattr(ctx.ContextService, "_code_sync_slice", slice_held)

    async def run() -> None:
        service = ContextService([root], ContextBudget())
        try:
            await service.build_index()
            assert await asyncio.to_thread(held[1].wait, 60)
            # An edit while the first slice runs: the search below takes it first, from the
            # buffer (the fill leaves files the index has from a buffer to searches).
            last = root / f"m{FILES - 1}.py"
            buffers = {str(last): _module(FILES - 1, ", zebra_stripe")}
            service.update(last, buffers[str(last)], None)
            asked = asyncio.ensure_future(
                _call(service, lambda v: _search(v, "zebra stripe", buffers)))
            await asyncio.sleep(0.3)  # the edit and the request queue behind the slice
            hold[1].set()
            indexed, pending, hits = await asked
            # One file from the slice, one (the edited buffer: new to the code search) from
            # the search's own sync; the rest waits.
            assert (indexed, pending) == (2, FILES - 2)
            assert hits == [last.name]
            # Another buffer, of a file the fill has not reached: the fill leaves it (it reads
            # the disk), the next search takes it from the buffer.
            assert await asyncio.to_thread(held[3].wait, 60)
            other = root / f"m{FILES - 2}.py"
            buffers[str(other)] = _module(FILES - 2, ", yak_fur")
            service.update(other, buffers[str(other)], None)
            await asyncio.sleep(0.3)
            hold[3].set()
            while (await _call(service, lambda v: v.finder.pending)) > 0:  # type: ignore[union-attr]
                await asyncio.sleep(0.05)
            assert service.code_search_view() == {"files": FILES - 1, "pending": 0}
            assert (await _call(service, lambda v: _search(v, "yak fur", buffers)))[::2] == (
                FILES, [other.name])
            # What the fill left is what a full sync of the same files gives.
            got = await _call(service, lambda v: _search(v, "handler request respond", buffers))
            for path, text in buffers.items():
                Path(path).write_text(text, "utf-8")
            index = RepoIndex([root], cache_dir=tmp_path / "fresh")
            index.build()
            full = CodeFinder(index, read_disk_text)
            full.sync()
            assert got[2] == [Path(h.path).name
                              for h in full.search("handler request respond", limit=FILES)]
        finally:
            service.close()

    asyncio.run(run())
