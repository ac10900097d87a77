"""Fit the question search's ranker (``repo_index.question_rank``) on bug-fix tasks, and
check it the way it has to hold: on repositories it was not fitted on.

Per task (the ctxeval task format), the server's own candidates for the task's question at
its cursor (``CodeFinder.question_candidates``, with the cursor's symbol graph, the files it
reaches and the mirrored source from ``code_segment.cursor_reach``, as the server's; only the
function at the cursor left out, since what the cursor part shows whole depends on the
budget) and which of them the fix changed. The model: a score ``w · features`` per
candidate, softmax over a task's candidates, maximising the probability of the changed
definitions (listwise), plus ``l2 * |w|²`` on standardised features; plain gradient descent
with a backtracking line search (twelve weights: numpy is enough).

``contenox-lsp eval ranker --tasks FILE`` reports, pooled over the tasks, how often a changed
definition is ranked first / in the top 3 / top 5 by BM25 alone, by the shipped ranker, by
the ranker fitted on every task and by the ranker fitted without the task's repository; and
the weights fitted on every task (what ``DEFAULT_RANKER`` holds), with each fold's.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from contenox_bench.ctxeval_tasks import repo_of, workspace_of
from repo_index.question_rank import DEFAULT_RANKER, FEATURES, QuestionRanker

if TYPE_CHECKING:
    from contenox_lsp.code_segment import CursorReach
    from repo_index.code_search import CodeFinder
    from repo_index.question_rank import Candidate

logger = logging.getLogger(__name__)

DEFAULT_L2 = 1.0
TOP_KS = (1, 3, 5)
#: Gradient descent: at most this many steps; stop when the loss moves less than TOL.
MAX_STEPS = 3000
TOL = 1e-9


@dataclass(frozen=True)
class Group:
    """One task's candidates: ``features`` (n × len(FEATURES)) and ``labels`` (1: a
    definition the fix changed)."""

    task_id: str
    repo: str
    features: np.ndarray
    labels: np.ndarray

    @property
    def answerable(self) -> bool:
        return bool(self.labels.any())


def task_candidates(task: Mapping[str, Any], root: Path, cache: str) -> tuple[
        list[tuple[Candidate, tuple[float, ...]]], CodeFinder, CursorReach]:
    """The candidates (with their features) the server's question search ranks for ``task``
    in the workspace ``root`` (the task's tree, indexed into ``cache``), the finder that
    found them and the cursor's reach they were found with."""
    from contenox_lsp.code_segment import cursor_reach
    from contenox_lsp.turn import read_disk
    from repo_index import RepoIndex
    from repo_index.code_search import CodeFinder

    index = RepoIndex([root], cache_dir=cache)
    index.build()
    finder = CodeFinder(index, lambda p: read_disk(Path(p)))
    open_path = str((root / str(task["open_file"])).resolve())
    reach = cursor_reach(finder, open_path, int(task["cursor_line"]) - 1)
    own = {(open_path, reach.here.def_line)} if reach.here is not None else set()
    found = finder.question_candidates(
        str(task["question"]), reach.names, graph=reach.graph, near_files=reach.near,
        mirror_files=reach.mirrors, exclude=own)
    return found, finder, reach


def task_group(task: Mapping[str, Any], root: Path) -> Group:
    """The candidates the server's question search ranks for ``task`` in the workspace
    ``root`` (the task's tree), labelled with the task's changed definitions."""
    with tempfile.TemporaryDirectory(prefix="ranker-index-") as cache:
        found, _, _ = task_candidates(task, root, cache)
    changed = {(str((root / d["file"]).resolve()), int(d["def_line"]) - 1)
               for d in task["gt_defs"]}
    feats = np.array([f for _, f in found], dtype=np.float64).reshape(-1, len(FEATURES))
    labels = np.array([(c.path, c.chunk.def_line) in changed for c, _ in found], dtype=bool)
    return Group(str(task["id"]), repo_of(task), feats, labels)


def _loss_and_grad(w: np.ndarray, x: np.ndarray, start: np.ndarray, group_of: np.ndarray,
                   labels: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
    """Σ over groups of -log P(a changed definition), softmax within a group; + l2 |w|²."""
    s = x @ w
    top = np.maximum.reduceat(s, start)
    e = np.exp(s - top[group_of])
    z_all = np.add.reduceat(e, start)
    z_hit = np.add.reduceat(np.where(labels, e, 0.0), start)
    loss = float(np.sum(np.log(z_all) - np.log(z_hit)) + l2 * (w @ w))
    p_all = e / z_all[group_of]
    p_hit = np.where(labels, e, 0.0) / z_hit[group_of]
    grad = (p_all - p_hit) @ x + 2.0 * l2 * w
    return loss, grad


def fit(groups: Sequence[Group], l2: float = DEFAULT_L2, source: str = "") -> QuestionRanker:
    """The ranker that maximises the changed definitions' softmax probability over
    ``groups`` (those with a changed definition among their candidates)."""
    return QuestionRanker(fit_weights(groups, l2), source=source)


def fit_weights(groups: Sequence[Group], l2: float = DEFAULT_L2) -> tuple[float, ...]:
    """``fit``'s weights, one per column of the groups' features (however many: a probe may
    add a feature the ranker does not have)."""
    used = [g for g in groups if g.answerable]
    if not used:
        raise ValueError("no task has a changed definition among its candidates")
    x = np.vstack([g.features for g in used])
    labels = np.concatenate([g.labels for g in used])
    sizes = np.array([len(g.labels) for g in used])
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    group_of = np.repeat(np.arange(len(used)), sizes)
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd[sd == 0] = 1.0  # a feature constant here carries no weight
    xs = (x - mu) / sd
    w = np.zeros(x.shape[1])
    loss, grad = _loss_and_grad(w, xs, start, group_of, labels, l2)
    step = 1.0 / len(used)
    for _ in range(MAX_STEPS):
        while True:  # backtracking (Armijo)
            trial = w - step * grad
            new_loss, new_grad = _loss_and_grad(trial, xs, start, group_of, labels, l2)
            if new_loss <= loss - 0.5 * step * float(grad @ grad) or step < 1e-12:
                break
            step *= 0.5
        done = loss - new_loss < TOL
        w, loss, grad = trial, new_loss, new_grad
        step *= 2.0
        if done:
            break
    # Standardisation folded back: the intercept a shift adds is the same for every
    # candidate of a task, so it does not change a ranking and is dropped.
    return tuple(round(float(v), 3) for v in w / sd)


def ranks_first(scores: np.ndarray, labels: np.ndarray, k: int) -> bool:
    """Whether a changed definition is among the ``k`` best (ties: the earlier candidate, in
    BM25 order; the search breaks them by path and line, which scores nothing here)."""
    order = np.argsort(-scores, kind="stable")[:k]
    return bool(labels[order].any())


def _scores(ranker: QuestionRanker, g: Group) -> np.ndarray:
    return np.array([ranker.score(row) for row in g.features]) if len(g.labels) else np.zeros(0)


def fold_rankers(groups: Sequence[Group], l2: float = DEFAULT_L2) -> dict[str, QuestionRanker]:
    """Per repository, the ranker fitted on the other repositories' tasks."""
    repos = sorted({g.repo for g in groups})
    return {r: fit([g for g in groups if g.repo != r], l2, source=f"fitted without {r}")
            for r in repos}


def evaluate(groups: Sequence[Group], l2: float = DEFAULT_L2) -> dict[str, Any]:
    """Top-k counts (tasks whose changed definition ranks within k) for BM25 alone, the
    shipped ranker, the ranker fitted in sample and the ranker fitted without each task's
    repository; the weights fitted on all of ``groups``."""
    bm25_only = QuestionRanker(tuple(1.0 if f == "bm25" else 0.0 for f in FEATURES), "bm25")
    everything = fit(groups, l2, source=f"{len(groups)} tasks")
    folds = fold_rankers(groups, l2)
    systems: dict[str, Any] = {
        "bm25 alone": lambda g: bm25_only,
        "shipped ranker": lambda g: DEFAULT_RANKER,
        "fitted on every task (in sample)": lambda g: everything,
        "fitted without the task's repository (held out)": lambda g: folds[g.repo],
    }
    table: dict[str, dict[str, int]] = {}
    for name, ranker_for in systems.items():
        table[name] = {f"top{k}": sum(ranks_first(_scores(ranker_for(g), g), g.labels, k)
                                      for g in groups if len(g.labels))
                       for k in TOP_KS}
    return {
        "tasks": len(groups),
        "answerable": sum(g.answerable for g in groups),
        "l2": l2,
        "features": list(FEATURES),
        "top_k": table,
        "weights": list(everything.weights),
        "fold_weights": {r: list(f.weights) for r, f in folds.items()},
        "weight_spread": [float(np.std([f.weights[i] for f in folds.values()]))
                          for i in range(len(FEATURES))],
    }


def format_report(result: Mapping[str, Any]) -> str:
    n = result["tasks"]
    lines = [f"Question ranker over {n} tasks ({result['answerable']} with a changed definition "
             f"among the candidates); L2 {result['l2']:g}", "",
             "| ranking | " + " | ".join(f"top {k}" for k in TOP_KS) + " |",
             "|---|" + "---|" * len(TOP_KS)]
    for name, row in result["top_k"].items():
        lines.append(f"| {name} | " + " | ".join(f"{row[f'top{k}']} ({row[f'top{k}'] / n:.2f})"
                                                for k in TOP_KS) + " |")
    lines += ["", "weights fitted on every task (feature: weight, spread across folds):"]
    width = max(map(len, result["features"]), default=0)
    for f, w, sd in zip(result["features"], result["weights"], result["weight_spread"],
                        strict=True):
        lines.append(f"  {f:{width}s} {w:+.3f}  ±{sd:.3f}")
    lines.append("as a tuple: (" + ", ".join(f"{w:.2f}" for w in result["weights"]) + ")")
    return "\n".join(lines) + "\n"


def groups_of(tasks: Sequence[Mapping[str, Any]], tasks_dir: Path,
              scratch: Path) -> list[Group]:
    out = []
    for i, task in enumerate(tasks, 1):
        out.append(task_group(task, workspace_of(task, tasks_dir, scratch)))
        logger.info("ranker candidates %d/%d %s", i, len(tasks), task["id"])
    return out

