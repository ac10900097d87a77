"""Section 3: the edit-trace replay — one scripted editing session, four systems.

a. contenox with idle pre-prefill, b. contenox with pre-prefill off: the real server over stdio,
driven like an editor (didOpen, one didChange per typed character, pin, ask after an idle gap).
c. a fresh context per request and d. llama-cpp-python's ``Llama`` with its prefix reuse run in
this process afterwards on the prompts system a's server assembled for each ask (fetched with
``contenox/explainContext`` + ``includeText``), so all four see the same text.

c and d are llama.cpp; on a profile with another backend (OpenVINO) they run on that backend's
engine session instead (``baselines.run_session_cold`` / ``run_session_prefix_reuse``), so the
ratios compare the server with the same runtime used without its cache management.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from contenox_bench import applicable, baselines
from contenox_bench.bare import BareModel
from contenox_bench.config import BenchConfig
from contenox_bench.corpus import GEMMA_CLOSE, GEMMA_OPEN, primer_tokens
from contenox_bench.lspclient import EditorClient
from contenox_bench.progress import Progress
from contenox_bench.stats import ratio, summary
from contenox_bench.trace_script import (
    STDLIB_TARGETS,
    Script,
    Step,
    copy_stdlib_part,
    find_targets,
)

log = logging.getLogger(__name__)

SYSTEMS = {
    "a": "contenox, idle pre-prefill on",
    "b": "contenox, idle pre-prefill off",
    "c": "fresh context per request",
    "d": "llama-cpp-python Llama, prefix reuse, editor-plugin order",
}
TTFT_DEFINITION = ("a, b: client-side time from sending contenox/ask to the first streamed "
                   "$/progress piece; c, d: in-process time from the call to the first sampled "
                   "token (c includes creating the context)")


def systems(backend: str) -> dict[str, str]:
    """What a–d are on this backend (c and d run on it too, see the module docstring)."""
    if backend == applicable.BARE_LOOP_BACKEND:
        return dict(SYSTEMS)
    return SYSTEMS | {
        "c": f"{backend} engine session, nothing cached per request",
        "d": f"{backend} engine session, its prefix reuse, editor-plugin order",
    }


def ttft_definition(backend: str) -> str:
    if backend == applicable.BARE_LOOP_BACKEND:
        return TTFT_DEFINITION
    return ("a, b: client-side time from sending contenox/ask to the first streamed $/progress "
            "piece; c, d: the engine's TTFT, from the start of the prefill to the first token "
            f"(c: the {backend} cache emptied and one short unrelated request run before each "
            "ask, not timed)")


def planned_units(cfg: BenchConfig) -> int:
    return 2 + 4 * len(cfg.trace.steps)


def run(cfg: BenchConfig, profile: Any, profile_file: Path, workspace: str | None,
        out_dir: Path, tmp: Path, progress: Progress) -> dict[str, Any]:
    if profile.prompt_format != "gemma":
        # The baselines rebuild the prompt from segment text and the format's markers.
        return {"status": f"not run: prompt format {profile.prompt_format!r} "
                          "(the replay's baselines know the gemma markers only)"}
    root = Path(workspace).resolve() if workspace else copy_stdlib_part(tmp)
    try:
        targets = find_targets(root, () if workspace else STDLIB_TARGETS)
    except ValueError as exc:
        return {"status": f"not run: {exc}"}
    tc = cfg.trace
    options = {
        "profile": str(profile_file),
        "debounceMs": tc.debounce_ms,
        "repoMapTokens": tc.repo_map_tokens,
        "maxTokens": tc.max_tokens,
        "logLevel": "warning",
    }
    runs: dict[str, dict[str, Any]] = {}
    for name, on_idle in (("a", True), ("b", False)):
        progress.note(f"trace {name}: starting the server")
        with open(out_dir / f"trace-server-{name}.log", "w", encoding="utf-8") as err:
            runs[name] = asyncio.run(_server_system(
                name, root, targets, cfg, dict(options, prefillOnIdle=on_idle), err,
                capture=name == "a", progress=progress))
        progress.step(f"trace {name} done")

    segs = [s["segments"] for s in runs["a"]["steps"]]
    questions = [s["question"] for s in runs["a"]["steps"]]
    if profile.backend == applicable.BARE_LOOP_BACKEND:
        c_prompts, c_rows, d_rows = _llama_baselines(profile, segs, questions, tc.max_tokens,
                                                     progress)
    else:
        progress.note(f"trace c, d: loading the {profile.backend} session")
        c_prompts, c_rows, d_rows = _session_baselines(profile, segs, questions, tc.max_tokens,
                                                       progress)
    section = _report(cfg, root, targets, runs, c_prompts, c_rows, d_rows, workspace is None)
    section["backend"] = str(profile.backend)
    section["systems"] = systems(str(profile.backend))
    section["ttft_definition"] = ttft_definition(str(profile.backend))
    return section


Baselines = tuple[list[list[int]], list[dict[str, Any]], list[dict[str, Any]]]


def _llama_baselines(profile: Any, segs: list[Any], questions: list[str], max_tokens: int,
                     progress: Progress) -> Baselines:
    """c: a bare llama.cpp context per ask; d: llama-cpp-python's ``Llama``."""
    from engine import open_session
    from engine.model_files import resolve_model_path

    with open_session(profile) as session:
        block = session.identity.block_size  # what the server's assembler padded to
    model_path = str(resolve_model_path(profile))
    bare_model = BareModel(model_path, profile)
    try:
        tok = baselines.tokenize_with(bare_model)
        bos = _bos(bare_model)
        c_prompts = [baselines.contenox_order(x, tok, bos, GEMMA_OPEN, GEMMA_CLOSE, block)
                     for x in segs]
        d_prompts = [baselines.editor_order(x, q, tok, bos, GEMMA_OPEN, GEMMA_CLOSE)
                     for x, q in zip(segs, questions, strict=True)]
        c_rows = baselines.run_fresh_context(bare_model, c_prompts, progress.step)
    finally:
        bare_model.close()
    d_rows = baselines.run_llama_high_level(model_path, profile, d_prompts, max_tokens,
                                            progress.step)
    return c_prompts, c_rows, d_rows


