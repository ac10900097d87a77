"""Section ``remote``: the in-process engine next to a real llama-server on the same prompts.

One llama-server (``contenox_bench.llama_server``: built from the llama.cpp commit
llama-cpp-python vendors) runs the profile's model on 127.0.0.1 with the engine's thread count.
The same token ids go to three paths, alternating order per repetition:

- ``engine``: the in-process session (``prefill`` after a cold reset);
- ``server``: llama-server's own prefill speed for the request (``timings.prompt_per_second``,
  a raw ``/completion`` with ``cache_prompt: false``): what the issue's comparison measures;
- ``remote``: this project's ``llama-server`` backend (``LlamaServerSession``) end to end,
  loopback HTTP and JSON included.

Rows: cold prefill tokens/s per size; greedy decode tokens/s right after each cold prefill
(the engine's ``generate`` and llama-server's own ``timings``, at the same depth); warm
changed-suffix TTFT (stable prefix resident, a new suffix, one token generated) with the reuse
the server reported; the per-request overhead of the remote backend (its wall time minus the
server's own prompt + decode time). Outside ``--quick``, the edit trace (section 3) once more
with the profile's backend set to this llama-server: a and b are this language server on the
remote backend, c and d run on the server itself (d: its prefix cache fed the editor-plugin
order, what llama.vscode users get).

Skipped, with the reason, where no llama-server binary is available.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from contenox_bench import llama_server, trace
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import Corpus, cold_reset
from contenox_bench.profile_file import write_toml
from contenox_bench.progress import Progress
from contenox_bench.stats import median, ratio, summary
from engine.results import decode_rate

PATHS = ("engine", "server", "remote")

#: Tokens decoded after each cold prefill for the decode-at-depth row (engine and server).
DECODE_TOKENS = 32


def planned_units(cfg: BenchConfig) -> int:
    edit_trace = trace.planned_units(cfg) if cfg.remote_trace else 0
    return 1 + len(cfg.backends_cold_sizes) + 1 + edit_trace


def run(session: Any, corpus: Corpus, cfg: BenchConfig, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    reason = llama_server.unavailable_reason()
    if session.backend != "llama":
        reason = f"compares the in-process llama.cpp engine; this run's is {session.backend}"
    if reason is not None:
        progress.step("remote: skipped", planned_units(cfg))
        return {"status": f"skipped: {reason}"}
    from engine.model_files import resolve_model_path
    from engine.remote.client import ServerClient
    from engine.remote.llama_server import LlamaServerSession

    profile = session.profile
    threads = int(profile.get("context.n_threads")) or None
    progress.note("remote: starting llama-server")
    # llama-server with its own batch defaults: the comparison a user makes (issue 29).
    server = llama_server.start(resolve_model_path(profile), log_path=tmp / "llama-server.log",
                                n_ctx=profile.n_ctx, threads=threads, ubatch=None,
                                flash_attn=str(profile.get("context.flash_attn")))
    try:
        remote_profile = profile.with_overrides(
            {"profile.backend": "llama-server", "remote.url": server.url,
             "remote.timeout_s": 600.0}, source="bench remote")
        remote = LlamaServerSession.open(remote_profile)
        raw = ServerClient(server.url, timeout_s=600.0)
        progress.step("remote: server up")
        try:
            rows = [row for size in cfg.backends_cold_sizes
                    for row in _cold_rows(session, remote, raw, corpus, size, cfg, progress)]
            rows.append(_warm_row(session, remote, corpus, cfg))
            progress.step("remote: warm suffix")
            overhead = remote.metrics.extra.get("overhead_ms_samples", [])
        finally:
            raw.close()
            remote.close()
        edit_trace = (_edit_trace(remote_profile, cfg, tmp / "remote-trace", progress)
                      if cfg.remote_trace else {"status": "not run in --quick"})
    finally:
        server.stop()
    return {
        "status": "ok",
        "server": {"url": server.url, "build": remote.server_facts.get("build_info"),
                   "build_options": list(llama_server.CMAKE_OPTIONS),
                   "threads": threads or "all cores", "repack": llama_server.repacks()},
        "rows": rows,
        "remote_overhead_ms": summary(overhead, "ms"),
        "edit_trace": edit_trace,
        "engine_schedule": session.exact_reuse,
        "note": "engine_over_server is the in-process engine's median tokens/s ÷ llama-server's "
                "own (above 1: the engine is faster). Same llama.cpp commit, built the same way "
                "(native), same threads, the same flash-attention setting "
                f"({profile.get('context.flash_attn')}); llama-server runs with its own "
                "batch defaults (-b 2048 -ub 512, "
                + ("repacked weights" if llama_server.repacks() else
                   "--no-repack: llama.cpp's AMX kernels crash on this CPU") +
                "), the engine with its "
                "profile (exact reuse: "
                f"{(session.exact_reuse or {}).get('description', 'n/a')}, micro-batches of "
                f"{profile.get('context.n_ubatch')}); each repetition alternates the order of "
                "the three paths.",
    }


def _cold_rows(session: Any, remote: Any, raw: Any, corpus: Corpus, size: int,
               cfg: BenchConfig, progress: Progress) -> list[dict[str, Any]]:
    """The cold-prefill row of ``size`` tokens and the decode row at that depth (the engine
    and llama-server decode ``DECODE_TOKENS`` greedily after the same cold prefill)."""
    samples: dict[str, list[float]] = {p: [] for p in PATHS}
    decode: dict[str, list[float]] = {"engine": [], "server": []}
    reps = max(1, cfg.cold_reps)
    for rep in range(reps):
        tokens = _fresh(corpus, size, rep)
        order = PATHS if rep % 2 == 0 else tuple(reversed(PATHS))
        for path in order:
            if path == "engine":
                cold_reset(session, corpus.primer())
                r = session.prefill(tokens)
                samples[path].append(r.new_tokens / (r.prefill_ms / 1000.0))
                g = session.generate(max_tokens=DECODE_TOKENS)
                if g.decode_tokens > 1:  # a base model may end at once: no rate then
                    decode[path].append(decode_rate(g.decode_tokens, g.decode_ms))
            elif path == "server":
                doc = raw.post("/completion", {"prompt": tokens, "n_predict": DECODE_TOKENS,
                                               "temperature": 0.0, "ignore_eos": True,
                                               "cache_prompt": False, "id_slot": 0})
                t = doc["timings"]
                samples[path].append(float(t["prompt_per_second"]))
                # As the engine counts it: the first token comes with the prompt.
                decode[path].append(decode_rate(int(t["predicted_n"]),
                                                float(t["predicted_ms"])))
            else:
                remote.reset()
                r = remote.prefill(tokens)
                samples[path].append(r.new_tokens / (r.prefill_ms / 1000.0))
                _overhead(remote, r.prefill_ms)
    progress.step(f"remote: cold {size}")
    stats = {p: summary(samples[p], "tokens/s") for p in PATHS}
    rates = {p: summary(v, "tokens/s") for p, v in decode.items()}
    return [{"name": f"cold_prefill_{size}", "label": f"cold prefill, {size} tokens",
             "unit": "tokens/s", **stats,
             "engine_over_server": ratio(median(stats["engine"]), median(stats["server"])),
             "remote_over_server": ratio(median(stats["remote"]), median(stats["server"]))},
            {"name": f"decode_at_{size}", "label": f"greedy decode after {size} tokens",
             "unit": "tokens/s", **rates, "decode_tokens": DECODE_TOKENS,
             "engine_over_server": ratio(median(rates["engine"]), median(rates["server"]))}]


def _warm_row(session: Any, remote: Any, corpus: Corpus, cfg: BenchConfig) -> dict[str, Any]:
    prefix = corpus.stable(cfg.backends_prefix).tokens
    ttft: dict[str, list[float]] = {"engine": [], "remote": []}
    reused: list[int] = []
    new: list[int] = []
    for path, s in (("engine", session), ("remote", remote)):
        s.prefill(prefix)
        for rep in range(max(1, cfg.reps)):
            prompt = [*prefix, *corpus.question(cfg.backends_suffix, 100 + rep)]
            t0 = time.perf_counter()
            r = s.prefill(prompt)
            if path == "remote":  # before generate() replaces the server's figures
                reused.append(r.reused_tokens)
                new.append(r.new_tokens)
                _overhead(remote, r.prefill_ms)
            s.generate(max_tokens=1)
            ttft[path].append((time.perf_counter() - t0) * 1000.0)
            s.prefill(prefix)  # back to the stable prefix, as the idle prefill leaves it
    stats = {p: summary(v, "ms") for p, v in ttft.items()}
    return {"name": "warm_suffix_ttft", "label": "warm changed-suffix TTFT", "unit": "ms",
            **stats, "prompt_tokens": len(prefix) + cfg.backends_suffix,
            "remote_reused_tokens": reused, "remote_new_tokens": new,
            "remote_over_engine": ratio(median(stats["remote"]), median(stats["engine"]))}


def _edit_trace(profile: Any, cfg: BenchConfig, tmp: Path, progress: Progress
                ) -> dict[str, Any]:
    """Section 3's replay with the remote backend: its medians per system."""
    tmp.mkdir(parents=True, exist_ok=True)
    profile_file = write_toml(profile, tmp / "remote-profile.toml")
    sec = trace.run(cfg, profile, profile_file, None, tmp, tmp, progress)
    if sec.get("status") != "ok":
        return {"status": sec.get("status")}
    return {"status": "ok", "systems": sec["systems"],
            "ttft_ms": {k: v["median"] for k, v in sec["ttft_ms"].items()},
            "new_tokens": {k: v["median"] for k, v in sec["new_tokens"].items()},
            "ratios": sec["ratios"], "new_token_ratios": sec["new_token_ratios"],
            "ask_overhead_ms": {k: v["median"] for k, v in sec["ask_overhead_ms"].items()},
            "steps": len(sec["steps"]), "ttft_definition": sec["ttft_definition"]}


