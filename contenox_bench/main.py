"""``contenox-lsp bench``: run every section and write report.json, report.md and plots."""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

log = logging.getLogger("contenox.bench")

EXIT_OK, EXIT_FAILED, EXIT_MISSING_DEPENDENCY, EXIT_INTERRUPTED = 0, 1, 2, 130
SECTIONS = ("runtime", "curve", "trace", "scaling", "backends", "drift", "typing", "restart",
            "remote", "schedule", "next_edit", "fleet", "bigrepo")
NOT_SELECTED = "skipped: not selected (--sections)"


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


_STOP = threading.Event()


def _section(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one section; a failure is recorded in the report and the others still run."""
    try:
        return fn()
    except Exception as exc:
        if _STOP.is_set():
            # SIGTERM landed inside a native callback (llama.cpp's abort hook): the error it
            # caused is the interruption, not a failure of the section.
            raise KeyboardInterrupt from exc
        log.exception("bench section %s failed", name)
        return {"status": f"failed: {type(exc).__name__}: {exc}"}


def selected_sections(spec: str | None) -> tuple[str, ...]:
    """The sections ``--sections a,b`` names (all when None); an unknown name is an error."""
    from contenox_lsp.errors import InputError

    if spec is None:
        return SECTIONS
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise InputError(f"--sections takes names from {', '.join(SECTIONS)}",
                         sections=spec)
    return tuple(n for n in SECTIONS if n in names)


def _sizes(spec: str | None) -> tuple[int, ...] | None:
    from contenox_lsp.errors import InputError

    if spec is None:
        return None
    try:
        sizes = tuple(int(x) for x in spec.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(n <= 0 for n in sizes):
        raise InputError("--bigrepo-sizes must be positive integers, comma-separated",
                         sizes=spec)
    return sizes


def run_bench(args: argparse.Namespace) -> int:
    chosen = selected_sections(getattr(args, "sections", None))
    bigrepo_sizes = _sizes(getattr(args, "bigrepo_sizes", None))
    if not _have_matplotlib():
        print("contenox-lsp bench: matplotlib is required for the plots; install it with "
              "`pip install 'contenox-lsp[bench]'` (or `pip install matplotlib`)",
              file=sys.stderr)
        return EXIT_MISSING_DEPENDENCY

    from contenox_bench import (
        applicable,
        backends,
        bigrepo,
        curve,
        drift,
        fleet_bench,
        goals,
        next_edit_trace,
        plots,
        remote_bench,
        report,
        restart,
        runtime,
        scaling,
        schedule,
        trace,
        typing_trace,
    )
    from contenox_bench.bare import BareModel
    from contenox_bench.config import for_mode
    from contenox_bench.corpus import Corpus
    from contenox_bench.profile_file import bench_profile, write_toml
    from contenox_bench.progress import Progress
    from engine import open_session
    from engine.model_files import resolve_model_path

    if getattr(args, "log_level", "warning") in (None, "warning"):
        # Known llama.cpp notices (one "full-size SWA cache" per context of system c) would
        # bury the progress bar; --log-level info/debug shows them again.
        logging.getLogger("contenox.llama_cpp").setLevel(logging.ERROR)
    cfg = for_mode(bool(getattr(args, "quick", False)), bool(getattr(args, "full", False)))
    if bigrepo_sizes is not None:
        cfg = replace(cfg, bigrepo=replace(cfg.bigrepo, sizes=bigrepo_sizes))
    profile, overrides = bench_profile(getattr(args, "profile", None),
                                       getattr(args, "model", None), cfg.n_ctx)
    out = Path(getattr(args, "out", None) or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load0 = _loadavg()
    planned = {"runtime": runtime, "curve": curve, "trace": trace, "scaling": scaling,
               "backends": backends, "drift": drift, "typing": typing_trace,
               "restart": restart, "remote": remote_bench, "schedule": schedule,
               "next_edit": next_edit_trace, "fleet": fleet_bench, "bigrepo": bigrepo}
    progress = Progress(sum(planned[n].planned_units(cfg) for n in chosen))
    sections: dict[str, dict[str, Any]] = {}
    facts: dict[str, Any] = {"model": "?", "backend": profile.backend}

    def write(missing: str, final: bool) -> dict[str, Any]:
        # Written after every section too, so an interrupted run keeps what it measured.
        done = {n: sections.get(n, {"status": f"not run: {missing}"}) for n in SECTIONS}
        result: dict[str, Any] = {
            "schema_version": report.SCHEMA_VERSION,
            "tool": "contenox-lsp bench",
            "mode": cfg.mode,
            "started_at": started,
            "duration_s": time.perf_counter() - t0,
            "machine": {
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "loadavg_start": load0,
                "loadavg_end": _loadavg(),
            },
            # "backend": the backend of the sessions this run measured (sections 1-4).
            "profile": profile.to_dict() | {"backend": facts["backend"],
                                            "model": facts["model"],
                                            "bench_overrides": overrides},
            "config": cfg.to_dict(),
            "sections": done,
            "goals": goals.evaluate(done),
            "plots": _plots(plots, done, out) if final else {},
        }
        report.write_json(result, out / "report.json")
        (out / "report.md").write_text(report.markdown(result), encoding="utf-8")
        return result

    def run_section(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if name not in chosen:
            sections[name] = {"status": NOT_SELECTED}
            return
        sections[name] = _section(name, fn)
        write("pending (the run is still going, or stopped before this section)", final=False)

    def wanted(*names: str) -> bool:
        # A model session is loaded only for sections that run in it.
        return any(n in chosen for n in names)

    def skip(*names: str) -> None:
        sections.update((n, {"status": NOT_SELECTED}) for n in names)

    # SIGTERM (a CI timeout, kill) ends the run like Ctrl-C: the partial report is written.
    _STOP.clear()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        with tempfile.TemporaryDirectory(prefix="contenox-bench-") as tmp_name:
            tmp = Path(tmp_name)
            if wanted("runtime", "curve"):
                progress.note("loading the model")
                with open_session(profile) as session:
                    facts["backend"] = applicable.backend_of(session)
                    facts["model"] = str(getattr(session, "model_description", profile.model))
                    corpus = Corpus(session)
                    # The engine-vs-bare-loop pairs compare with llama.cpp: loaded only where
                    # they apply (elsewhere the runtime section records why not).
                    bare_model = (BareModel(str(resolve_model_path(profile)), profile)
                                  if wanted("runtime") and applicable.bare_loop(session) is None
                                  else None)
                    try:
                        run_section("runtime", lambda: runtime.run(
                            session, bare_model, corpus, cfg, tmp, progress))
                    finally:
                        if bare_model is not None:
                            bare_model.close()
                    step_ms = _decode_step_ms(sections["runtime"])
                    run_section("curve", lambda: curve.run(session, corpus, cfg, step_ms,
                                                           progress))
            else:
                skip("runtime", "curve")
            # The servers of the trace load their own model: this session is closed meanwhile.
            profile_file = write_toml(profile, tmp / "bench-profile.toml")
            run_section("trace", lambda: trace.run(
                cfg, profile, profile_file, getattr(args, "workspace", None), out, tmp,
                progress))
            if wanted("scaling", "remote"):
                with open_session(profile) as session:
                    corpus = Corpus(session)
                    run_section("scaling", lambda: scaling.run(session, corpus, cfg, tmp,
                                                               progress))
                    # The same session next to a llama-server on the same prompts (issue 18).
                    run_section("remote", lambda: remote_bench.run(session, corpus, cfg, tmp,
                                                                   progress))
            else:
                skip("scaling", "remote")
            # Each backend loads the model in a child process of its own (peak memory).
            run_section("backends", lambda: backends.run(
                profile, cfg, getattr(args, "openvino_model_dir", None), out, tmp, progress))
            run_section("drift", lambda: drift.run(profile, cfg, progress))
            run_section("schedule", lambda: schedule.run(profile, cfg, progress))
            run_section("typing", lambda: typing_trace.run(
                cfg, profile, profile_file, out, tmp, progress))
            run_section("restart", lambda: restart.run(
                cfg, profile, profile_file, out, tmp, progress))
            run_section("next_edit", lambda: next_edit_trace.run(
                cfg, profile, profile_file, out, tmp, progress))
            run_section("fleet", lambda: fleet_bench.run(cfg, profile, tmp, progress))
            # No model: the repository index alone, in child processes (issue 32).
            run_section("bigrepo", lambda: bigrepo.run(cfg, tmp, progress))
    except KeyboardInterrupt:
        write("interrupted", final=True)
        print(f"contenox-lsp bench: interrupted; partial report in {out / 'report.md'}",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    progress.close()
    result = write("skipped", final=True)

    failed = [n for n in SECTIONS if str(sections[n].get("status", "")).startswith("failed")]
    met = sum(1 for g in result["goals"] if g["met"])
    not_evaluated = sum(1 for g in result["goals"] if g.get("status") == "not evaluated")
    ok = sum(1 for n in SECTIONS if sections[n].get("status") == "ok")
    skipped = sum(1 for n in SECTIONS if str(sections[n].get("status", "")).startswith("skipped"))
    print(f"contenox-lsp bench ({cfg.mode}, backend {facts['backend']}): "
          f"{ok}/{len(SECTIONS)} sections ok"
          + (f" ({skipped} skipped)" if skipped else "")
          + f", {met}/{len(result['goals'])} goals met"
          + (f" ({not_evaluated} not evaluated)" if not_evaluated else "")
          + f"; report in {out / 'report.md'}")
    return EXIT_FAILED if failed else EXIT_OK


def _interrupt(_signum: int, _frame: Any) -> None:
    _STOP.set()
    raise KeyboardInterrupt


def _decode_step_ms(runtime_section: dict[str, Any]) -> float | None:
    for row in runtime_section.get("rows", []):
        if row["name"] == "decode" and row.get("step_ms", {}).get("n"):
            return float(row["step_ms"]["median"])
    return None


def _plots(plots: Any, sections: dict[str, dict[str, Any]], out: Path) -> dict[str, str]:
    made: dict[str, str] = {}
    for name, fn in (("curve", plots.curve), ("trace", plots.trace),
                     ("scaling", plots.scaling)):
        if sections[name].get("status") != "ok":
            continue
        try:
            fn(sections[name], out / f"{name}.png")
            made[name] = f"{name}.png"
        except Exception:
            log.exception("plot %s failed", name)
    return made