def _session_baselines(profile: Any, segs: list[Any], questions: list[str], max_tokens: int,
                       progress: Progress) -> Baselines:
    """c and d on an engine session of the profile's own backend (its tokenizer too)."""
    from engine import open_session

    with open_session(profile) as session:
        block = session.identity.block_size  # what the server's assembler padded to
        tok = baselines.session_tokenize(session)
        bos = baselines.session_bos(session, profile)
        c_prompts = [baselines.contenox_order(x, tok, bos, GEMMA_OPEN, GEMMA_CLOSE, block)
                     for x in segs]
        d_prompts = [baselines.editor_order(x, q, tok, bos, GEMMA_OPEN, GEMMA_CLOSE)
                     for x, q in zip(segs, questions, strict=True)]
        primer = primer_tokens(session)
        c_rows = baselines.run_session_cold(session, primer, c_prompts, progress.step)
        d_rows = baselines.run_session_prefix_reuse(session, primer, d_prompts, max_tokens,
                                                    progress.step)
    return c_prompts, c_rows, d_rows


def _bos(model: BareModel) -> int | None:
    import llama_cpp

    bos = int(llama_cpp.llama_vocab_bos(model.vocab))
    adds = bool(llama_cpp.llama_vocab_get_add_bos(model.vocab))
    return bos if bos >= 0 and model.profile.resolve_bos(adds).bos_policy == "add" else None