def _overhead(remote: Any, wall_ms: float) -> None:
    """Wall time of a remote prefill minus the server's own prompt + decode time."""
    t = remote.metrics.extra.get("last_server_timings", {})
    server_ms = float(t.get("prompt_ms", 0.0)) + float(t.get("predicted_ms", 0.0))
    remote.metrics.extra.setdefault("overhead_ms_samples", []).append(max(0.0, wall_ms - server_ms))


def _fresh(corpus: Corpus, size: int, rep: int) -> list[int]:
    """``size`` tokens that share nothing with the last prompt (a different first suffix)."""
    body = corpus.suffix(size, 500 + size + rep)
    return [*corpus.head, *body][:size]


def markdown(sec: dict[str, Any]) -> list[str]:
    out = ["## Remote: the in-process engine and llama-server", ""]
    if sec.get("status") != "ok":
        return [*out, f"Status: {sec.get('status')}", ""]
    out += ["| row | engine | llama-server (own timing) | remote backend | ratio |",
            "|---|---|---|---|---|"]
    for row in sec["rows"]:
        cells = " | ".join(_med(row.get(p)) for p in PATHS)
        if "engine_over_server" in row:
            key, r = "engine/server", row["engine_over_server"]
        else:
            key, r = "remote/engine", row.get("remote_over_engine")
        out.append(f"| {row['label']} ({row['unit']}) | {cells} | {key} {_fmt(r, 2)} |")
    oh = sec.get("remote_overhead_ms", {})
    out += ["", f"Remote backend overhead per request (wall − server time): median "
            f"{_fmt(oh.get('median'))} ms.", "", sec["note"], ""]
    return out + _trace_markdown(sec.get("edit_trace") or {"status": "not run"})


