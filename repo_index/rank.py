"""Personalized PageRank over files linked by references to definitions (after Aider's
``repomap.py``), computed on a bipartite file → name → file graph.

A file that uses name N sends weight ``w = shape(N) * sqrt(uses)`` (×50 from focus files,
÷20 for names that are the language's builtins, like Python's ``str``) to N, and N splits it
evenly among the files that define N. Routing through one node per name keeps the graph
linear in (uses + definitions) rather than uses × definitions. The rank a definition receives
is its share of the flow along its name.

The iteration runs over C-level iterators (``map``/``sum``) grouped by name and by file, and
its order is fixed (paths and names sorted), so the same graph and focus always give
bit-identical floats: the map is byte-identical across runs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import mul, sub

from repo_index.graph import SymbolGraph
from repo_index.languages import common_names_for

DAMPING = 0.85
TOLERANCE = 1e-4  # L1 change per iteration (ranks sum to 1): well inside one map quantum
MAX_ITERATIONS = 100
FOCUS_FILE_BOOST = 50.0
FOCUS_SHARE = 0.9  # of the teleport mass, when there is a focus
BUILTIN_FACTOR = 0.05


@dataclass(frozen=True)
class Ranking:
    files: dict[str, float]
    names: dict[tuple[str, str], float]  # (defining file, name) -> rank
    iterations: int


def name_weight(name: str, n_definers: int, focus_idents: Collection[str]) -> float:
    """Aider's identifier weights: long snake/camel names are specific, ``_private`` and
    widely defined names (``get``, ``run``) are not."""
    weight = 1.0
    if name in focus_idents:
        weight *= 10.0
    snake = "_" in name.strip("_") and any(c.isalpha() for c in name)
    camel = any(c.isupper() for c in name) and any(c.islower() for c in name)
    if (snake or camel) and len(name) >= 8:
        weight *= 10.0
    if name.startswith("_"):
        weight *= 0.1
    if n_definers > 5:
        weight *= 0.1
    return weight


def _group_sums(values: list[float], ends: list[int]) -> list[float]:
    """Sums of consecutive groups of ``values`` ending at ``ends``, via one prefix sum
    (C-level iteration: the whole PageRank step stays out of Python bytecode)."""
    prefix = [0.0, *accumulate(values)]
    starts = [0, *ends[:-1]]
    return list(map(sub, map(prefix.__getitem__, ends), map(prefix.__getitem__, starts)))


def _stem(path: str) -> str:
    base = path.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    return base.split(".", 1)[0]


def rank(
    graph: SymbolGraph,
    paths: Sequence[str],
    focus_files: Collection[str] = (),
    focus_idents: Collection[str] = (),
    start: Ranking | None = None,
) -> Ranking:
    """Rank ``paths`` (every indexed file, sorted) and the definitions in them. ``start``
    (a previous ranking) seeds the iteration: after small graph changes it converges in a
    few steps, at the price of low-order bits depending on history."""
    n = len(paths)
    if n == 0:
        return Ranking({}, {}, 0)
    index = {p: i for i, p in enumerate(paths)}
    builtins = [common_names_for(p) for p in paths]
    focus_ix = {index[p] for p in focus_files if p in index}

    # Edges grouped by name (user file, weight) and by defining file (name); ``*_end`` are
    # the running group boundaries used to turn prefix sums into per-group sums.
    names: list[str] = []
    edge_user: list[int] = []
    edge_weight: list[float] = []
    name_end: list[int] = []
    share: list[float] = []  # damping / number of definers
    defines: list[list[int]] = [[] for _ in range(n)]
    total_out = [0.0] * n
    outline, used_by = graph.outline, graph.used
    for name in sorted(outline.keys() & used_by.keys()):
        ds = sorted(index[p] for p in outline[name] if p in index)
        if not ds:
            continue
        base = name_weight(name, len(ds), focus_idents)
        before = len(edge_user)
        for p, count in sorted(used_by[name].items()):
            r = index.get(p)
            if r is None:
                continue
            w = base * math.sqrt(count)
            if r in focus_ix:
                w *= FOCUS_FILE_BOOST
            if name in builtins[r]:
                w *= BUILTIN_FACTOR
            edge_user.append(r)
            edge_weight.append(w)
            total_out[r] += w
        if len(edge_user) == before:
            continue
        k = len(names)
        names.append(name)
        name_end.append(len(edge_user))
        share.append(DAMPING / len(ds))
        for d in ds:
            defines[d].append(k)
    def_name = [k for ks in defines for k in ks]
    file_end = list(accumulate(len(ks) for ks in defines))

    # Teleport vector: focus files (and files named like a focus identifier) get most of it.
    wanted = set(focus_ix)
    if focus_idents:
        idents = set(focus_idents)
        wanted.update(i for i, p in enumerate(paths) if _stem(p) in idents)
        for ident in idents:  # and the files defining an identifier the user mentioned
            wanted.update(index[p] for p in graph.outline.get(ident, ()) if p in index)
    if wanted:
        rest = (1.0 - FOCUS_SHARE) / n
        bonus = FOCUS_SHARE / len(wanted)
        teleport = [rest + (bonus if i in wanted else 0.0) for i in range(n)]
    else:
        teleport = [1.0 / n] * n

    inv_out = [1.0 / t if t else 0.0 for t in total_out]
    dangling_ix = [i for i in range(n) if not total_out[i]]
    x = list(teleport)
    if start is not None:
        seeded = [start.files.get(p, 0.0) for p in paths]
        total = sum(seeded)
        if total > 0.0:
            x = [v / total for v in seeded]
    per_definer: list[float] = [0.0] * len(names)
    iterations = 0
    while iterations < MAX_ITERATIONS:
        iterations += 1
        scaled = list(map(mul, x, inv_out))  # what each file sends per unit of weight
        sent = list(map(mul, map(scaled.__getitem__, edge_user), edge_weight))
        flow = _group_sums(sent, name_end)
        per_definer = list(map(mul, flow, share))
        incoming = _group_sums(list(map(per_definer.__getitem__, def_name)), file_end)
        leak = 1.0 - DAMPING + DAMPING * sum(map(x.__getitem__, dangling_ix))
        new = [leak * t + f for t, f in zip(teleport, incoming, strict=True)]
        delta = sum(map(abs, map(sub, new, x)))
        x = new
        if delta < TOLERANCE:
            break

    ranked: dict[tuple[str, str], float] = {}
    for k, name in enumerate(names):
        value = per_definer[k]
        if value:
            for p in graph.outline[name]:
                if p in index:
                    ranked[(p, name)] = value
    return Ranking(dict(zip(paths, x, strict=True)), ranked, iterations)