async def _server_system(name: str, root: Path, targets: Any, cfg: BenchConfig,
                         options: dict[str, Any], err: Any, capture: bool,
                         progress: Progress) -> dict[str, Any]:
    tc = cfg.trace
    client = EditorClient(err)
    script = Script(root, targets)
    texts: dict[Path, str] = {}
    steps: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    await client.start(root, options)
    startup_s = None
    try:
        for i, kind in enumerate(tc.steps):
            step = script.plan(kind, texts)
            await _act(client, step, texts, tc.keystroke_s, tc.ask_timeout_s)
            path, line = step.cursor
            # The user puts the cursor where they will ask; the editor asks for code actions
            # there, as VS Code does on every cursor move.
            await client.cursor_moved(path, line, tc.ask_timeout_s)
            if startup_s is None:
                # Before the first ask the user is reading the code: each system gets until
                # it is ready (a: warm, the stable context prefilled; b: model and index loaded).
                await wait_ready(client, options["prefillOnIdle"], tc.startup_timeout_s)
                startup_s = time.perf_counter() - t_start
            await asyncio.sleep(tc.idle_gap_s)
            st = await client.request("contenox/status", None)
            ex: dict[str, Any] | None = None
            if capture:
                # The prompt the ask is about to get, for c and d. Before the ask, not after:
                # the ask's own prefill updates the rate that bounds the question's code, and
                # under load that can change the prompt an explain after it shows.
                ex = await client.request("contenox/explainContext", {
                    "textDocument": {"uri": path.as_uri()},
                    "position": {"line": line, "character": 0},
                    "question": step.question, "includeText": True}, tc.ask_timeout_s)
            result, first_ms, total_ms = await client.ask(
                f"{name}-{i}", step.question, path, line, tc.max_tokens, tc.ask_timeout_s)
            row: dict[str, Any] = {
                "step": kind,
                "question": step.question,
                "ttft_ms": first_ms,
                "response_ms": total_ms,
                "server_ttft_ms": result["metrics"].get("ttftMs"),
                "server_prefill_ms": result["metrics"].get("prefillMs"),
                "engine_ttft_ms": result["metrics"].get("engineTtftMs"),
                "prompt_tokens": result["metrics"].get("promptTokens"),
                "reused_tokens": result["metrics"].get("reusedTokens"),
                "new_tokens": result["metrics"].get("newTokens"),
                "state_before_ask": st.get("state"),
                "pending_prefill_tokens_before_ask": st.get("pendingPrefillTokens"),
            }
            if ex is not None:
                row["segments"] = [{"kind": s["kind"], "label": s["label"],
                                    "tokens": s["tokens"], "text": s["text"]}
                                   for s in ex["segments"]]
                row["explain_total_tokens"] = ex["totalTokens"]
            steps.append(row)
            progress.step(f"trace {name}: ask {i + 1}/{len(tc.steps)} ({kind})")
    finally:
        await client.close()
    return {"startup_s": startup_s, "steps": steps, "messages": client.messages}


async def _act(client: EditorClient, step: Step, texts: dict[Path, str], keystroke_s: float,
               timeout: float) -> None:
    for path in step.open_files:
        texts[path] = path.read_text("utf-8")
        client.did_open(path, texts[path])
    for typed in step.typing:
        line, col = typed.line, typed.character
        for ch in typed.text:
            client.did_change(typed.path, line, col, ch)
            texts[typed.path] = _insert(texts[typed.path], line, col, ch)
            line, col = (line + 1, 0) if ch == "\n" else (line, col + 1)
            await asyncio.sleep(keystroke_s)
    if step.pin is not None:
        await client.request("contenox/pin", {"uri": step.pin.as_uri()}, timeout)


def _insert(text: str, line: int, col: int, piece: str) -> str:
    lines = text.split("\n")
    lines[line] = lines[line][:col] + piece + lines[line][col:]
    return "\n".join(lines)


