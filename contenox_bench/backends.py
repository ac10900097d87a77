"""Section 5: the backends — llama.cpp and OpenVINO GenAI on the same model and prompts.

Same model (the profile's GGUF on llama.cpp, its int8 OpenVINO IR conversion on OpenVINO),
``cache.block_size = 32`` on both (OpenVINO's prefix cache shares whole 32-token blocks), and
the same assembled segments: the parent sizes one plan (``backends_plan``) with the llama.cpp
tokenizer, each backend runs it in a child process of its own (``backends_child``), and the
assembler's token ids are compared across the two. Rows: cold prefill tokens/s at each size,
warm changed-suffix TTFT next to the cold TTFT of the same prompt (a fresh nonce), decode
tokens/s, and each child's peak RSS; every row carries the OpenVINO / llama.cpp ratio.

Without ``openvino_genai`` or a converted model the section is ``skipped: <reason and fix>``;
a backend that fails is recorded (``backends.<name>.status``), the other still runs.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from contenox_bench.backends_child import PROGRESS, proc_status_bytes
from contenox_bench.backends_plan import (
    SizePlan,
    Step,
    build_inputs,
    fit,
    n_steps,
    schedule,
    warmup,
)
from contenox_bench.config import BenchConfig
from contenox_bench.progress import Progress
from contenox_bench.stats import first_mismatch, median, ratio, summary

log = logging.getLogger("contenox.bench")

BLOCK_SIZE = 32
BACKENDS = (("llama", "llama.cpp"), ("openvino", "OpenVINO"))
OPENVINO_INSTALL = "pip install 'contenox-lsp[openvino]'"
OPENVINO_INSTALL_CHECKOUT = "pip install -e '.[openvino]'"
MEMORY_NOTE = (
    "peak_rss_bytes is the peak resident set size (VmHWM) of the backend's whole child "
    "process: the Python interpreter and imported libraries, the model weights, the KV cache "
    "(llama.cpp's n_ctx-sized buffer, OpenVINO's paged cache) and compiled kernels — not the "
    "model alone. rss_after_load_bytes is the child's RSS right after the model was loaded. "
    "Not getrusage/wait4's ru_maxrss: on Linux it survives exec, so a child of this process "
    "(which holds a model itself) would report the parent's peak."
)


def planned_units(cfg: BenchConfig) -> int:
    """Sizing, then per backend: load + warm-up, and one unit per step."""
    return 1 + len(BACKENDS) * (1 + n_steps(cfg))


def openvino_model_dir(profile: Any, model_dir: str | None) -> tuple[Path | None, str]:
    """(the IR folder, "") or (None, why the section is skipped, with the command that fixes
    it). Nothing heavy is imported: ``openvino_genai`` is only looked up."""
    from engine import EMBEDDED_MODEL

    src = str(profile.model)
    if src != EMBEDDED_MODEL:
        src = str(profile.resolve_path(src).resolve())
    if importlib.util.find_spec("openvino_genai") is None:
        return None, (f"openvino_genai is not importable; install it with `{OPENVINO_INSTALL}` "
                      f"(from a checkout: `{OPENVINO_INSTALL_CHECKOUT}`), then convert the "
                      f"model once: `contenox-lsp model convert --to openvino {src}` "
                      "(docs/openvino.md)")
    from engine.errors import EngineError
    from engine.openvino.session import resolve_model_dir

    ov = profile.with_overrides({"profile.backend": "openvino"}, source="bench backends")
    if model_dir:
        ov = ov.with_overrides({"openvino.model_dir": str(Path(model_dir).resolve())},
                               source="cli --openvino-model-dir")
    try:
        return resolve_model_dir(ov).resolve(), ""
    except EngineError as exc:
        if model_dir:
            hint = (f"; convert the model into it with `contenox-lsp model convert --to openvino "
                    f"{src} {Path(model_dir).resolve()}`")
        else:
            hint = "; or pass `contenox-lsp bench --openvino-model-dir DIR`"
        return None, f"{exc}{hint}"


def run(profile: Any, cfg: BenchConfig, model_dir: str | None, out: Path, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    units = planned_units(cfg)
    progress.note("backends: looking for OpenVINO")
    ov_dir, reason = openvino_model_dir(profile, model_dir)
    if ov_dir is None:
        progress.step("backends: skipped", units)
        return {"status": f"skipped: {reason}"}
    source = "bench backends"
    profiles = {
        "llama": profile.with_overrides(
            {"profile.backend": "llama", "cache.block_size": BLOCK_SIZE}, source=source),
        "openvino": profile.with_overrides(
            {"profile.backend": "openvino", "openvino.model_dir": str(ov_dir),
             "cache.block_size": BLOCK_SIZE}, source=source),
    }
    max_new = max(cfg.greedy_tokens, cfg.decode_tokens)
    progress.note("backends: sizing the prompts")
    plan = _size(profiles["llama"], cfg, max_new)
    steps = schedule(plan, cfg)
    plan_file = tmp / "backends-plan.json"
    plan_file.write_text(json.dumps({"max_new_tokens": max_new,
                                     "warmup": asdict(warmup(plan)),
                                     "steps": [s.to_dict() for s in steps]}), encoding="utf-8")
    progress.step("backends: llama.cpp")
    results: dict[str, dict[str, Any]] = {}
    for name, label in BACKENDS:
        results[name] = run_child(name, label, profiles[name], plan_file, tmp, out, progress,
                                  1 + len(steps), cfg.backends_child_timeout_s)
    section = summarize(cfg, steps, results)
    section["plan"] = plan.to_dict()
    section["openvino_model_dir"] = str(ov_dir)
    section["memory_settings"] = {
        "context.n_ctx": profile.n_ctx,  # llama.cpp allocates its KV for all of it up front
        "openvino.cache_size_gb": profile.get("openvino.cache_size_gb"),  # OpenVINO's KV pool
    }
    return section


def _size(profile: Any, cfg: BenchConfig, max_new: int) -> SizePlan:
    """Line counts for the mode's token sizes, with the llama.cpp tokenizer (the children
    then assemble the same inputs with their own)."""
    import dataclasses

    from contextasm.assembly import assemble
    from engine import open_session

    with open_session(profile) as session:
        # A huge n_ctx only for sizing: the budget must never shrink a trial prompt.
        ident = dataclasses.replace(session.identity, n_ctx=1 << 22)

        def count(spec: Any) -> tuple[int, int]:
            asm = assemble(build_inputs(spec), session, ident, max_new_tokens=max_new)
            return asm.n_tokens, asm.stable_end

        return fit(count, cfg)


def run_child(name: str, label: str, profile: Any, plan_file: Path, tmp: Path, out: Path,
              progress: Progress, units: int, timeout_s: float) -> dict[str, Any]:
    """Run one backend's child; its result plus ``status``, ``peak_rss_bytes`` and ``log``.

    The peak RSS is the child's own VmHWM, read by the child at exit; the parent also reads it
    from ``/proc/<pid>/status`` at every step, for a child that dies without a result."""
    from contenox_bench.profile_file import write_toml

    prof_file = write_toml(profile, tmp / f"backends-{name}.toml")
    result_file = tmp / f"backends-{name}.json"
    log_path = out / f"backends-{name}.log"
    cmd = [sys.executable, "-m", "contenox_bench.backends_child", "--profile",
           str(prof_file), "--plan", str(plan_file), "--out", str(result_file)]
    done = 0
    polled: int | None = None
    timed_out = threading.Event()
    t0 = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as logf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf, text=True,
                                stdin=subprocess.DEVNULL)

        def on_timeout() -> None:
            timed_out.set()
            proc.kill()  # still unreaped: its stdout is open until it exits

        timer = threading.Timer(timeout_s, on_timeout)
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(PROGRESS):
                    polled = proc_status_bytes("VmHWM", str(proc.pid)) or polled
                    if done < units:
                        done += 1
                        progress.step(f"backends {label}: {line[len(PROGRESS):].strip()}")
                else:
                    logf.write(line)  # native libraries may write to stdout
            timer.cancel()
            try:
                proc.wait(timeout=60.0)  # stdout closed: it is exiting
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        except BaseException:
            timer.cancel()
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            raise
    if done < units:
        progress.step(f"backends: {label} ended", units - done)
    try:
        res: dict[str, Any] = json.loads(result_file.read_text("utf-8"))
    except (OSError, ValueError):
        res = {"steps": {}, "prompt_ids": {}}
    if timed_out.is_set():
        status = f"failed: no result within {timeout_s:.0f} s (killed)"
    elif res.get("error"):
        status = f"failed: {res['error']}"
    elif proc.returncode != 0:
        status = f"failed: exit status {proc.returncode} (see {log_path.name})"
    else:
        status = "ok"
    own = res.get("peak_rss_self_bytes")
    res.update({
        "status": status,
        "wall_s": time.perf_counter() - t0,
        "peak_rss_bytes": own or polled,
        "peak_rss_source": "VmHWM read by the child at exit" if own else
        "VmHWM read by the parent at the child's last step" if polled else None,
        "log": log_path.name,
    })
    return res


# ----------------------------------------------------------------------------- summary


def _values(res: dict[str, Any], steps: Sequence[Step], kind: str, field: str,
            size: int | None = None) -> list[float]:
    out = []
    for s in steps:
        if s.kind != kind or (size is not None and s.size != size):
            continue
        got = res.get("steps", {}).get(s.key)
        if got is not None and got.get(field) is not None:
            out.append(float(got[field]))
    return out


def _tps(res: dict[str, Any], steps: Sequence[Step], size: int) -> list[float]:
    out = []
    for s in steps:
        got = res.get("steps", {}).get(s.key)
        if s.kind == "cold" and s.size == size and got and got["prefill_ms"] > 0:
            out.append(got["new_tokens"] / got["prefill_ms"] * 1000.0)
    return out


def _row(name: str, label: str, unit: str, higher_is_better: bool,
         per: dict[str, dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "label": label, "unit": unit, "higher_is_better": higher_is_better,
            **per, "ov_over_llama": ratio(median(per["openvino"]), median(per["llama"])),
            **extra}


def _first(res: dict[str, dict[str, Any]], steps: Sequence[Step], kind: str, field: str,
           size: int | None = None) -> dict[str, Any]:
    """``field`` of the first step of ``kind`` per backend (token counts)."""
    out: dict[str, Any] = {}
    for name, r in res.items():
        for s in steps:
            got = r.get("steps", {}).get(s.key)
            if s.kind == kind and (size is None or s.size == size) and got:
                out[name] = got[field]
                break
    return out


def _per_step(res: dict[str, dict[str, Any]], steps: Sequence[Step], kind: str,
              field: str) -> dict[str, list[Any]]:
    return {name: [r["steps"][s.key][field] for s in steps
                   if s.kind == kind and s.key in r.get("steps", {})]
            for name, r in res.items()}


def compare_prompts(a: dict[str, list[int]], b: dict[str, list[int]]) -> dict[str, Any]:
    """Whether the assembler gave both backends the same token ids, prompt by prompt."""
    keys = [k for k in a if k in b]
    for k in keys:
        at = first_mismatch(a[k], b[k])
        if at is not None:
            return {"same_tokens": False, "prompts_compared": len(keys),
                    "first_difference": {"step": k, "at": at, "tokens": [len(a[k]), len(b[k])]}}
    return {"same_tokens": True if keys else None, "prompts_compared": len(keys),
            "first_difference": None}


def compare_greedy(a: dict[str, list[int]], b: dict[str, list[int]], n: int) -> dict[str, Any]:
    """Greedy outputs of the same prompts on both backends: the first token, and the first
    ``n`` tokens (recorded, never a failure: the int8 IR and the GGUF's quantization differ)."""
    keys = [k for k in a if k in b and a[k] and b[k]]
    first_equal = sum(1 for k in keys if a[k][0] == b[k][0])
    mismatches = []
    for k in keys:
        at = first_mismatch(a[k][:n], b[k][:n])
        if at is not None:
            mismatches.append({"step": k, "at": at})
    return {
        "tokens": n,
        "prompts_compared": len(keys),
        "first_tokens_equal": first_equal,
        "first_token_equal": (first_equal == len(keys)) if keys else None,
        "all_equal": (not mismatches) if keys else None,
        "mismatches": mismatches,
    }


def _mib(x: Any) -> float | None:
    return None if x is None else float(x) / 2**20


def summarize(cfg: BenchConfig, steps: Sequence[Step],
              results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The section from both children's results (pure: no model, no process)."""
    names = [n for n, _ in BACKENDS]
    res = {n: results.get(n, {"status": "not run", "steps": {}, "prompt_ids": {}})
           for n in names}
    rows: list[dict[str, Any]] = []
    for size in cfg.backends_cold_sizes:
        toks = _first(res, steps, "cold", "prompt_tokens", size)
        rows.append(_row(
            f"cold_prefill_{size}", f"cold prefill, {next(iter(toks.values()), size)} tokens",
            "tokens/s", True, {n: summary(_tps(res[n], steps, size), "tokens/s") for n in names},
            prompt_tokens=toks, nominal_tokens=size))
    toks = _first(res, steps, "warm", "prompt_tokens")
    n_warm = next(iter(toks.values()), "?")
    rows.append(_row(
        "cold_ttft", f"cold TTFT of the warm row's prompt ({n_warm} tokens)",
        "ms", False, {n: summary(_values(res[n], steps, "cold_same", "ttft_ms"), "ms")
                      for n in names},
        prompt_tokens=_first(res, steps, "cold_same", "prompt_tokens"),
        reused_tokens=_per_step(res, steps, "cold_same", "reused_tokens")))
    rows.append(_row(
        "warm_suffix_ttft", "warm changed-suffix TTFT", "ms", False,
        {n: summary(_values(res[n], steps, "warm", "ttft_ms"), "ms") for n in names},
        prompt_tokens=toks,
        stable_tokens=_first(res, steps, "warm", "stable_end"),
        reused_tokens=_per_step(res, steps, "warm", "reused_tokens"),
        new_tokens=_per_step(res, steps, "warm", "new_tokens")))
    rows.append(_row(
        "decode", f"decode ({cfg.decode_tokens} tokens)", "tokens/s", True,
        {n: summary([v for v in _values(res[n], steps, "warm", "decode_tok_s") if v > 0],
                    "tokens/s") for n in names},
        decoded_tokens=_per_step(res, steps, "warm", "decode_tokens")))
    rows.append(_row(
        "peak_rss", "peak RSS of the backend's process", "MiB", False,
        {n: summary([] if res[n].get("peak_rss_bytes") is None
                    else [_mib(res[n]["peak_rss_bytes"]) or 0.0], "MiB") for n in names}))
    cold_row, warm_row = rows[-4], rows[-3]
    warm_row["warm_over_cold"] = {n: ratio(median(warm_row[n]), median(cold_row[n]))
                                  for n in names}
    backends = {
        n: {k: res[n].get(k) for k in ("status", "model", "load_s", "warmup_ms", "warmup_tokens",
                                       "wall_s",
                                       "peak_rss_bytes", "peak_rss_source",
                                       "rss_after_load_bytes", "rss_end_bytes", "log")}
        for n in names
    }
    prompts = compare_prompts(res["llama"].get("prompt_ids", {}),
                              res["openvino"].get("prompt_ids", {}))
    outputs = {n: {k: v["output"] for k, v in res[n].get("steps", {}).items()} for n in names}
    failed = [f"{n}: {str(res[n].get('status')).removeprefix('failed: ')}" for n in names
              if res[n].get("status") != "ok"]
    return {
        "status": "ok" if not failed else "failed: " + "; ".join(failed),
        "block_size": BLOCK_SIZE,
        "reps_warm": cfg.reps,
        "reps_cold": cfg.cold_reps,
        "prefix_tokens": cfg.backends_prefix,
        "suffix_tokens": cfg.backends_suffix,
        "greedy_tokens": cfg.greedy_tokens,
        "backends": backends,
        "rows": rows,
        **prompts,
        "greedy": compare_greedy(outputs["llama"], outputs["openvino"], cfg.greedy_tokens),
        "memory_note": MEMORY_NOTE,
        "note": "Each backend runs alone in its own process, llama.cpp first, on the same "
                "prompts in the same order; cold prompts carry a fresh nonce at the start of "
                "the system prompt (no cached KV block, on llama.cpp only the few format "
                "tokens before the nonce are reused). The cold TTFT row is the warm row's "
                "prompt under a fresh nonce. ov_over_llama is OpenVINO's median ÷ llama.cpp's "
                "(for tokens/s above 1 means OpenVINO is faster; for ms and MiB, below 1).",
    }
