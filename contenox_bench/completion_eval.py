"""``contenox-lsp eval completion``: CrossCodeEval-style tasks (``completion_tasks``) answered
by the real server and, on the same model in process, by two baselines: the window-only
prompt, and the window with the top-4 BM25 chunks of similar code from other files
(CrossCodeEval's retrieval baseline).

For each task the file is open in the server as the developer has it while typing the line:
the line ends at the cursor (the rest of the file is there). Once the server is warm on that
text (a pause: its idle time prefilled the chat prefix and the completion prompt at the
cursor), one ``textDocument/inlineCompletion`` at the cursor; its first line is the answer.
The window-only baseline builds the server's own completion prompt with no repository context
(the cursor window alone), decodes it greedily as the server does (without its time budget:
the baseline's prefill is cold) and post-processes it the same way. The BM25 baseline does the
same with a repository part of the 4 definition-sized chunks of other files whose words best
match the 12 lines above the cursor (``CodeFinder.similar`` over an index of the repository
with the task's file as typed), the first 24 lines of each under its path's header, in the
server's room for code (``retrieval.BUDGET_CHARS``: a chunk that would pass it is left out, as
the server leaves it; a chunk of long lines, a data table, otherwise overflows the context).
Scores, on the first line with blanks trimmed: exact match, edit similarity
(``rapidfuzz.fuzz.ratio``, CrossCodeEval's), identifier match (the answer starts with the
imported identifier the line uses).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import IO, Any

from lsprotocol import types

from contenox_bench.completion_tasks import CompletionTask
from contenox_bench.ctxeval_metrics import bootstrap, mean
from contenox_bench.lspclient import EditorClient, first_item_text
from contenox_bench.trace import wait_ready
from contenox_lsp.completion import retrieval
from contenox_lsp.completion.decode import decode_completion
from contenox_lsp.completion.postprocess import finish
from contenox_lsp.completion.prompt import RepoContext, build_prompt, choose_mode, file_header, heal
from contenox_lsp.completion.retrieval import BUDGET_CHARS, place_of
from contenox_lsp.completion.window import cursor_window
from contenox_lsp.turn import read_disk_text

SYSTEMS = ("server", "window", "bm25")
#: Similar chunks the BM25 baseline shows, and the lines shown of each.
BM25_CHUNKS = 4
BM25_LINES = 24
#: What ``contenox/status`` says of the last completion's prompt, kept per task.
PROMPT_FACTS = ("lastContextFiles", "lastNewTokens", "lastDecodeTokens")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def typed_text(text: str, task: CompletionTask) -> str:
    """The file as it is while the line is being typed: the line ends at the cursor."""
    lines = text.split("\n")
    lines[task.line] = lines[task.line][: task.character]
    return "\n".join(lines)


def first_line(answer: str | None) -> str:
    return "" if answer is None else answer.split("\n", 1)[0].strip()


def score(answer: str | None, task: CompletionTask) -> dict[str, Any]:
    from rapidfuzz import fuzz

    got, want = first_line(answer), task.expected.strip()
    ident = _IDENT.match(got)
    return {"answer": got, "exact": got == want, "edit_similarity": round(fuzz.ratio(got, want), 2),
            "identifier": ident is not None and ident.group(0) == task.identifier}


async def server_answers(root: Path, tasks: list[CompletionTask], options: dict[str, Any],
                         err: IO[str]) -> list[tuple[str | None, dict[str, Any]]]:
    """The server's first completion at each task's cursor, with what its status said of
    that completion's prompt (the code it carried, the tokens it prefilled and decoded)."""
    client = EditorClient(err)
    await client.start(root, options, inline_completion=True)
    answers: list[tuple[str | None, dict[str, Any]]] = []
    opened: dict[Path, str] = {}
    try:
        await wait_ready(client, False, 900.0)
        for task in tasks:
            path = root / task.path
            if path not in opened:
                opened[path] = path.read_text(encoding="utf-8")
                client.did_open(path, opened[path])
            line = opened[path].split("\n")[task.line]
            tail = line[task.character:]
            end = len(line.encode("utf-16-le")) // 2  # LSP positions count UTF-16 units
            client.did_replace(path, (task.line, task.character), (task.line, end), "")
            # The developer paused: the idle time has warmed the prompt at the cursor (else the
            # first completion in a new place spends its time budget on the prefill).
            await wait_ready(client, True, 300.0, idle_done=True)
            out = await client.request(types.TEXT_DOCUMENT_INLINE_COMPLETION,
                                       types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=path.as_uri()),
                position=types.Position(line=task.line, character=task.character),
                context=types.InlineCompletionContext(
                    trigger_kind=types.InlineCompletionTriggerKind.Invoked)), 600)
            status = (await client.request("contenox/status", None))["completion"]
            answers.append((first_item_text(out), {k: status.get(k) for k in PROMPT_FACTS}))
            client.did_change(path, task.line, task.character, tail)  # the line as it was
    finally:
        await client.close()
    return answers


