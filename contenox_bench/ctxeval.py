"""``contenox-lsp eval context``: how well the assembled context holds the code a task needs.

A task file (``tasks.json``, see ``../shared/ctxeval/README.md`` for the fields) names, per
task, a workspace (a ``.tar.gz`` of the tree or a folder), the file open in the editor, the
cursor line, the question and the ground truth (files, definitions, a body line of each). Per
task and budget the server's own pipeline (``contenox_lsp.turn.assemble_within``) builds the
context the way an editor with that file open would; ``ctxeval_metrics`` scores it.

A budget counts the tokens *beside the question*: everything in the prompt except the fixed
segments A–D (system, tools, policy, instructions) and the question with its turn markers —
the server's ``contextTokens`` (``contenox_lsp.context_budget``). It is split as the server
splits it: the repo map's share, then the cursor context, and the code segments get the rest
(``ContextSplit`` holds the shares; the default is the server's). Two systems run side by
side: ``map`` (the repo map alone, round 1's context) and ``map+code`` (with segment J). The
server also bounds the question's part of the code by prefill time (``questionCodeMs``); the
eval does not (the bound depends on the machine).

Leave-one-repository-out (``grid``): ``map+code`` also runs with each split of the grid (the
repo map's share, the cursor part's share of the code); for each repository the split that
scores best on the *other* repositories' tasks is the one its own tasks are scored with
(``loro``). That held-out figure is what carries to a
repository nobody tuned for; the in-sample one (the default split) is reported beside it.
With ``grid`` the question search's ranker is held out too: every row of a repository's tasks
is built with weights fitted on the other repositories' tasks (``ranker_fit``), not with the
shipped ``DEFAULT_RANKER``, which saw them all.

Every row also says where each changed definition is (``ctxeval_metrics.placements``: its
code, its header only, at the cursor, pinned, the repo map only, not located), and each
summary gives those places as shares: why a measure moved, not only that it did.
``ctxeval_compare`` compares two reports task by task.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from contenox_bench.ctxeval_metrics import (
    MEASURES,
    PLACES,
    bootstrap,
    mean,
    percentile,
    placement_shares,
    placements,
    score,
)
from contenox_bench.ctxeval_tasks import load_tasks, repo_of, workspace_of
from contenox_lsp.context_budget import (
    DEFAULT_CODE_CURSOR_SHARE,
    DEFAULT_MAP_SHARE,
    ContextBudget,
    beside_question,
)
from contenox_lsp.turn import WorkspaceState, assemble_within, read_disk, turn_at
from contextasm import Assembly
from repo_index.question_rank import DEFAULT_RANKER, QuestionRanker

logger = logging.getLogger(__name__)

DEFAULT_BUDGETS = (1024, 2048, 4096)
#: Room left for the answer, as the server leaves its default ``maxTokens``.
ANSWER_TOKENS = 256
SYSTEMS = ("map", "map+code")
#: What a split is chosen by: the mean over the budgets of these measures.
LORO_OBJECTIVE = MEASURES  # the goals bound all three


@dataclass(frozen=True)
class ContextSplit:
    """How a budget beside the question is shared (``ContextBudget``'s shares): the repo map
    gets ``map_share``; the code segments what is left after the map and the rest of the
    context, the cursor's part ``code_cursor_share`` of it. The default is the server's."""

    map_share: float = DEFAULT_MAP_SHARE
    code_cursor_share: float = DEFAULT_CODE_CURSOR_SHARE
    question_max: int | None = None  # the server's time bound on the question's code

    @property
    def label(self) -> str:
        return f"map={self.map_share:g},cursor={self.code_cursor_share:g}"

    def budget(self, tokens: int, with_code: bool = True) -> ContextBudget:
        """The budget of ``tokens`` beside the question; without code, all of it the map's."""
        if not with_code:
            return ContextBudget(tokens, map_share=1.0, code_cap=0)
        return ContextBudget(tokens, map_share=self.map_share,
                             code_cursor_share=self.code_cursor_share,
                             question_max=self.question_max)


#: The splits leave-one-repository-out chooses from (``--loro``). The cursor part's shares go
#: down to 0: with 20 % as the lowest, every fold chose it (stop 46).
LORO_GRID = tuple(ContextSplit(m, c) for m in (0.0, 0.05, 0.1, 0.2, 0.35)
                  for c in (0.0, 0.1, 0.2, 0.35, 0.5))


def _grid_key(budget: int, split: ContextSplit) -> str:
    return f"map+code@{budget}/{split.label}"


def eval_task(task: Mapping[str, Any], root: Path, session: Any, budgets: Sequence[int],
              split: ContextSplit, grid: Sequence[ContextSplit] = (),
              ranker: QuestionRanker = DEFAULT_RANKER) -> dict[str, Any]:
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxeval-index-") as cache:
        index = RepoIndex([root], cache_dir=cache)
        index.build()
    finder = CodeFinder(index, lambda p: read_disk(Path(p)), ranker=ranker)
    finder.sync()
    index_s = time.perf_counter() - t0
    open_path = (root / str(task["open_file"])).resolve()
    text = read_disk(open_path)
    if text is None:
        raise ValueError(f"{task['id']}: cannot read {task['open_file']}")
    state = WorkspaceState(roots=(root.resolve(),), open_buffers={open_path: text},
                           focus_files=(open_path,))
    turn = turn_at(state.roots, open_path, str(task["question"]), text=text,
                   line=int(task["cursor_line"]) - 1)
    rows: dict[str, Any] = {}

    def build(budget: ContextBudget, with_code: bool) -> Assembly:
        return assemble_within(state, turn, index, session, budget,
                               answer_tokens=ANSWER_TOKENS, finder=finder if with_code else None)

    for system in SYSTEMS:
        with_code = system == "map+code"
        for tokens in budgets:
            times = []
            for _ in range(2):  # the first renders this map size afresh; an ask does not
                t1 = time.perf_counter()
                asm = build(split.budget(tokens, with_code), with_code)
                times.append((time.perf_counter() - t1) * 1000.0)
            placed = placements(asm, task)
            rows[f"{system}@{tokens}"] = {
                **score(asm, task, placed),
                "defs": placed,
                "first_build_ms": times[0],
                "build_ms": times[1],
                "tokens_beside_question": beside_question(asm),
            }
    for option in grid:
        for tokens in budgets:
            asm = build(option.budget(tokens), True)
            placed = placements(asm, task)
            rows[_grid_key(tokens, option)] = {**score(asm, task, placed), "defs": placed,
                                               "tokens_beside_question": beside_question(asm)}
    return {"id": task["id"], "repo": repo_of(task), "index_s": index_s,
            "ranker": ranker.source, "results": rows}


def summarize(per_task: Sequence[Mapping[str, Any]], budgets: Sequence[int]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for system in SYSTEMS:
        for budget in budgets:
            key = f"{system}@{budget}"
            entry: dict[str, Any] = {}
            for m in MEASURES:
                # A task that cannot be scored on a measure (None) is left out of its mean.
                xs = [x for t in per_task if (x := t["results"][key][m]) is not None]
                lo, hi = bootstrap(xs)
                entry[m] = {"mean": mean(xs), "ci95": [lo, hi], "tasks": len(xs)}
            ms = [t["results"][key]["build_ms"] for t in per_task]
            entry["build_ms"] = {"p50": percentile(ms, 50), "p95": percentile(ms, 95)}
            entry["placements"] = placement_shares(t["results"][key].get("defs", ())
                                                   for t in per_task)
            table[key] = entry
    return table


def _measure(per_task: Sequence[Mapping[str, Any]], key: str, m: str) -> list[float]:
    return [x for t in per_task if (x := t["results"][key][m]) is not None]


def loro(per_task: Sequence[Mapping[str, Any]], budgets: Sequence[int],
         grid: Sequence[ContextSplit]) -> dict[str, Any]:
    """Leave-one-repository-out over the splits of ``grid``: per repository, the split that
    scores best (``LORO_OBJECTIVE``) on the other repositories' tasks, and its own tasks'
    scores with it; pooled over every task, with 95% intervals."""
    repos = sorted({t["repo"] for t in per_task})
    chosen: dict[str, str] = {}
    held_out: list[dict[str, Any]] = []
    for repo in repos:
        train = [t for t in per_task if t["repo"] != repo]

        def objective(option: ContextSplit,
                      train: Sequence[Mapping[str, Any]] = train) -> float:
            xs = [mean(_measure(train, _grid_key(b, option), m))
                  for b in budgets for m in LORO_OBJECTIVE]
            return sum(xs) / len(xs)

        # Ties go to the first in the grid's order, so the choice is deterministic; with no
        # other repository, the default split.
        best = max(grid, key=objective) if train else ContextSplit()
        chosen[repo] = best.label
        for t in per_task:
            if t["repo"] == repo:
                held_out.append({"results": {f"map+code@{b}": t["results"][_grid_key(b, best)]
                                             for b in budgets}})
    table: dict[str, Any] = {}
    for b in budgets:
        entry: dict[str, Any] = {}
        for m in MEASURES:
            xs = _measure(held_out, f"map+code@{b}", m)
            lo, hi = bootstrap(xs)
            entry[m] = {"mean": mean(xs), "ci95": [lo, hi], "tasks": len(xs)}
        entry["placements"] = placement_shares(t["results"][f"map+code@{b}"].get("defs", ())
                                               for t in held_out)
        table[f"map+code@{b}"] = entry
    return {"grid": [g.label for g in grid], "objective": list(LORO_OBJECTIVE), "chosen": chosen,
            "summary": table}


def format_loro(result: Mapping[str, Any], budgets: Sequence[int]) -> str:
    chosen = result["chosen"]
    picks = ", ".join(f"{r}: {s}" for r, s in chosen.items())
    lines = ["", f"Leave-one-repository-out over {len(result['grid'])} splits of the budget "
             f"(the repo map's share, the cursor part's share of the code; {len(chosen)} "
             f"repositories; chosen on the others: {picks})", "",
             "| system | budget | file recall | def located | body present |",
             "|---|---|---|---|---|"]
    for b in budgets:
        e = result["summary"][f"map+code@{b}"]
        cells = [f"{e[m]['mean']:.2f} [{e[m]['ci95'][0]:.2f}, {e[m]['ci95'][1]:.2f}]"
                 for m in MEASURES]
        lines.append(f"| map+code, held out | {b} | " + " | ".join(cells) + " |")
    lines += format_placements({b: result["summary"][f"map+code@{b}"] for b in budgets},
                               "map+code, held out")
    return "\n".join(lines) + "\n"


def format_placements(entries: Mapping[int, Mapping[str, Any]], system: str) -> list[str]:
    """The lines of a table saying where the changed definitions are, per budget (summary
    entries with ``placements``; an entry of an older report, without it, is skipped)."""
    rows = [(b, e["placements"]) for b, e in entries.items() if "placements" in e]
    if not rows:
        return []
    lines = ["", "Where the changed definitions are (a task weighs one; its best place):", "",
             "| system | budget | " + " | ".join(_PLACE_TITLES[p] for p in (*PLACES, "none"))
             + " |", "|---|---|" + "---|" * (len(PLACES) + 1)]
    for b, shares in rows:
        lines.append(f"| {system} | {b} | "
                     + " | ".join(f"{shares[p]:.2f}" for p in (*PLACES, "none")) + " |")
    return lines


_PLACE_TITLES = {"code": "code shown", "header": "header only", "cursor": "at the cursor",
                 "pin": "pinned", "map": "repo map only", "none": "not located"}


def format_table(summary: Mapping[str, Any], budgets: Sequence[int], n_tasks: int,
                 question_max: int | None = None) -> str:
    head = " / ".join(f"{b // 1024}k" if b % 1024 == 0 else str(b) for b in budgets)
    first = summary[f"{SYSTEMS[0]}@{budgets[0]}"] if budgets else {}
    unscored = n_tasks - first.get("body_present", {}).get("tasks", n_tasks)
    lines = [
        f"Context eval over {n_tasks} tasks (mean [95% bootstrap interval]); budgets {head} "
        "tokens beside the question",
        *([f"body present over {n_tasks - unscored} tasks: {unscored} have no definition "
           "with a unique body line to look for"] if unscored else []),
        *([f"the question's code bounded to {question_max} tokens (as the server's "
           "questionCodeMs bounds it; the cursor's code takes the rest)"]
          if question_max is not None else []),
        "",
        "| system | budget | file recall | def located | body present | build p50 / p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for system in SYSTEMS:
        for b in budgets:
            e = summary[f"{system}@{b}"]
            cells = [
                f"{e[m]['mean']:.2f} [{e[m]['ci95'][0]:.2f}, {e[m]['ci95'][1]:.2f}]"
                for m in MEASURES
            ]
            ms = e["build_ms"]
            lines.append(f"| {system} | {b} | " + " | ".join(cells)
                         + f" | {ms['p50']:.0f} / {ms['p95']:.0f} |")
    lines += format_placements({b: summary[f"map+code@{b}"] for b in budgets}, "map+code")
    return "\n".join(lines) + "\n"


def run(tasks_path: Path, out: Path, budgets: Sequence[int], session: Any,
        split: ContextSplit | None = None, only: Sequence[str] = (),
        grid: Sequence[ContextSplit] = (), question_max: int | None = None) -> dict[str, Any]:
    """Evaluate every task (or those in ``only``); with ``grid``, leave-one-repository-out
    over its splits too; ``question_max`` bounds the question's code in every split (the
    server's ``questionCodeMs`` at a given prefill rate). Writes ``context-eval.json`` and
    ``context-eval.md`` under ``out`` and returns the JSON document."""
    split = replace(split or ContextSplit(), question_max=question_max)
    grid = [replace(g, question_max=question_max) for g in grid]
    tasks = [t for t in load_tasks(tasks_path) if not only or t["id"] in only]
    out.mkdir(parents=True, exist_ok=True)
    per_task = []
    rankers: dict[str, QuestionRanker] = {}
    with tempfile.TemporaryDirectory(prefix="ctxeval-") as scratch:
        if grid and len({repo_of(t) for t in tasks}) > 1:
            # Held out for the question's ranker too: each repository's tasks are ranked by
            # weights fitted on the other repositories' tasks.
            from contenox_bench.ranker_fit import fold_rankers, groups_of

            rankers = fold_rankers(groups_of(tasks, tasks_path.parent, Path(scratch)))
        for i, task in enumerate(tasks, 1):
            root = workspace_of(task, tasks_path.parent, Path(scratch))
            per_task.append(eval_task(task, root, session, budgets, split, grid,
                                      rankers.get(repo_of(task), DEFAULT_RANKER)))
            logger.info("ctxeval %d/%d %s", i, len(tasks), task["id"])
    summary = summarize(per_task, budgets)
    doc = {
        "tasks_file": os.fspath(tasks_path),
        "ranker": "fitted without each task's repository" if rankers else DEFAULT_RANKER.source,
        "budgets": list(budgets),
        "split": {"map_share": split.map_share, "code_cursor_share": split.code_cursor_share},
        "question_max": question_max,
        "summary": summary,
        "tasks": per_task,
    }
    report = format_table(summary, budgets, len(per_task), question_max)
    if grid:
        held_out = loro(per_task, budgets, grid)
        doc["loro"] = held_out
        report += format_loro(held_out, budgets)
    (out / "context-eval.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (out / "context-eval.md").write_text(report, encoding="utf-8")
    return doc
