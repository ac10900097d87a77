"""report.json (the schema in contenox_bench/README.md) and report.md (tables)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contenox_bench import bigrepo, fleet_bench, remote_bench, schedule
from contenox_bench.applicable import is_not_applicable

SCHEMA_VERSION = 1


def write_json(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def _ms(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.1f}" if abs(x) < 100 else f"{x:,.0f}"


def _r0(x: float | None) -> str:
    return "–" if x is None else f"{x:.0f}"


def _r3(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _num(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:,.{digits}f}"


def _stat(s: dict[str, Any] | None, fmt: Any = _ms) -> str:
    """'median (min–max, n=N)'."""
    if not s or not s.get("n"):
        return "–"
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])}, n={s['n']})"


def _tok(t: dict[str, int] | None) -> str:
    return "–" if not t else f"{t['reused']} / {t['new']}"


def _met(g: dict[str, Any]) -> str:
    status = g.get("status") or {True: "met", False: "not met", None: "not measured"}[g["met"]]
    return f"**{status}**" if status in ("met", "not met") else str(status)


#: Profile keys shown in the header, per backend (what its sessions read).
_HEADER_KEYS = {
    "llama": ("context.n_ctx", "context.n_batch", "context.flash_attn"),
    "openvino": ("context.n_ctx", "cache.block_size", "openvino.device",
                 "openvino.max_num_batched_tokens", "openvino.cache_size_gb"),
}


def _settings(backend: str, values: dict[str, Any]) -> str:
    keys = _HEADER_KEYS.get(backend, _HEADER_KEYS["llama"])
    return ", ".join(f"{k.split('.', 1)[1]} {values.get(k)}" for k in keys)


def _backend(r: dict[str, Any]) -> str:
    prof = r["profile"]
    return str(prof.get("backend") or prof.get("values", {}).get("profile.backend") or "llama")


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return [*out, ""]


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    backend = _backend(r)
    lines = [
        "# contenox-lsp bench report",
        "",
        f"Backend **{backend}** (sections 1–4 and the trace's servers; section 5 runs both). "
        f"Mode `{r['mode']}`, {r['started_at']}, {r['duration_s']:.0f} s. "
        f"{m['cpu_count']} CPUs, load average {m['loadavg_start']} at start and "
        f"{m['loadavg_end']} at the end (other work on the machine slows every system alike). "
        f"Profile `{r['profile']['profile_id']}`, model {r['profile']['model']}; "
        f"{_settings(backend, r['profile'].get('values', {}))}. Timings are medians "
        "(min–max, n = repetitions); ratios come from this run only.",
        "",
        "## Goals",
        "",
    ]
    lines += _table(["goal", "measured", "status"],
                    [[g["goal"], g["measured"] + (f" — {g['note']}" if g["note"] else ""),
                      _met(g)] for g in r["goals"]])
    s = r["sections"]
    lines += _runtime(s["runtime"]) + _curve(s["curve"]) + _trace(s["trace"])
    lines += _scaling(s["scaling"])
    lines += _backends(s.get("backends", {"status": "not run"}))
    lines += _drift(s.get("drift", {"status": "not run"}))
    lines += _typing(s.get("typing", {"status": "not run"}))
    lines += _restart(s.get("restart", {"status": "not run"}))
    lines += remote_bench.markdown(s.get("remote", {"status": "not run"}))
    lines += schedule.markdown(s.get("schedule", {"status": "not run"}))
    lines += _next_edit(s.get("next_edit", {"status": "not run"}))
    lines += fleet_bench.markdown(s.get("fleet", {"status": "not run"}))
    lines += bigrepo.markdown(s.get("bigrepo", {"status": "not run"}))
    if r.get("plots"):
        lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in r["plots"].items()] + [""]
    return "\n".join(lines)


def _status(title: str, sec: dict[str, Any]) -> list[str] | None:
    if sec.get("status") == "ok":
        return None
    return [f"## {title}", "", f"Section {sec.get('status', 'not run')}.", ""]


def _runtime(sec: dict[str, Any]) -> list[str]:
    head = _status("1. Runtime report", sec)
    if head:
        return head
    out = ["## 1. Runtime report", "",
           f"Stable prefix {sec['prefix_tokens']} tokens, changed suffix {sec['suffix_tokens']} "
           f"tokens; warm == cold compares {sec['greedy_tokens']} greedy tokens with a cold run "
           f"of the same prompt. Cold TTFT of the full prompt: "
           f"{_ms(sec['cold_full_prompt_ttft_ms'])} ms.", ""]
    rows = []
    for row in sec["rows"]:
        if is_not_applicable(row):
            rows.append([row["label"], "–", "–", "–", row["status"], row["check"]])
            continue
        extra = ""
        if "tokens_per_s" in row:
            extra = _stat(row["tokens_per_s"], lambda x: _num(x, 1)) + " tokens/s"
        if row.get("bytes") is not None:
            extra = f"{row['bytes'] / 2**20:.1f} MiB"
        if row["name"] == "snapshot_restore":
            extra += f"; re-prefill {_stat(row['reprefill_ms'])} ms"
        if row["name"] == "decode":
            extra += f"; step {_stat(row['step_ms'])} ms"
        rows.append([row["label"], _tok(row.get("tokens")), _stat(row.get("ms")),
                     _stat(row.get("ttft_ms")), extra, row["check"]])
    oh = sec.get("overhead")
    if oh and is_not_applicable(oh):
        rows.append(["engine cold prefill vs a bare llama-cpp-python loop", "–", "–", "–",
                     oh["status"], "n/a"])
    elif oh:
        rows.append([f"engine cold prefill, paired ({oh['tokens']} tokens)",
                     f"0 / {oh['tokens']}", _stat(oh["engine_ms"]), "–",
                     _stat(oh["engine_tokens_per_s"], lambda x: _num(x, 1)) + " tokens/s", "n/a"])
        rows.append([f"bare llama-cpp-python loop, paired ({oh['tokens']} tokens)",
                     f"0 / {oh['tokens']}", _stat(oh["bare_ms"]), "–",
                     _stat(oh["bare_tokens_per_s"], lambda x: _num(x, 1)) + " tokens/s"
                     + f"; engine/bare time {_stat(oh['engine_over_bare_time'], _r3)}", "n/a"])
    out += _table(["measurement", "reused / new tokens", "prefill or op ms", "TTFT ms",
                   "other", "warm == cold"], rows)
    frows = []
    for f in sec["failures"]:
        if is_not_applicable(f):
            frows.append([f["label"], f["status"], "–", f["check"]])
            continue
        if f["name"] == "cancelled_prefill":
            what = (f"cancel latency {_stat(f['cancel_latency_ms'])} ms; committed "
                    f"{f['committed_tokens']}; missed {f['missed']}")
            recover = _stat(f["recover_ttft_ms"])
        else:
            what = (f"rejected with `{f['error_code']}` in {_stat(f['reject_ms'])} ms; "
                    f"state unchanged: {f['state_unchanged']}")
            recover = "–"
        frows.append([f["label"], what, recover, f["check"]])
    out += _table(["failure case", "outcome", "TTFT of the next request ms",
                   "warm == cold after"], frows)
    return out


def _curve(sec: dict[str, Any]) -> list[str]:
    head = _status("2. Suffix-growth curve", sec)
    if head:
        return head
    out = ["## 2. Suffix-growth curve", "",
           f"Stable prefix {sec['stable_prefix_tokens']} tokens; one decode step "
           f"{_ms(sec['decode_step_ms'])} ms. Goal bound = 1.2 × changed/total × cold + one "
           "decode step." + (f" Skipped: {sec['skipped_points']} ({sec['skipped_reason']})."
                             if sec["skipped_points"] else ""), ""]
    rows = [[str(r["changed_tokens"]), str(r["total_tokens"]), _stat(r["warm_ttft_ms"]),
             _stat(r["cold_ttft_ms"]), _num(r["warm_over_cold"], 3), _ms(r["goal_bound_ms"]),
             {True: "yes", False: "no", None: "–"}[r["goal_met"]], r["first_token_check"]]
            for r in sec["rows"]]
    return out + _table(["changed tokens", "total", "warm TTFT ms", "cold TTFT ms",
                         "warm / cold", "bound ms", "within bound", "first token warm == cold"],
                        rows)


def _trace(sec: dict[str, Any]) -> list[str]:
    head = _status("3. Edit-trace replay", sec)
    if head:
        return head
    t = sec["targets"]
    out = ["## 3. Edit-trace replay", "",
           f"Workspace: {sec['workspace']}; body edits in `{t['edit_file']}` "
           f"({', '.join(t['functions'])}), signature change of `{t['signature_function']}` in "
           f"`{t['signature_file']}`, pin `{t['pin_file']}`. Idle gap before each ask "
           f"{sec['settings']['idle_gap_s']} s, one didChange per character every "
           f"{sec['settings']['keystroke_s']} s, debounce {sec['settings']['debounce_ms']} ms. "
           f"Server start until ready: a {_num(sec['startup_s']['a'])} s, "
           f"b {_num(sec['startup_s']['b'])} s. {sec['ttft_definition']}.", ""]
    for k, v in sec["systems"].items():
        out.append(f"- **{k}**: {v}")
    out.append("")
    rows = []
    for s in sec["steps"]:
        rows.append([s["step"], str(s["prompt_tokens"])] + [
            f"{_ms(s[k]['ttft_ms'])} ({s[k]['new_tokens']})" for k in "abcd"
        ] + [f"{s['a']['state_before_ask']}, {s['a']['pending_prefill_tokens_before_ask']}"])
    rows.append(["**median**", ""] + [_stat(sec["ttft_ms"][k]) for k in "abcd"] + [""])
    out += _table(["step", "prompt tokens", "a ms (new tokens)", "b ms (new)", "c ms (new)",
                   "d ms (new)", "a: state, pending tokens before ask"], rows)
    r, nr = sec["ratios"], sec["new_token_ratios"]
    out += [f"Ratios of median TTFT: a/c = {_num(r['a_over_c'], 3)}, a/d = "
            f"{_num(r['a_over_d'], 3)}, b/d = {_num(r['b_over_d'], 3)}. The same ratios of the "
            f"median tokens prefilled at ask time (the work, independent of machine load): "
            f"a/c = {_num(nr['a_over_c'], 3)}, a/d = {_num(nr['a_over_d'], 3)}, "
            f"b/d = {_num(nr['b_over_d'], 3)}. The user turn (the question, never "
            f"pre-prefilled) is {_stat(sec['user_turn_tokens'], _r0)} tokens.", ""]
    oh = sec.get("ask_overhead_ms")
    if oh:
        out += [f"Per-ask overhead beside the model's work (client TTFT − the engine's TTFT: "
                f"assembly, JSON-RPC, scheduling): a {_stat(oh['a'])} ms, b {_stat(oh['b'])} "
                "ms.", ""]
    if sec["prompt_rebuild_mismatches"]:
        out += [f"Prompt rebuilt for c/d differs in length at: {sec['prompt_rebuild_mismatches']}",
                ""]
    return out


def _scaling(sec: dict[str, Any]) -> list[str]:
    head = _status("4. Scaling note", sec)
    if head:
        return head
    rows = [[str(r["stable_tokens"]), _stat(r["warm_ttft_ms"]), _stat(r["cold_ttft_ms"]),
             _num(r["warm_over_cold"], 3),
             _num(r["kv_state_bytes"] / 2**20 if r.get("kv_state_bytes") is not None else None),
             _num(r["kv_bytes_per_token"] / 1024 if r["kv_bytes_per_token"] else None, 1),
             _num(r["kv_marginal_bytes_per_token"] / 1024
                  if r.get("kv_marginal_bytes_per_token") else None, 2),
             "–" if r["process_rss_bytes"] is None else f"{r['process_rss_bytes'] / 2**20:.0f}"]
            for r in sec["rows"]]
    out = ["## 4. Scaling note", "",
           f"A new {sec['rows'][0]['question_tokens'] if sec['rows'] else 0}-token question "
           "after a stable context of each size (warm: context resident; cold: everything "
           f"prefilled). {sec['note']}", ""]
    out += _table(["stable tokens", "warm TTFT ms", "cold TTFT ms", "warm / cold",
                   "KV state MiB", "KV KiB / token", "KV KiB per added token",
                   "process RSS MiB"], rows)
    kv = sec.get("kv_state_status", "ok")
    if kv != "ok":
        caches = "; ".join(
            f"{r['stable_tokens']}: "
            + ", ".join(_figure(k, v) for k, v in r["engine_cache"].items())
            for r in sec["rows"] if r.get("engine_cache"))
        out += [f"KV state columns: {kv}."
                + (f" The backend's own cache figures after the cold prefill — {caches}."
                   if caches else ""), ""]
    return out


def _figure(key: str, value: float | None) -> str:
    if key.endswith("_bytes"):
        mib = None if value is None else value / 2**20
        return f"{key.removesuffix('_bytes').removesuffix('_in')} {_num(mib, 0)} MiB"
    return f"{key} {_num(value, 2)}"


_BACKEND_FMT: dict[str, Any] = {"tokens/s": lambda x: _num(x, 1), "ms": _ms,
                                "MiB": lambda x: _num(x, 0)}


def _backends(sec: dict[str, Any]) -> list[str]:
    title = "## 5. Backends: llama.cpp vs OpenVINO"
    if not sec.get("rows"):
        return [title, "", f"Section {sec.get('status', 'not run')}.", ""]
    b = sec["backends"]
    out = [title, ""]
    if sec.get("status") != "ok":
        out += [f"Section {sec['status']}.", ""]
    out += [f"Models — llama.cpp: {b['llama'].get('model') or '–'}; OpenVINO: "
            f"{b['openvino'].get('model') or '–'}. cache.block_size {sec['block_size']} on both. "
            f"Warm row: a stable prefix of at most {sec['prefix_tokens']} tokens and a changed "
            f"suffix of about {sec['suffix_tokens']} tokens. {sec['note']}", ""]
    rows = []
    for row in sec["rows"]:
        fmt = _BACKEND_FMT.get(row["unit"], _ms)
        cells = [fmt(row[n]["median"]) if row.get(n, {}).get("n") == 1 else _stat(row.get(n), fmt)
                 for n in ("llama", "openvino")]
        r = row.get("ov_over_llama")
        rows.append([f"{row['label']} ({row['unit']})", *cells,
                     "–" if r is None else f"{r:.2f}"])
    out += _table(["row", "llama.cpp", "OpenVINO", "OV/llama ratio"], rows)
    warm = next((r for r in sec["rows"] if r["name"] == "warm_suffix_ttft"), None)
    if warm:
        reuse = "; ".join(
            f"{label}: reused/new {_pairs(warm['reused_tokens'].get(n), warm['new_tokens'].get(n))}"
            f", warm/cold {_num(warm['warm_over_cold'].get(n), 3)}"
            for n, label in (("llama", "llama.cpp"), ("openvino", "OpenVINO")))
        out += [f"Warm changed suffix — {reuse}.", ""]
    same = {True: "**yes**", False: "**no**", None: "not compared"}[sec.get("same_tokens")]
    diff = sec.get("first_difference")
    g = sec["greedy"]
    out += [f"Same token ids from the assembler on both backends: {same} "
            f"({sec.get('prompts_compared', 0)} prompts)"
            + (f"; first difference in `{diff['step']}` at token {diff['at']}" if diff else "")
            + f". Greedy first token equal on {g['first_tokens_equal']} of "
            f"{g['prompts_compared']} prompts; first {g['tokens']} tokens equal on all: "
            f"{ {True: 'yes', False: 'no', None: '–'}[g['all_equal']] } (recorded, not a check: "
            "the GGUF's and the IR's quantizations differ).", ""]
    mem = "; ".join(
        f"{label}: peak {_mib_s(b[n].get('peak_rss_bytes'))} MiB, after load "
        f"{_mib_s(b[n].get('rss_after_load_bytes'))} MiB, load {_num(b[n].get('load_s'), 1)} s"
        for n, label in (("llama", "llama.cpp"), ("openvino", "OpenVINO")))
    ms = sec.get("memory_settings")
    if ms:
        mem += (f" (n_ctx {ms['context.n_ctx']}; openvino.cache_size_gb "
                f"{ms['openvino.cache_size_gb']})")
    out += [f"Memory — {mem}. {sec['memory_note']}", ""]
    return out


def _pairs(reused: list[int] | None, new: list[int] | None) -> str:
    if not reused or not new:
        return "–"
    return ", ".join(f"{r}/{n}" for r, n in zip(reused, new, strict=False))


def _mib_s(x: float | None) -> str:
    return "–" if x is None else f"{x / 2**20:,.0f}"


def _typing(sec: dict[str, Any]) -> list[str]:
    head = _status("7. Typing trace: inline completion", sec)
    if head:
        return head
    lines = [
        "## 7. Typing trace: inline completion",
        "",
        f"The last {sec['lines_typed']} lines of a real function body typed back character by "
        f"character, a completion request at each pause: {sec['requests']} requests, "
        f"{sec['model_calls']} model calls ({sec.get('speculation_hits', 0)} of them started "
        f"by the keystroke, before the request), {sec['typed_through']} typed-through, "
        f"{sec['accepted']} suggestions accepted. Latency: a client-side round trip; c, d: "
        "in-process prefill + decode of the same number of tokens.",
        "",
    ]
    rows = []
    for key in ("a", "c", "d"):
        x = sec[key]
        rows.append([f"{key}. {sec['systems'][key]}", _stat(x["latency_ms"]),
                     _r0(x.get("p95_ms")), _stat(x["new_tokens"], _r0)])
    lines += _table(["system", "latency ms (p50)", "p95 ms", "tokens prefilled"], rows)
    e = sec["engine"]
    lines += ["", f"Engine costs from c: {e['prefill_ms_per_token']:.2f} ms per prefilled "
                  f"token, {e['decode_ms_per_token']:.2f} ms per decoded token.", ""]
    return lines


def _next_edit(sec: dict[str, Any]) -> list[str]:
    title = "11. Next-edit trace: real commits replayed"
    head = _status(title, sec)
    if head:
        return head
    ev = sec["eval"]
    lines = [
        f"## {title}",
        "",
        f"{sec['tasks']} commit(s) of this repository (`contenox_bench/data/next_edit_tasks.json`) "
        f"typed back hunk by hunk as an editor's edit stream, a `contenox/nextEdit` after each: "
        f"{sec['requests']} requests, {sec['model_calls']} model calls, {sec['warm_requests']} "
        f"after the idle warm-up. Suggestions shown {ev['shown']}, exact match with the next "
        f"hunk {ev['exact']}/{ev['scored']}, reversals dropped {ev['reversals']} (the embedded "
        "base model is not a next-edit model: these show the machinery, not the quality). "
        "Latency: a client-side round trip; c, d: in-process prefill + decode of the same "
        "number of tokens.",
        "",
    ]
    rows = []
    for key in ("a", "c", "d"):
        x = sec[key]
        rows.append([f"{key}. {sec['systems'][key]}", _stat(x["latency_ms"]),
                     _stat(x["new_tokens"], _r0)])
    lines += _table(["system", "latency ms (p50)", "tokens prefilled"], rows)
    pb, e, lk = sec["prefill_bound"], sec["engine"], sec["lookup"]
    lines += [
        "",
        f"Tokens prefilled by a (median) {_r0(pb['median_new_tokens'])} against the bound "
        f"(region + the newest history step + 32) {_r0(pb['median_bound'])}. Engine costs from "
        f"c: {e['prefill_ms_per_token']:.2f} ms per prefilled token, "
        f"{e['decode_ms_per_token']:.2f} ms per decoded token.",
        "",
        f"Prompt lookup on c's prompts ({lk['tokens']} tokens decoded each way): "
        f"{_r0(lk['plain_decode_ms'])} ms plain, {_r0(lk['lookup_decode_ms'])} ms with lookup "
        f"({lk['speedup'] if lk['speedup'] is None else round(lk['speedup'], 2)}×), drafted "
        f"{lk['drafted']}, accepted {lk['accepted']}; tokens that differ from the plain loop: "
        f"{lk['differing_tokens']} (in {lk['requests_with_differences']} of the requests).",
        "",
    ]
    return lines


def _restart(sec: dict[str, Any]) -> list[str]:
    head = _status("8. Restart and follow-up", sec)
    if head:
        return head
    lines = [
        "## 8. Restart and follow-up",
        "",
        "A warm ask; the first ask after shutting that server down and starting another on "
        "the same workspace and caches (asked as soon as the model is loaded and the index "
        "built); the same on a cold start with `autoSnapshots` off. TTFT: "
        f"{sec['ttft_definition']}.",
        "",
    ]
    rows = []
    for r in sec["rows"]:
        for name, key in (("warm ask", "warm"), ("first ask after a restart", "restart"),
                          ("first ask, cold start", "cold_start")):
            a = r[key]
            rows.append([str(r["stable_tokens"]), name, _r0(a["ttft_ms"]),
                         f"{a['reused_tokens']}/{a['prompt_tokens']}"])
    lines += _table(["stable tokens", "ask", "TTFT ms", "reused/prompt"], rows)
    fu = sec.get("follow_up")
    if fu:
        lines += ["", "Follow-up in a conversation (after the idle prefill warmed the answer) "
                      "against the same question as a new conversation:", ""]
        lines += _table(["ask", "TTFT ms", "tokens prefilled", "reused/prompt"], [
            [name, _r0(fu[key]["ttft_ms"]), str(fu[key]["new_tokens"]),
             f"{fu[key]['reused_tokens']}/{fu[key]['prompt_tokens']}"]
            for name, key in (("first question", "first"), ("follow-up", "follow_up"),
                              ("same, new conversation", "new_conversation"))])
    return [*lines, ""]


def _drift(sec: dict[str, Any]) -> list[str]:
    head = _status("6. Drift: warm vs cold per reuse path", sec)
    if head:
        return head
    lines = [
        "## 6. Drift: warm vs cold per reuse path",
        "",
        f"Prefix {sec['prefix_tokens']} tokens; each warm run against a cold run of the same "
        f"prompt on the same session: first sampled token, identical greedy tokens of "
        f"{sec['n_tokens']}, largest |Δ| of the first position's logits. Exact reuse "
        "(`cache.exact_reuse = true`, the default) is expected to show 0 everywhere; "
        "token-granular reuse on one shared KV pool is round 1's engine.",
        "",
    ]
    rows = []
    for mode in sec["modes"]:
        for row in mode["rows"]:
            rows.append([
                f"{mode['mode']} (unit {mode['reuse_granularity']})", row["path"],
                f"{row['reused_tokens']}/{row['prompt_tokens']}",
                "yes" if row["first_token_agrees"] else "**no**",
                f"{row['identical_prefix']}/{sec['n_tokens']}",
                f"{row['max_abs_dlogit']:.4g}",
            ])
    lines += _table(["reuse", "path", "reused/prompt", "first token", "identical greedy",
                     "max abs Δlogit"], rows)
    return [*lines, ""]