def bm25_context(finder: Any, place: retrieval.Place) -> RepoContext:
    """The BM25 baseline's repository part at a task's ``place``."""
    code: list[tuple[str, str]] = []
    used = 0
    for s in finder.similar(place.above, skip_path=place.path, limit=BM25_CHUNKS * 2):
        text = "".join(t + "\n" for _, t in s.lines[:BM25_LINES])
        if len(code) < BM25_CHUNKS and used + len(text) <= BUDGET_CHARS:
            code.append((s.display, text))
            used += len(text)
    code.reverse()  # the best nearest the window
    return RepoContext("".join(file_header(p) + c for p, c in code), tuple(code))


def baseline_answers(session: Any, root: Path, tasks: list[CompletionTask],
                     with_bm25: bool) -> tuple[list[str | None], list[list[str]]]:
    """A baseline's completion at each task's cursor: the server's prompt with no repository
    part (``with_bm25`` False) or with the BM25 one, decoded and post-processed as the server
    does. With BM25, also the files the server's own retrieval chooses for each task's place
    (``retrieval.retrieve`` on the same index): what the server's prompt should carry there."""
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder, texts_reader

    profile = session.profile
    mode = choose_mode(profile.completion_mode, session.fim_tokens)
    index = finder = None
    if with_bm25:
        index = RepoIndex([root], use_cache=False)
        index.build()
        finder = CodeFinder(index, read_disk_text)
    answers: list[str | None] = []
    chosen: list[list[str]] = []
    for task in tasks:
        original = (root / task.path).read_text(encoding="utf-8")
        text = typed_text(original, task)
        win = cursor_window(text, task.line, task.character)
        context = RepoContext()
        if index is not None and finder is not None:
            path = str(root / task.path)
            index.update(path, text)  # the index sees the file as typed, as the server's does
            finder.read_text = texts_reader({path: text}, read_disk_text)
            place = place_of(path, task.line, win.before)
            context = bm25_context(finder, place)
            chosen.append([p for p, _ in retrieval.retrieve(finder, place)])
            index.update(path, original)
        prompt = build_prompt(session, context, task.path, win, mode)
        session.prefill(prompt.tokens)
        # The server's decode without its time budget: the baseline's prefill is cold.
        raw, _, _ = decode_completion(session, profile.completion_max_tokens,
                                      not win.multiline)
        lines = text.split("\n")
        previous = lines[task.line - 1] if task.line > 0 else None
        answers.append(finish(heal(raw, prompt.healed), win, previous))
    return answers, chosen