def _trace_markdown(et: dict[str, Any]) -> list[str]:
    out = ["### Edit trace on the llama-server backend", ""]
    if et.get("status") != "ok":
        return [*out, f"Status: {et.get('status')}", ""]
    out += [f"{et['steps']} asks; TTFT: {et['ttft_definition']}", "",
            "| system | median TTFT (ms) | median tokens prefilled at ask |", "|---|---|---|"]
    for k, label in et["systems"].items():
        out.append(f"| {k}. {label} | {_fmt(et['ttft_ms'].get(k))} | "
                   f"{_fmt(et['new_tokens'].get(k), 0)} |")
    r = et["ratios"]
    out += ["", f"a/d TTFT {_fmt(r.get('a_over_d'), 3)}, a/c {_fmt(r.get('a_over_c'), 3)}; "
            f"tokens prefilled a/d {_fmt(et['new_token_ratios'].get('a_over_d'), 3)}; per-ask "
            f"overhead beside the model's work (client TTFT − engine TTFT) a "
            f"{_fmt(et['ask_overhead_ms'].get('a'))} ms.", ""]
    return out


def _med(stat: dict[str, Any] | None) -> str:
    return "—" if not stat else _fmt(stat.get("median"))


def _fmt(x: Any, digits: int = 1) -> str:
    return "—" if x is None else f"{float(x):.{digits}f}"
