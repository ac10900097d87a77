"""Child process of the bigrepo section: one phase on one workspace, in a fresh interpreter so
that its peak memory (VmHWM, read at exit) is its own.

``python -m contenox_bench.bigrepo_child cold --root R --cache C --out r.json [...]``: a cold
``build()`` with an empty cache, the first repo map, the code-search index (``CodeFinder.sync``,
as the server builds it), signature and body edits (``update`` with the editor's change event,
then ``repo_map``), maps with a new focus file, ``save()``.

``python -m contenox_bench.bigrepo_child restart --root R --cache C --out r.json``: a new
``RepoIndex`` on the cache the cold phase saved, ``build()``, the first map.

Timings are wall-clock seconds or milliseconds of this process; logs go to stderr; the result
goes to ``--out`` (with ``error`` set and exit status 1 when the phase fails).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from contenox_bench.backends_child import finish_child, proc_status_bytes
from contenox_bench.bigrepo_edits import Edit

log = logging.getLogger("contenox.bench.bigrepo")


def _children() -> list[str]:
    """Pids of this process's children (Linux ``/proc``; empty elsewhere)."""
    out: list[str] = []
    try:
        for task in Path("/proc/self/task").iterdir():
            out += (task / "children").read_text().split()
    except OSError:
        return []
    return out


class WorkerPeak:
    """Samples the RSS of the index's worker processes while a cold build runs (their memory
    is not this process's VmHWM)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.peak_each = 0  # largest single worker
        self.peak_sum = 0  # largest sum over the workers alive at one sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-rss", daemon=True)

    def __enter__(self) -> WorkerPeak:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            sizes = [proc_status_bytes("VmRSS", pid) or 0 for pid in _children()]
            self.peak_each = max([self.peak_each, *sizes])
            self.peak_sum = max(self.peak_sum, sum(sizes))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _cache_bytes(cache: str) -> int:
    return sum(p.stat().st_size for p in Path(cache).iterdir() if p.is_file())


def _map_info(m: Any) -> dict[str, Any]:
    return {"tokens": m.tokens, "files": len(m.files), "digest": m.digest}


def cold(args: argparse.Namespace, result: dict[str, Any]) -> None:
    from contenox_bench import bigrepo_edits
    from contenox_lsp.turn import read_disk_text
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def on_progress(done: int, total: int, message: str) -> None:
        if total and "walk_s" not in marks:  # the walk is over: the file list is known
            marks["walk_s"] = time.perf_counter() - t0

    idx = RepoIndex([args.root], on_progress, cache_dir=args.cache)
    with WorkerPeak() as workers:
        report, result["cold_build_s"] = _timed(idx.build)
    result["walk_s"] = marks.get("walk_s")
    result["workers_peak_rss_bytes"] = workers.peak_each or None
    result["workers_peak_rss_sum_bytes"] = workers.peak_sum or None
    result["build"] = {"files": report.files, "parsed": report.parsed, "reused": report.reused,
                       "skipped": report.skipped}
    first, result["first_map_s"] = _timed(lambda: idx.repo_map(args.budget))
    result["first_map"] = _map_info(first)
    result["rss_after_first_map_bytes"] = proc_status_bytes("VmRSS")
    # The server also indexes the code for search (segment J, the completion's similar code),
    # in slices once the map is ready: its time and memory are the server's too.
    finder = CodeFinder(idx, read_disk_text)
    _, result["code_search_sync_s"] = _timed(finder.sync)
    result["rss_after_code_search_bytes"] = proc_status_bytes("VmRSS")
    files = idx.files()
    result["definitions"] = sum(len(idx.raw_definitions(p)) for p in files)

    # A quarter of the signature edits hit functions the map shows (it must change), the
    # rest files picked at random (most never show).
    shown = bigrepo_edits.shown_functions(first.text, args.root)
    sig = bigrepo_edits.pick(
        files, args.edits, args.seed,
        lambda path, text: bigrepo_edits.signature_edit(path, text, shown.get(path, ())),
        first=random.Random(args.seed).sample(sorted(shown), min(len(shown), args.edits // 4)))
    body = bigrepo_edits.pick(files, args.edits, args.seed + 1, bigrepo_edits.body_edit,
                              exclude={e.path for e in sig})
    settled = first
    for name, edits in (("signature", sig), ("body", body)):
        result[name] = list(_edits(idx, edits, args.budget, settled.digest))
        for e in edits:  # the buffer closed without saving: back to the disk's text
            idx.update(e.path)
        settled = idx.repo_map(args.budget)  # the next series starts from a current map

    focus = [p for p in files if p.endswith(".py")][:: max(1, len(files) // 7)][1:]
    result["focus_map_s"] = [_focus_map_s(idx, p, args.budget)
                             for p in focus[: args.focus_changes]]
    # What a restart must show again: the map saved with the index (its hysteresis state).
    result["settled_map"] = _map_info(idx.repo_map(args.budget))
    _, result["save_s"] = _timed(idx.save)
    result["cache_bytes"] = _cache_bytes(args.cache)
    result["rankings"] = idx.stats.rankings


def _focus_map_s(idx: Any, path: str, budget: int) -> float:
    """A map focused on another file (the editor opened it): a ranking of its own."""
    return float(_timed(lambda: idx.repo_map(budget, focus_files=[path]))[1])


def _edits(idx: Any, edits: list[Edit], budget: int, digest: str) -> Iterator[dict[str, Any]]:
    """Each edit, then the map; ``map_changed``: it differs from the map before the edit."""
    for e in edits:
        t0 = time.perf_counter()
        changed = idx.update(e.path, e.text, [e.change])
        update_s = time.perf_counter() - t0
        m, map_s = _timed(lambda: idx.repo_map(budget))
        yield {"path": e.path, "function": e.function, "update_ms": update_s * 1000,
               "map_ms": map_s * 1000, "index_changed": changed,
               "map_changed": m.digest != digest}
        digest = m.digest


def restart(args: argparse.Namespace, result: dict[str, Any]) -> None:
    from repo_index import RepoIndex

    t0 = time.perf_counter()
    idx = RepoIndex([args.root], cache_dir=args.cache)
    report = idx.build()
    result["restart_build_s"] = time.perf_counter() - t0
    result["build"] = {"files": report.files, "parsed": report.parsed, "reused": report.reused,
                       "skipped": report.skipped, "cache_loaded": report.cache_loaded}
    first, result["first_map_s"] = _timed(lambda: idx.repo_map(args.budget))
    result["first_map"] = _map_info(first)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="contenox_bench.bigrepo_child")
    ap.add_argument("phase", choices=("cold", "restart"))
    ap.add_argument("--root", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--focus-changes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    result: dict[str, Any] = {"phase": args.phase, "pid": os.getpid()}
    phase = cold if args.phase == "cold" else restart
    return finish_child(lambda: phase(args, result), result, args.out,
                        (log, "bigrepo child failed"), "peak_rss_bytes")


if __name__ == "__main__":
    raise SystemExit(main())