async def wait_ready(client: EditorClient, warm: bool, timeout: float,
                     idle_done: bool = False) -> None:
    """Until the server has its model and index and the context is assembled; ``warm``: and
    the idle prompt is in KV; ``idle_done``: and the idle time's work is not held back for
    inline completions either (the warm-ups for the cursor's place have run)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = await client.request("contenox/status", None)
        if st.get("state") == "error":
            raise RuntimeError(f"the server could not load the model: {st.get('error')}")
        loaded = st.get("model") is not None and st["index"]["state"] in ("ready", "error")
        settled = loaded and not st.get("contextStale")
        if settled and (not warm or (st["state"] == "warm"
                                     and st.get("pendingPrefillTokens") == 0)) \
                and not (idle_done and st.get("idleHeld")):
            return
        await asyncio.sleep(0.25)
    raise TimeoutError(f"the server was not ready after {timeout:.0f} s")


def _report(cfg: BenchConfig, root: Path, targets: Any, runs: dict[str, dict[str, Any]],
            c_prompts: list[list[int]], c_rows: list[dict[str, Any]],
            d_rows: list[dict[str, Any]], temp_copy: bool) -> dict[str, Any]:
    a_steps, b_steps = runs["a"]["steps"], runs["b"]["steps"]
    steps = []
    for i, a in enumerate(a_steps):
        b = b_steps[i]
        steps.append({
            "step": a["step"],
            "question": a["question"][:120],
            "prompt_tokens": a["prompt_tokens"],
            "rebuilt_prompt_tokens": len(c_prompts[i]),
            "a": _sys_row(a),
            "b": _sys_row(b),
            "c": c_rows[i],
            "d": d_rows[i],
        })
    per_system = {k: summary([s[k]["ttft_ms"] for s in steps], "ms") for k in SYSTEMS}
    med = {k: per_system[k]["median"] for k in SYSTEMS}
    # Tokens prefilled at ask time: the work behind each TTFT, independent of machine load.
    new_tok = {k: summary([s[k]["new_tokens"] for s in steps], "tokens") for k in SYSTEMS}
    ntm = {k: new_tok[k]["median"] for k in SYSTEMS}
    mismatched = [s["step"] for s in steps if s["prompt_tokens"] != s["rebuilt_prompt_tokens"]]
    return {
        "status": "ok",
        "workspace": "temporary copy of part of the standard library" if temp_copy
        else str(root),
        "targets": {
            "edit_file": targets.edit_file.relative_to(root).as_posix(),
            "functions": [f.name for f in targets.funcs],
            "signature_file": targets.sig_file.relative_to(root).as_posix(),
            "signature_function": targets.sig_func,
            "pin_file": targets.pin_file.relative_to(root).as_posix(),
        },
        "settings": cfg.trace.__dict__ | {"steps": list(cfg.trace.steps)},
        "systems": SYSTEMS,
        "startup_s": {"a": runs["a"]["startup_s"], "b": runs["b"]["startup_s"]},
        "steps": steps,
        "ttft_ms": per_system,
        "ratios": {
            "a_over_c": ratio(med["a"], med["c"]),
            "a_over_d": ratio(med["a"], med["d"]),
            "b_over_d": ratio(med["b"], med["d"]),
        },
        "new_tokens": new_tok,
        "new_token_ratios": {
            "a_over_c": ratio(ntm["a"], ntm["c"]),
            "a_over_d": ratio(ntm["a"], ntm["d"]),
            "b_over_d": ratio(ntm["b"], ntm["d"]),
        },
        "user_turn_tokens": summary([_user_tokens(s) for s in a_steps], "tokens"),
        # What an ask costs beside the model's own work: assembly, JSON-RPC, scheduling.
        "ask_overhead_ms": {k: summary([s[k]["ttft_ms"] - s[k]["engine_ttft_ms"] for s in steps
                                        if s[k]["engine_ttft_ms"] is not None], "ms")
                            for k in ("a", "b")},
        "prompt_rebuild_mismatches": mismatched,
        "server_messages": runs["a"]["messages"] + runs["b"]["messages"],
        "ttft_definition": TTFT_DEFINITION,
    }


def _user_tokens(step: dict[str, Any]) -> int:
    """Tokens of the user turn (segment I): never in KV before the ask, by design."""
    return sum(int(seg["tokens"]) for seg in step["segments"] if seg["kind"] == "user")


def _sys_row(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("ttft_ms", "response_ms", "server_ttft_ms", "server_prefill_ms",
                              "engine_ttft_ms", "prompt_tokens",
                              "reused_tokens", "new_tokens", "state_before_ask",
                              "pending_prefill_tokens_before_ask")}
