"""Tree-sitter symbol index and ranked, budgeted repo map (segment E of the context).

    from repo_index import RepoIndex
    idx = RepoIndex([root])
    idx.build()
    m = idx.repo_map(budget_tokens=1024, focus_files=[...], focus_idents=[...])
    m.text, m.digest, m.files

See README.md in this folder for the full seam.
"""

from __future__ import annotations

from repo_index.ignore import DEFAULT_IGNORES
from repo_index.index import IndexStats, RepoIndex
from repo_index.languages import REGISTRY, LanguageSpec
from repo_index.render import RepoMap, estimate_tokens
from repo_index.results import BuildReport, Location, Symbol
from repo_index.walker import Skipped

__all__ = [
    "DEFAULT_IGNORES",
    "REGISTRY",
    "BuildReport",
    "IndexStats",
    "LanguageSpec",
    "Location",
    "RepoIndex",
    "RepoMap",
    "Skipped",
    "Symbol",
    "estimate_tokens",
]
