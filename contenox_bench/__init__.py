"""``contenox-lsp bench``: the local-node benchmark report (see contenox_bench/README.md).

Sections: 1 runtime report (``runtime``), 2 suffix-growth curve (``curve``), 3 edit-trace
replay against baselines (``trace``, ``baselines``), 4 scaling note (``scaling``), 5 llama.cpp
vs OpenVINO on the same prompts (``backends``, ``backends_plan``, ``backends_child``).
"""

from __future__ import annotations

import argparse


def run_bench(args: argparse.Namespace) -> int:
    from contenox_bench.main import run_bench as _run

    return _run(args)


__all__ = ["run_bench"]
