"""Section 13: big repositories (issue 32) — the repository index on synthetic workspaces of
N real Python files (``bigrepo_workspace``), at three sizes.

Per size, two child processes (``bigrepo_child``), so that one size's memory never counts
towards another's and each peak RSS is one process's own: **cold** — ``build()`` with an empty
cache dir, the first ``repo_map()``, signature and body edits (``update`` with the editor's
change event, then ``repo_map``), maps with a new focus file, ``save()``; **restart** — a new
``RepoIndex`` on that cache dir, ``build()``, the first map. No model is loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from contenox_bench import bigrepo_workspace
from contenox_bench.config import BenchConfig, BigRepoConfig
from contenox_bench.progress import Progress
from contenox_bench.stats import quantile, summary

#: The issue's goals, for a 20,000-file workspace (every size is shown against them).
GOAL_FILES = 20_000
GOAL_COLD_BUILD_S = 60.0
GOAL_RESTART_S = 5.0
GOAL_SIGNATURE_MAP_P95_MS = 100.0
GOAL_RSS_BYTES = 1024 * 2**20  # 1 GB, read as 1024 MiB

GOAL_TEXTS = {
    "cold_build": f"cold build() ≤ {GOAL_COLD_BUILD_S:.0f} s",
    "restart": f"restart from the persisted index (new RepoIndex + build()) ≤ "
               f"{GOAL_RESTART_S:.0f} s",
    "signature_map": f"repo map after a signature edit p95 ≤ {GOAL_SIGNATURE_MAP_P95_MS:.0f} ms",
    "rss": "peak RSS ≤ 1 GB (1,024 MiB)",
    "first_answer": "a first answer with the repo map (the server answers without it while "
                    "the index builds; measured only)",
}


def planned_units(cfg: BenchConfig) -> int:
    return 3 * len(cfg.bigrepo.sizes)


def run(cfg: BenchConfig, tmp: Path, progress: Progress) -> dict[str, Any]:
    bc = cfg.bigrepo
    source = Path(bc.source) if bc.source else bigrepo_workspace.default_source()
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for n in bc.sizes:
        work = tmp / f"bigrepo-{n}"
        try:
            rows.append(measure(n, bc, source, work, progress))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if rows[-1]["status"] != "ok":
            failed.append(f"{n} files: {rows[-1]['status']}")
    return {
        "status": "failed: " + "; ".join(failed) if failed else "ok",
        "source": str(source),
        "source_files": next((r["source_files"] for r in rows if "source_files" in r), None),
        "map_tokens": bc.map_tokens,
        "edits": bc.edits,
        "focus_changes": bc.focus_changes,
        "goal_files": GOAL_FILES,
        "goals": GOAL_TEXTS,
        "note": NOTE,
        "rows": rows,
    }


NOTE = ("Workspaces are real .py files copied from the source folder: whole top-level "
        "packages in a seeded order, the last one cut to fit; past the source's size the "
        "same sequence repeats under copy1/, copy2/, ... (copy0/ is the first pass), so the "
        "copies define the same names. Maps use the server's default budget with the default "
        "token estimate (about four characters per token) and no focus files, so an edit's "
        "map reuses the ranking (a new focus is a new ranking: focus_map_s). Edits are the "
        "editor's change event (update(path, text, [change])); after each series the buffers "
        "are closed (update(path) re-reads the disk). Goals are the issue's for 20,000 files; "
        "smaller sizes are shown against them for the trend. The server answers while the "
        "index builds, without repo map and code (contenox/explainContext index.state "
        "'building'); first_answer_s is when an answer can carry the map: cold build + first "
        "map; walk_s when the file list is known. The cold phase also builds the code-search "
        "index (one whole sync here; the server fills it after the map is ready, in slices "
        "between requests: index.codeSearch.pending), so its peak RSS is the server's index "
        "side. Wall-clock on this machine (see the load average).")


def measure(n: int, bc: BigRepoConfig, source: Path, work: Path,
            progress: Progress) -> dict[str, Any]:
    """One size: the workspace, the cold and the restart child; a row of the report."""
    progress.note(f"bigrepo {n}: copying files")
    ws = bigrepo_workspace.make(work / "ws", n, source, bc.seed)
    row: dict[str, Any] = {"files": ws.files, "bytes": ws.bytes, "copies": ws.copies,
                           "source_files": ws.source_files}
    progress.step(f"bigrepo {n}: cold build")
    cache = work / "cache"
    common = ["--root", str(ws.root), "--cache", str(cache), "--budget", str(bc.map_tokens)]
    cold = _child("cold", [*common, "--edits", str(bc.edits), "--focus-changes",
                           str(bc.focus_changes), "--seed", str(bc.seed)], work, bc)
    progress.step(f"bigrepo {n}: restart")
    restart = _child("restart", common, work, bc) if "error" not in cold else {}
    progress.step(f"bigrepo {n}: done")
    error = cold.get("error") or restart.get("error")
    if error:
        return row | {"status": f"failed: {error}"}
    return row | _figures(cold, restart)


def _child(phase: str, args: list[str], work: Path, bc: BigRepoConfig) -> dict[str, Any]:
    out = work / f"{phase}.json"
    log = work / f"{phase}.log"
    # The child imports the same sources as this process (a checkout not installed, too).
    here = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "contenox_bench.bigrepo_child", phase, *args, "--out", str(out)]
    try:
        with log.open("w", encoding="utf-8") as logf:
            proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL, timeout=bc.child_timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"{phase} phase ran past {bc.child_timeout_s:.0f} s"}
    try:
        result: dict[str, Any] = json.loads(out.read_text("utf-8"))
    except (OSError, ValueError):
        tail = log.read_text("utf-8", errors="replace")[-2000:]
        return {"error": f"{phase} phase exited {proc.returncode} without a result: {tail}"}
    return result


def _edit_figures(edits: list[dict[str, Any]]) -> dict[str, Any]:
    maps = [e["map_ms"] for e in edits]
    return {
        "n": len(edits),
        "map_ms": summary(maps, "ms"),
        "map_p50_ms": quantile(maps, 0.5),
        "map_p95_ms": quantile(maps, 0.95),
        "update_ms": summary([e["update_ms"] for e in edits], "ms"),
        "update_p95_ms": quantile([e["update_ms"] for e in edits], 0.95),
        "maps_changed": sum(1 for e in edits if e["map_changed"]),
        "index_changed": sum(1 for e in edits if e["index_changed"]),
    }


def _figures(cold: dict[str, Any], restart: dict[str, Any]) -> dict[str, Any]:
    peaks = [p for p in (cold.get("peak_rss_bytes"), restart.get("peak_rss_bytes")) if p]
    row: dict[str, Any] = {
        "status": "ok",
        "indexed_files": cold["build"]["files"],
        "parsed_files": cold["build"]["parsed"],
        "skipped_files": cold["build"]["skipped"],
        "definitions": cold["definitions"],
        "walk_s": cold["walk_s"],
        "cold_build_s": cold["cold_build_s"],
        "first_map_s": cold["first_map_s"],
        "first_answer_s": cold["cold_build_s"] + cold["first_map_s"],
        "first_map": cold["first_map"],
        "code_search_sync_s": cold.get("code_search_sync_s"),
        "rss_after_code_search_bytes": cold.get("rss_after_code_search_bytes"),
        "signature": _edit_figures(cold["signature"]),
        "body": _edit_figures(cold["body"]),
        "focus_map_s": summary(cold["focus_map_s"], "s"),
        "rankings": cold["rankings"],
        "save_s": cold["save_s"],
        "cache_bytes": cold["cache_bytes"],
        "restart_build_s": restart["restart_build_s"],
        "restart_first_map_s": restart["first_map_s"],
        "restart_reused_files": restart["build"]["reused"],
        "restart_parsed_files": restart["build"]["parsed"],
        # The map saved with the index comes back after a restart (hysteresis state kept).
        "restart_map_same": restart["first_map"]["digest"] == cold["settled_map"]["digest"],
        "peak_rss_bytes": max(peaks) if peaks else None,
        "cold_peak_rss_bytes": cold.get("peak_rss_bytes"),
        "restart_peak_rss_bytes": restart.get("peak_rss_bytes"),
        "workers_peak_rss_bytes": cold.get("workers_peak_rss_bytes"),
        "workers_peak_rss_sum_bytes": cold.get("workers_peak_rss_sum_bytes"),
    }
    row["goals"] = judge(row)
    return row


def judge(row: dict[str, Any]) -> dict[str, bool | None]:
    """Each goal's verdict on one row's figures (None: not measured)."""
    def at_most(value: float | None, bound: float) -> bool | None:
        return None if value is None else value <= bound

    return {
        "cold_build": at_most(row.get("cold_build_s"), GOAL_COLD_BUILD_S),
        "restart": at_most(row.get("restart_build_s"), GOAL_RESTART_S),
        "signature_map": at_most(row.get("signature", {}).get("map_p95_ms"),
                                 GOAL_SIGNATURE_MAP_P95_MS),
        "rss": at_most(row.get("peak_rss_bytes"), GOAL_RSS_BYTES),
    }


def goal_row(sec: dict[str, Any]) -> dict[str, Any] | None:
    """The row the goals are judged on: the largest size measured."""
    ok = [r for r in sec.get("rows", []) if r.get("status") == "ok"]
    return max(ok, key=lambda r: r["files"]) if ok else None


# ----------------------------------------------------------------- report.md


def _s(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _mib(x: int | None) -> str:
    return "–" if x is None else f"{x / 2**20:,.0f}"


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "–"}[met]


def markdown(sec: dict[str, Any]) -> list[str]:
    title = "## 13. Big repositories: the repository index at three sizes"
    rows = [r for r in sec.get("rows", []) if r.get("status") == "ok"]
    if not rows:
        return [title, "", f"Section {sec.get('status', 'not run')}.", ""]
    out = [title, ""]
    if sec["status"] != "ok":
        out += [f"Section {sec['status']}.", ""]
    out += [f"Source: {sec['source']} ({sec['source_files']:,} .py files). Map budget "
            f"{sec['map_tokens']} tokens; {sec['edits']} signature and {sec['edits']} body "
            f"edits per size. {sec['note']}", ""]
    head = ["figure", *[f"{r['files']:,} files ({r['bytes'] / 1e6:,.0f} MB"
                        + (f", {r['copies']} copies" if r["copies"] > 1 else "") + ")"
                        for r in rows], f"goal ({sec['goal_files']:,} files)"]

    def line(label: str, cell: Any, goal: str = "", key: str | None = None) -> list[str]:
        cells = []
        for r in rows:
            text = cell(r)
            if key is not None:
                text += f" ({_verdict(r['goals'][key])})"
            cells.append(text)
        return [label, *cells, goal]

    table = [
        line("indexed files (parsed / skipped)",
             lambda r: f"{r['indexed_files']:,} ({r['parsed_files']:,} / {r['skipped_files']})"),
        line("definitions", lambda r: f"{r['definitions']:,}"),
        line("cold build() s", lambda r: _s(r["cold_build_s"], 1),
             GOAL_TEXTS["cold_build"], "cold_build"),
        line("restart: new RepoIndex + build() s", lambda r: _s(r["restart_build_s"]),
             GOAL_TEXTS["restart"], "restart"),
        line("repo map after a signature edit, p50 / p95 ms",
             lambda r: f"{_s(r['signature']['map_p50_ms'], 1)} / "
                       f"{_s(r['signature']['map_p95_ms'], 1)}",
             GOAL_TEXTS["signature_map"], "signature_map"),
        line("peak RSS MiB (cold; restart)",
             lambda r: f"{_mib(r['peak_rss_bytes'])} ({_mib(r['cold_peak_rss_bytes'])}; "
                       f"{_mib(r['restart_peak_rss_bytes'])})", GOAL_TEXTS["rss"], "rss"),
        line("first answer with the repo map: cold build + first map s",
             lambda r: _s(r["first_answer_s"], 1), "measured only"),
        line("walk done (file list known) s", lambda r: _s(r["walk_s"])),
        line("code search index (server, segment J): first sync s; RSS after MiB",
             lambda r: f"{_s(r.get('code_search_sync_s'))}; "
                       f"{_mib(r.get('rss_after_code_search_bytes'))}"),
        line("first repo map s (cold; after restart)",
             lambda r: f"{_s(r['first_map_s'])}; {_s(r['restart_first_map_s'])}"),
        line("repo map after a body edit, p50 / p95 ms",
             lambda r: f"{_s(r['body']['map_p50_ms'], 1)} / {_s(r['body']['map_p95_ms'], 1)}"),
        line("update() signature; body, p95 ms",
             lambda r: f"{_s(r['signature']['update_p95_ms'], 1)}; "
                       f"{_s(r['body']['update_p95_ms'], 1)}"),
        line("maps changed by signature; body edits",
             lambda r: f"{r['signature']['maps_changed']}/{r['signature']['n']}; "
                       f"{r['body']['maps_changed']}/{r['body']['n']}"),
        line("repo map with a new focus file s (median)",
             lambda r: _s(r["focus_map_s"]["median"])),
        line("save() s; cache MiB", lambda r: f"{_s(r['save_s'])}; {_mib(r['cache_bytes'])}"),
        line("restart reused / parsed files; same map",
             lambda r: f"{r['restart_reused_files']:,} / {r['restart_parsed_files']}; "
                       f"{'yes' if r['restart_map_same'] else '**no**'}"),
        line("index workers' peak RSS MiB (each; together)",
             lambda r: f"{_mib(r['workers_peak_rss_bytes'])}; "
                       f"{_mib(r['workers_peak_rss_sum_bytes'])}"),
    ]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(cells) + " |" for cells in table]
    return [*out, ""]
