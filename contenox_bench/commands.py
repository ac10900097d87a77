"""The ``contenox-lsp`` commands this package provides: ``bench``, ``eval context``,
``eval compare``, ``eval next-edit``, ``eval completion`` and ``eval ranker``. The CLI finds
them through the ``contenox_lsp.commands`` entry points (pyproject.toml), so the server package
never imports the benchmark (tests/test_architecture.py). Each takes the parsed arguments and
the CLI's profile loader and returns the exit status; bad input raises the CLI's
``InputError``."""

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
    from contenox_bench.ctxeval import LORO_GRID, format_loro, format_table, run
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
    question_max = getattr(args, "question_tokens", None)
    if question_max is not None and not 0 <= question_max <= 65_536:
        raise InputError("--question-tokens must be between 0 and 65536",
                         question_tokens=question_max)
    with open_session(load_profile(args)) as session:
        doc = run(tasks, Path(args.out), budgets, session, only=args.task,
                  grid=LORO_GRID if args.loro else (), question_max=question_max)
    sys.stdout.write(format_table(doc["summary"], budgets, len(doc["tasks"]),
                                  doc.get("question_max")))
    if "loro" in doc:
        sys.stdout.write(format_loro(doc["loro"], budgets))
    print(f"wrote {Path(args.out) / 'context-eval.json'}", file=sys.stderr)
    return 0


def eval_compare(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp eval compare`` (no model: it reads two reports)."""
    import json

    from contenox_bench.ctxeval_compare import compare, format_compare

    docs = []
    for name in (args.a, args.b):
        path = Path(name)
        if path.is_dir():
            path = path / "context-eval.json"
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}",
                             report=str(path)) from exc
        except ValueError as exc:
            raise InputError(f"{path} is not JSON: {exc}", report=str(path)) from exc
        if not isinstance(doc, dict) or not {"budgets", "tasks"} <= doc.keys():
            raise InputError(f"{path} is not an eval context report (context-eval.json)",
                             report=str(path))
        docs.append(doc)
    result = compare(docs[0], docs[1], args.split)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        sys.stdout.write(format_compare(result, (args.a, args.b)))
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


def eval_ranker(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp eval ranker`` (no model: the ranking needs the index only)."""
    import json
    import tempfile

    from contenox_bench.ctxeval_tasks import load_tasks, repo_of
    from contenox_bench.ranker_fit import evaluate, format_report, groups_of

    tasks_path = Path(args.tasks)
    if not tasks_path.is_file():
        raise InputError(f"no such tasks file: {tasks_path}", tasks=str(tasks_path))
    if not 0 <= args.l2 <= 1e6:
        raise InputError("--l2 must be between 0 and 1e6", l2=args.l2)
    tasks = [t for t in load_tasks(tasks_path) if not args.task or t["id"] in args.task]
    if len({repo_of(t) for t in tasks}) < 2:
        raise InputError("eval ranker needs tasks from at least two repositories "
                         "(it checks the fit on a repository left out)", tasks=len(tasks))
    with tempfile.TemporaryDirectory(prefix="ranker-") as scratch:
        groups = groups_of(tasks, tasks_path.parent, Path(scratch))
    result = evaluate(groups, args.l2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = format_report(result)
    (out / "ranker.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "ranker.md").write_text(report, encoding="utf-8")
    sys.stdout.write(report)
    print(f"wrote {out / 'ranker.json'}", file=sys.stderr)
    return 0


def eval_completion(args: argparse.Namespace, load_profile: ProfileLoader) -> int:
    """``contenox-lsp eval completion``."""
    import json

    from contenox_bench.completion_eval import format_table, run
    from contenox_bench.completion_tasks import CompletionTask, build_tasks
    from engine import open_session

    try:
        import rapidfuzz  # noqa: F401  (the edit similarity)
    except ImportError as e:
        raise InputError("eval completion needs rapidfuzz: pip install -e '.[bench]'") from e
    if not 1 <= args.n <= 10_000:
        raise InputError("--n must be between 1 and 10000", n=args.n)
    out = Path(args.out)
    if args.tasks is not None:
        tasks_file = Path(args.tasks)
        try:
            doc = json.loads(tasks_file.read_text(encoding="utf-8"))
            root = Path(doc["root"])
            tasks = [CompletionTask(**t) for t in doc["tasks"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"cannot read completion tasks from {tasks_file}: {e}",
                             tasks=str(tasks_file)) from e
    else:
        root = Path(args.repo or ".").resolve()
        if not root.is_dir():
            raise InputError(f"no such repository folder: {root}", repo=str(root))
        tasks = build_tasks(root, args.n, seed=args.seed)
    if not root.is_dir():
        raise InputError(f"no such repository folder: {root}", repo=str(root))
    for task in tasks:
        path = root / task.path
        if not path.resolve().is_relative_to(root.resolve()) or not path.is_file():
            raise InputError(f"task {task.id}: no such file in {root}: {task.path}",
                             task=task.id)
    if not tasks:
        raise InputError(f"no completion tasks in {root}: no line there uses a definition "
                         "imported from another file of it", repo=str(root))
    out.mkdir(parents=True, exist_ok=True)
    (out / "completion-tasks.json").write_text(json.dumps(
        {"root": str(root), "tasks": [t.to_dict() for t in tasks]}, indent=1) + "\n", "utf-8")
    profile = load_profile(args)
    options: dict[str, Any] = {"logLevel": "warning"}
    if getattr(args, "profile", None):
        options["profile"] = str(Path(args.profile).resolve())
    model = getattr(args, "model", None)
    if model:
        options["model"] = model if model.startswith("embedded:") else str(Path(model).resolve())
    with open_session(profile) as session:
        result = run(root, tasks, out, options, session)
    sys.stdout.write(format_table(result))
    print(f"wrote {out / 'completion-eval.json'}", file=sys.stderr)
    return 0