#: The measures, each as the per-task number it averages.
MEASURES = {"exact_match": lambda s: float(s["exact"]),
            "edit_similarity": lambda s: float(s["edit_similarity"]),
            "identifier_match": lambda s: float(s["identifier"])}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system the mean of each measure; per baseline the server's exact-match duel and
    its paired difference on each measure with a 95% bootstrap interval."""
    n = len(rows)
    out: dict[str, Any] = {"tasks": n}
    for system in SYSTEMS:
        out[system] = {m: round(mean([f(r[system]) for r in rows]), 4) if n else None
                       for m, f in MEASURES.items()}
    for other in ("window", "bm25"):
        won = sum(r["server"]["exact"] and not r[other]["exact"] for r in rows)
        lost = sum(r[other]["exact"] and not r["server"]["exact"] for r in rows)
        out[f"server_vs_{other}_exact"] = {"won": won, "lost": lost}
        diff: dict[str, Any] = {}
        for m, f in MEASURES.items():
            xs = [f(r["server"]) - f(r[other]) for r in rows]
            lo, hi = bootstrap(xs)
            diff[m] = {"mean": round(mean(xs), 4), "ci95": [round(lo, 4), round(hi, 4)]}
        out[f"server_minus_{other}"] = diff
    out["server_context_as_chosen"] = sum(_context_as_chosen(r) for r in rows)
    return out


def _context_as_chosen(row: dict[str, Any]) -> bool:
    """Whether the server's prompt carried the code its retrieval chooses for the task's
    place (else it kept an earlier place's, or the place was chosen on another text)."""
    carried = (row["server"].get("prompt") or {}).get("lastContextFiles")
    return carried is not None and sorted(carried) == sorted(row.get("place_context_files", []))


def run(root: Path, tasks: list[CompletionTask], out: Path, options: dict[str, Any],
        session: Any) -> dict[str, Any]:
    """The eval: both systems on every task; writes ``completion-eval.json`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(out / "completion-server.log", "w", encoding="utf-8") as err:
        served = asyncio.run(server_answers(root, tasks, options, err))
    windowed, _ = baseline_answers(session, root, tasks, with_bm25=False)
    retrieved, chosen = baseline_answers(session, root, tasks, with_bm25=True)
    rows = [{"task": t.to_dict(), "server": score(s, t) | {"prompt": facts},
             "window": score(w, t), "bm25": score(b, t), "place_context_files": files}
            for t, (s, facts), w, b, files
            in zip(tasks, served, windowed, retrieved, chosen, strict=True)]
    doc = {"root": str(root), "summary": summarize(rows), "rows": rows,
           "seconds": round(time.perf_counter() - t0, 1)}
    (out / "completion-eval.json").write_text(json.dumps(doc, indent=1) + "\n", "utf-8")
    return doc


def format_table(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    lines = [f"completion eval: {s['tasks']} tasks ({doc['root']}); the server's prompt "
             f"carried the code chosen for the place on {s['server_context_as_chosen']}",
             f"  {'prompt':<28} {'exact match':>11} {'edit sim.':>9} {'identifier':>10}"]
    names = {"server": "the server", "window": "window only (same model)",
             "bm25": "window + top-4 BM25 chunks"}
    for system in SYSTEMS:
        m = s[system]
        if m["exact_match"] is None:
            lines.append(f"  {names[system]:<28} {'n/a':>11}")
            continue
        lines.append(f"  {names[system]:<28} {100 * m['exact_match']:>10.1f}% "
                     f"{m['edit_similarity']:>9.1f} {100 * m['identifier_match']:>9.1f}%")
    for other in ("window", "bm25"):
        duel, diff = s[f"server_vs_{other}_exact"], s[f"server_minus_{other}"]
        em, es = diff["exact_match"], diff["edit_similarity"]
        lines.append(f"  server vs {other}, exact match: {duel['won']} won, "
                     f"{duel['lost']} lost; difference {100 * em['mean']:+.1f} points "
                     f"[{100 * em['ci95'][0]:+.1f}, {100 * em['ci95'][1]:+.1f}], "
                     f"edit sim. {es['mean']:+.1f} [{es['ci95'][0]:+.1f}, {es['ci95'][1]:+.1f}]")
    return "\n".join(lines) + "\n"
