"""The ``contenox-lsp`` commands this package provides: ``bench``, ``eval context`` and
``eval next-edit``. The CLI finds them through the ``contenox_lsp.commands`` entry points
(pyproject.toml), so the server package never imports the benchmark
(tests/test_architecture.py). Each takes the parsed arguments and the CLI's profile loader
and returns the exit status; bad input raises the CLI's ``InputError``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contenox_lsp.errors import InputError

ProfileLoader = Callable[[argparse.Namespace], Any]


def bench(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp bench`` (it loads its own profile: ``--profile``, ``--model``)."""
    from contenox_bench import run_bench

    return run_bench(args)


def eval_context(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp eval context``."""
    from contenox_bench.ctxeval import format_table, run
    from engine import open_session

    try:
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError:
        budgets = []
    if not budgets or any(not 64 <= b <= 65_536 for b in budgets):
        raise InputError("--budgets must be integers between 64 and 65536, comma-separated",
                         budgets=args.budgets)
    tasks = Path(args.tasks)
    if not tasks.is_file():
        raise InputError(f"no such tasks file: {tasks}", tasks=str(tasks))
    with open_session(load_profile(args)) as session:
        doc = run(tasks, Path(args.out), budgets, session, only=args.task)
    sys.stdout.write(format_table(doc["summary"], budgets, len(doc["tasks"])))
    print(f"wrote {Path(args.out) / 'context-eval.json'}", file=sys.stderr)
    return 0


def eval_next_edit(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp eval next-edit``."""
    from contenox_bench.edit_replay import load_tasks
    from contenox_bench.next_edit_eval import format_table, run

    if args.tasks is not None and not Path(args.tasks).is_file():
        raise InputError(f"no such tasks file: {args.tasks}", tasks=str(args.tasks))
    try:
        tasks = load_tasks(Path(args.tasks) if args.tasks else None)
    except ValueError as e:
        raise InputError(str(e), tasks=str(args.tasks)) from e
    if args.task:
        unknown = sorted(set(args.task) - {t["id"] for t in tasks})
        if unknown:
            raise InputError(f"no such task: {', '.join(unknown)}", tasks=str(args.tasks))
        tasks = [t for t in tasks if t["id"] in args.task]
    if not 0 < args.settle <= 3600:
        raise InputError("--settle must be in (0, 3600] seconds", settle=args.settle)
    load_profile(args)  # a bad profile or a missing model: the CLI's error, before a server
    options: dict[str, Any] = {"logLevel": "warning"}
    profile, model = getattr(args, "profile", None), getattr(args, "model", None)
    if profile:
        options["profile"] = str(Path(profile).resolve())
    if model:
        options["model"] = model if model.startswith("embedded:") else str(Path(model).resolve())
    doc = run(tasks, Path(args.out), options, args.settle)
    sys.stdout.write(format_table(doc))
    print(f"wrote {Path(args.out) / 'next-edit-eval.json'}", file=sys.stderr)
    return 0
