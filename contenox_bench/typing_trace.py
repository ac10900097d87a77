"""Section 7: the typing trace — inline completion while a function body is typed.

The end of a real function body (``json/decoder.py``'s ``JSONDecoder.decode``) is removed and
typed back character by character (one ``didChange`` each, the editor's auto-indent giving
each new line its indentation at once), with a completion request at each pause (after a
word, a bracket, a comma, the end of a line: where an editor's debounce would fire). A
suggestion that is the start of what comes next is accepted, as a user would.

a. this server over stdio (``textDocument/inlineCompletion``; the client declares inline
   completion, as VS Code does, so the idle time warms the completion prompt at the cursor;
   the keystroke before each pause starts the completion there as speculation); its
   per-request prefill figures come from ``contenox/status``.
c. a fresh context per request: the same prompts (this server's layout, rebuilt in process
   from the same repository text), prefilled from nothing, the same number of tokens decoded.
d. one longest-common-prefix session fed the llama.vscode request shape: a ring of 64-line
   chunks of other files first, then the 256 lines before the cursor, the 64 after it and the
   current line up to the cursor last, as llama-server's ``/infill`` lays it out (the
   ``--- snippet ---`` separator when the model has no FIM repository tokens; without FIM
   tokens at all the text after the cursor cannot be placed, and is left out).

c and d run on an engine session of the same profile, after a's server has exited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lsprotocol import types

from contenox_bench.config import BenchConfig
from contenox_bench.lspclient import EditorClient, first_item_text
from contenox_bench.progress import Progress
from contenox_bench.stats import engine_costs, expected_ms, quantile, ratio, summary
from contenox_bench.trace import wait_ready
from contenox_bench.trace_script import copy_stdlib_part
from contenox_lsp.completion.prompt import build_prompt
from contenox_lsp.completion.window import cursor_window

log = logging.getLogger(__name__)

TARGET = "json/decoder.py"
FUNCTION = "    def decode(self, s, _w=WHITESPACE.match):"
PAUSE_AFTER = set(" ().,:[]=")
RING_CHUNK_LINES = 64
RING_FILES = ("json/__init__.py", "json/scanner.py", "json/encoder.py")
BEFORE_LINES, AFTER_LINES = 256, 64

SYSTEMS = {
    "a": "contenox, inline completion on the warm session",
    "c": "fresh context per request (same prompts)",
    "d": "longest-common-prefix session, llama.vscode request shape",
}


def planned_units(cfg: BenchConfig) -> int:
    return 3


@dataclass
class Request:
    line: int  # 0-based
    column: int
    text_before: str  # the whole document text at the request


def _script(text: str, n_lines: int) -> tuple[str, list[str], int]:
    """The document with the last ``n_lines`` of the target body removed, those lines, and
    the 0-based line where typing starts."""
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if ln == FUNCTION)
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("        ")):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    body = lines[end - n_lines:end]
    kept = [*lines[: end - n_lines], "", *lines[end:]]
    return "\n".join(kept), body, end - n_lines


def run(cfg: BenchConfig, profile: Any, profile_file: Path, out_dir: Path, tmp: Path,
        progress: Progress) -> dict[str, Any]:
    if profile.backend != "llama":
        return {"status": f"not applicable: the {profile.backend} backend (completion branches "
                          "and exact reuse are llama.cpp's)"}
    tc = cfg.typing
    root = copy_stdlib_part(tmp / "typing")
    path = root / TARGET
    doc, body, first_line = _script(path.read_text("utf-8"), tc.lines)
    path.write_text(doc, "utf-8")
    options = {"profile": str(profile_file), "debounceMs": 300,
               "repoMapTokens": tc.repo_map_tokens, "logLevel": "warning"}
    progress.note("typing a: starting the server")
    with open(out_dir / "typing-server.log", "w", encoding="utf-8") as err:
        a = asyncio.run(_server(root, path, doc, body, first_line, options, tc.pause_s, err))
    progress.step("typing a done")
    c, d = _baselines(profile, root, path, a, progress)
    return _report(a, c, d, tc)


async def _server(root: Path, path: Path, doc: str, body: list[str], first_line: int,
                  options: dict[str, Any], pause_s: float, err: Any) -> dict[str, Any]:
    client = EditorClient(err)
    await client.start(root, options, inline_completion=True)
    rows: list[dict[str, Any]] = []
    context_text = ""
    try:
        client.did_open(path, doc)
        await wait_ready(client, True, 900.0)
        lines = doc.split("\n")
        # The user puts the cursor on the line to type and the editor indents it: the server
        # knows where the user is (an edit there) before the first keystroke, and the idle
        # time warms the completion prompt there too (the client declares inline completion).
        first_indent = body[0][: len(body[0]) - len(body[0].lstrip())]
        client.did_change(path, first_line, 0, first_indent)
        lines[first_line] = first_indent
        await wait_ready(client, True, 900.0)
        explained = await client.request("contenox/explainContext", {"includeText": True})
        context_text = "".join(s.get("text", "") for s in explained["segments"]
                               if s["kind"] in ("repo_map", "pinned"))
        row = first_line
        for target in body:
            indent = target[: len(target) - len(target.lstrip())]
            if lines[row] not in ("", indent):
                raise AssertionError("the typing line is not empty")
            if lines[row] != indent:
                client.did_change(path, row, 0, indent)  # the editor's auto-indent
                lines[row] = indent
            col = len(indent)
            rest = target[len(indent):]
            i = 0
            while i < len(rest):
                ch = rest[i]
                client.did_change(path, row, col, ch)
                lines[row] += ch
                col += 1
                i += 1
                if ch in PAUSE_AFTER or i == len(rest):
                    await asyncio.sleep(pause_s)
                    r = await _complete(client, path, row, col, "\n".join(lines))
                    rows.append(r)
                    suggestion = r["text"] or ""
                    if len(suggestion) >= 2 and rest[i:].startswith(suggestion):
                        client.did_change(path, row, col, suggestion)  # accepted
                        lines[row] += suggestion
                        col += len(suggestion)
                        i += len(suggestion)
                        r["accepted"] = True
            # Enter: a new empty line for the next target line.
            client.did_change(path, row, col, "\n")
            lines.insert(row + 1, "")
            row += 1
        status = await client.request("contenox/status", None)
    finally:
        await client.close()
    return {"rows": rows, "context_text": context_text, "status": status.get("completion")}


async def _complete(client: EditorClient, path: Path, line: int, col: int,
                    text: str) -> dict[str, Any]:
    before = (await client.request("contenox/status", None))["completion"]
    params = types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()),
        position=types.Position(line=line, character=col),
        context=types.InlineCompletionContext(
            trigger_kind=types.InlineCompletionTriggerKind.Automatic),
    )
    t0 = time.perf_counter()
    result = await client.request(types.TEXT_DOCUMENT_INLINE_COMPLETION, params, 300)
    latency = (time.perf_counter() - t0) * 1000.0
    after = (await client.request("contenox/status", None))["completion"]

    typed_through = after["typedThrough"] > before["typedThrough"]
    speculated = after["speculationHits"] > before["speculationHits"]
    model_call = after["requests"] > before["requests"]
    return {
        "line": line, "column": col, "document": text,
        "latency_ms": latency,
        "text": first_item_text(result),
        "typed_through": typed_through,
        "speculated": speculated,  # answered by the run the keystroke started
        "new_tokens": after["lastNewTokens"] if model_call else 0,
        "prompt_tokens": after["lastPromptTokens"] if model_call else None,
        "decode_tokens": after["lastDecodeTokens"] if model_call else 0,
        "accepted": False,
    }


def _baselines(profile: Any, root: Path, path: Path, a: dict[str, Any],
               progress: Progress) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from engine import open_session

    rel = path.relative_to(root).as_posix()
    ring = _ring(root)
    c_rows: list[dict[str, Any]] = []
    d_rows: list[dict[str, Any]] = []
    with open_session(profile) as session:
        model_rows = [r for r in a["rows"] if not r["typed_through"]]
        for r in model_rows:
            win = cursor_window(r["document"], r["line"], r["column"])
            prompt = build_prompt(session, a["context_text"], rel, win, "prefix")
            session.reset()
            n = max(1, int(r["decode_tokens"] or 1))
            c_rows.append(_timed(session, prompt.tokens, n))
        progress.step("typing c done")
        session.reset()
        for r in model_rows:
            n = max(1, int(r["decode_tokens"] or 1))
            d_rows.append(_timed(session, _vscode_prompt(session, ring, r), n))
        progress.step("typing d done")
    return c_rows, d_rows


def _timed(session: Any, tokens: list[int], n: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    pre = session.prefill(tokens)
    gen = session.generate(n)
    return {"latency_ms": (time.perf_counter() - t0) * 1000.0, "prefill_ms": pre.prefill_ms,
            "new_tokens": pre.new_tokens, "prompt_tokens": len(tokens),
            "decode_tokens": gen.decode_tokens, "decode_ms": gen.decode_ms}


def _ring(root: Path) -> list[str]:
    """The llama.vscode ring: 64-line chunks of other files (recently opened/yanked text)."""
    chunks = []
    for name in RING_FILES:
        lines = (root / name).read_text("utf-8").split("\n")
        chunks.append("\n".join(lines[:RING_CHUNK_LINES]))
    return chunks


def _vscode_prompt(session: Any, ring: list[str], r: dict[str, Any]) -> list[int]:
    lines = r["document"].split("\n")
    line, col = r["line"], r["column"]
    before = "\n".join(lines[max(0, line - BEFORE_LINES):line]) + "\n"
    current = lines[line][:col]
    text = "".join(f"--- snippet ---\n{chunk}\n" for chunk in ring) + before + current
    bos = [session.bos_token_id] if session.bos_token_id is not None else []
    return bos + list(session.tokenize(text, add_bos=False, special=False))


def _system(rows: list[dict[str, Any]]) -> dict[str, Any]:
    lat = [x["latency_ms"] for x in rows]
    return {"latency_ms": summary(lat, "ms"), "p95_ms": quantile(lat, 0.95),
            "new_tokens": summary([float(x["new_tokens"]) for x in rows], "tokens")}


def _report(a: dict[str, Any], c: list[dict[str, Any]], d: list[dict[str, Any]],
            tc: Any) -> dict[str, Any]:
    rows = a["rows"]
    lat_a = [r["latency_ms"] for r in rows]
    new_a = [float(r["new_tokens"]) for r in rows]
    model_rows = [r for r in rows if not r["typed_through"]]
    # The engine's own costs, from c (same prompts, same engine): per prefilled token and per
    # decoded token.
    costs = engine_costs(c)
    prefill_tok_ms, decode_tok_ms = costs
    expected = [expected_ms(r["new_tokens"], r["decode_tokens"], costs)
                for r in model_rows]
    p50_a = quantile(lat_a, 0.5)
    p50_d = quantile([x["latency_ms"] for x in d], 0.5)
    p50_expected = quantile(expected, 0.5)
    return {
        "status": "ok",
        "systems": SYSTEMS,
        "requests": len(rows),
        "model_calls": len(model_rows),
        "typed_through": sum(1 for r in rows if r["typed_through"]),
        "speculation_hits": sum(1 for r in rows if r.get("speculated")),
        "accepted": sum(1 for r in rows if r["accepted"]),
        "lines_typed": tc.lines,
        "a": {"latency_ms": summary(lat_a, "ms"), "p95_ms": quantile(lat_a, 0.95),
              "new_tokens": summary(new_a, "tokens"),
              "decode_tokens": summary([float(r["decode_tokens"]) for r in model_rows],
                                       "tokens")},
        "c": _system(c),
        "d": _system(d),
        "engine": {"prefill_ms_per_token": prefill_tok_ms, "decode_ms_per_token": decode_tok_ms,
                   "expected_p50_ms": p50_expected},
        "ratios": {
            "a_p50_over_expected": ratio(p50_a, p50_expected),
            "d_p50_over_a_p50": ratio(p50_d, p50_a),
        },
        "server_completion_status": a["status"],
    }
