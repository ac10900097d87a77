"""How the question's search orders what it found: a log-linear model over signals that carry
from one repository to another, its weights fitted by leave-one-repository-out on real
bug-fix tasks (``contenox_bench.ranker_fit``; ``contenox-lsp eval ranker``).

A candidate's score is ``exp(w · features)``: a product of priors, the lexical match raised to
a power. The features say how well the chunk matches the question (BM25 with the question's
words alone), how strongly the code at the cursor reaches it (the symbol graph's weight),
where it lives (the source file the open test module is named after, a file the cursor's code
reaches, test code, a stub), whether its name or its file's path shares a word with the
question, and what it is (its length in lines, a class outline, a method, a private helper).

Why learned and not hand-set: each prior alone, swept on the tasks, moved nothing held out.
Fitted together (listwise: the softmax probability of the changed definitions among a task's
candidates), a changed definition ranked first on 58 of the 153 tasks when each repository's
tasks were ranked by weights fitted on the other twelve, where the hand-set priors it replaced
did on 40; in the top 3 on 93 (80). Twelve weights, stable across those folds; refit when a
feature changes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from repo_index.chunks import Chunk
from repo_index.lexical import terms

#: The features, in the order of a ranker's weights.
FEATURES = (
    "bm25",  # log(1 + BM25 score with the question's words alone)
    "graph",  # log(1 + the cursor's symbol-graph weight); 0 when the graph does not reach it
    "mirror",  # in the source file the open test module is named after
    "near",  # in a file the cursor's best definitions are in
    "test",  # test code
    "stub",  # a .pyi stub
    "name_word",  # its name shares a search term with the question
    "path_word",  # its file's path shares a search term with the question
    "log_lines",  # log of its length in lines
    "class",  # a class outline
    "method",  # defined inside a class
    "private",  # a _private name (not a dunder)
)

#: An exponent past this is cut (a score stays a finite float).
MAX_EXPONENT = 50.0


@dataclass(frozen=True)
class Candidate:
    """What the ranker knows of one chunk the question's search found."""

    path: str  # absolute
    display: str  # workspace-relative, as the repo map names it
    chunk: Chunk
    bm25: float
    graph: float
    mirror: bool
    near: bool
    test: bool


def features(c: Candidate, question_terms: Collection[str]) -> tuple[float, ...]:
    """``c``'s features in ``FEATURES`` order; ``question_terms``: the question's search
    terms (``repo_index.lexical.terms``)."""
    name = c.chunk.name
    path_words = c.display.replace("\\", "/").replace("/", " ").rsplit(".", 1)[0]
    return (
        math.log1p(c.bm25),
        math.log1p(c.graph),
        float(c.mirror),
        float(c.near),
        float(c.test),
        float(c.display.endswith(".pyi")),
        float(any(t in question_terms for t in terms(name))),
        float(any(t in question_terms for t in terms(path_words))),
        math.log(max(1, c.chunk.end_line - c.chunk.start_line + 1)),
        float(c.chunk.kind == "class"),
        float("." in c.chunk.qualname),
        float(name.startswith("_") and not name.startswith("__")),
    )


@dataclass(frozen=True)
class QuestionRanker:
    """Weights, one per feature (``FEATURES``), and where they came from."""

    weights: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.weights) != len(FEATURES):
            raise ValueError(f"a question ranker has {len(FEATURES)} weights, "
                             f"got {len(self.weights)}")

    def score(self, feats: Sequence[float]) -> float:
        z = sum(w * x for w, x in zip(self.weights, feats, strict=True))
        return math.exp(min(z, MAX_EXPONENT))


#: Fitted on the 153 tasks of ``../shared/ctxeval`` (13 repositories), L2 1.0, by
#: ``contenox-lsp eval ranker --tasks ../shared/ctxeval/tasks.json`` (its last line).
DEFAULT_RANKER = QuestionRanker(
    weights=(2.44, 2.00, 1.93, 1.03, -3.55, -2.29, 0.92, 0.87, 0.83, -2.17, 0.73, 0.28),
    source="ctxeval 153 tasks, 13 repositories",
)
