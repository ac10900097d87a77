"""``contenox-lsp eval compare``: two ``eval context`` reports, task by task.

A change to the context is judged by what it does to the same tasks: per budget and measure,
the mean of each report, the mean of the per-task differences (B - A) with a 95% bootstrap
interval over tasks (resampling tasks keeps each task's pair together), and the tasks won and
lost. The rows compared are the held-out ones (each repository's tasks at the split chosen
without it) when both reports ran ``--loro``, else each report's own split; ``split`` names
one split of the grid (``map=0,cursor=0``) or ``default`` (the report's own split) instead.
Only the tasks and budgets both reports have are compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contenox_bench.ctxeval_metrics import MEASURES, bootstrap, mean
from contenox_lsp.errors import InputError

#: ``split`` naming the report's own split (its main ``map+code`` rows).
DEFAULT_SPLIT = "default"


def rows_of(doc: Mapping[str, Any], split: str | None = None
            ) -> dict[str, dict[int, Mapping[str, Any]]]:
    """Per task id and budget, the ``map+code`` row of ``doc`` that ``split`` selects (see the
    module's docstring; None: held out when ``doc`` has it, else the default split)."""
    budgets = [int(b) for b in doc["budgets"]]
    grid = list(doc.get("loro", {}).get("grid", []))
    if split not in (None, DEFAULT_SPLIT, *grid):
        raise InputError(f"no split {split!r} in the report: it has "
                         + ", ".join([DEFAULT_SPLIT, *grid]), split=split)
    chosen = doc.get("loro", {}).get("chosen") if split is None else None
    out: dict[str, dict[int, Mapping[str, Any]]] = {}
    for task in doc["tasks"]:
        results = task["results"]
        label = (chosen[task["repo"]] if chosen is not None
                 else None if split in (None, DEFAULT_SPLIT) else split)
        keys = {b: f"map+code@{b}" + (f"/{label}" if label is not None else "") for b in budgets}
        missing = [k for k in keys.values() if k not in results]
        if missing:
            raise InputError(f"report has no row {missing[0]} for task {task['id']}",
                             task=task["id"], row=missing[0])
        out[task["id"]] = {b: results[k] for b, k in keys.items()}
    return out


def compare(a: Mapping[str, Any], b: Mapping[str, Any],
            split: str | None = None) -> dict[str, Any]:
    """Report ``b`` against report ``a`` on the tasks and budgets both have."""
    if split is None and ("loro" in a) != ("loro" in b):
        raise InputError("one report is held out (--loro) and the other is not: name a "
                         "split to compare (--split default, or a grid split)")
    rows_a, rows_b = rows_of(a, split), rows_of(b, split)
    tasks = [t for t in rows_a if t in rows_b]
    budgets = [x for x in (int(v) for v in a["budgets"]) if x in {int(v) for v in b["budgets"]}]
    if not tasks or not budgets:
        raise InputError("the reports share no task or no budget",
                         tasks=len(tasks), budgets=budgets)
    table: dict[str, Any] = {}
    for budget in budgets:
        entry: dict[str, Any] = {}
        for m in MEASURES:
            pairs = [(rows_a[t][budget][m], rows_b[t][budget][m]) for t in tasks]
            pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
            diffs = [y - x for x, y in pairs]
            lo, hi = bootstrap(diffs)
            entry[m] = {"a": mean([x for x, _ in pairs]), "b": mean([y for _, y in pairs]),
                        "diff": mean(diffs), "ci95": [lo, hi], "tasks": len(pairs),
                        "won": sum(d > 0 for d in diffs), "lost": sum(d < 0 for d in diffs)}
        table[str(budget)] = entry
    rows = "held out" if split is None and "loro" in a else (split or DEFAULT_SPLIT)
    return {"rows": rows, "tasks": len(tasks), "budgets": budgets, "summary": table}


def format_compare(result: Mapping[str, Any], names: Sequence[str] = ("A", "B")) -> str:
    """``compare``'s result as a table; ``names``: the two reports' (shown above the table)."""
    lines = [f"B against A over {result['tasks']} tasks ({result['rows']} rows; A: {names[0]}, "
             f"B: {names[1]}): the mean of each, the mean per-task difference with its 95% "
             "bootstrap interval, tasks won / lost", "",
             "| budget | measure | A | B | B - A [95%] | won / lost |",
             "|---|---|---|---|---|---|"]
    for budget in result["budgets"]:
        for m in MEASURES:
            e = result["summary"][str(budget)][m]
            lines.append(f"| {budget} | {m} | {e['a']:.3f} | {e['b']:.3f} | {e['diff']:+.3f} "
                         f"[{e['ci95'][0]:+.3f}, {e['ci95'][1]:+.3f}] | {e['won']} / {e['lost']} |")
    return "\n".join(lines) + "\n"
