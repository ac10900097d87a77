"""The ``contenox-lsp`` command line.

With no subcommand it runs the language server on stdio (the way editors launch it). stdout
belongs to JSON-RPC in that mode, so every command logs to stderr only.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contenox_lsp import __version__
from contenox_lsp.errors import InputError
from contenox_lsp.options import add_server_arguments, options_from_args
from engine import EngineError

#: Entry point group of commands other packages provide (contenox_bench: bench, eval).
COMMANDS_GROUP = "contenox_lsp.commands"

log = logging.getLogger("contenox")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    # llama.cpp warns about benign model quirks on every load: only debug shows its chatter.
    logging.getLogger("contenox.llama_cpp").setLevel(
        logging.DEBUG if level == "debug" else logging.ERROR
    )


def _add_common(p: argparse.ArgumentParser, top: bool = False) -> None:
    # Subcommands repeat the options but must not overwrite values given before the command.
    keep: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--log-level",
        **({"default": None} if top else keep),
        choices=["debug", "info", "warning", "error"],
        help="stderr log level, llama.cpp's own log included (default: info for the server, "
        "warning for the other commands)",
    )
    p.add_argument(
        "--profile", metavar="FILE", help="profile TOML (default: built-in embedded model)", **keep
    )
    p.add_argument("--model", metavar="GGUF", help="override the profile's model path", **keep)


def _add_workspace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workspace", metavar="DIR", help="repository folder (default: the current one)"
    )
    p.add_argument("--file", metavar="F", help="the file the question is about (focus + cursor)")
    p.add_argument("--line", type=int, metavar="N", help="1-based cursor line in --file")
    p.add_argument(
        "--test-output", metavar="FILE",
        help="a test run's output ('-': stdin), shown as segment H; the definitions its "
             "traceback runs through in the workspace lead the question's code",
    )
    p.add_argument(
        "--context-tokens",
        type=int,
        default=None,
        metavar="N",
        help="the bound on the context beside the question: repo map, pins, diff, outputs, "
             "code (default 2560, the server's contextTokens)",
    )
    p.add_argument(
        "--map-tokens",
        type=int,
        default=None,
        metavar="N",
        help="the repo map's budget inside it (default: 40%%, 1024; 0 = no map)",
    )
    p.add_argument(
        "--code-tokens",
        type=int,
        default=None,
        metavar="N",
        help="a cap on the code segments inside it (default: what is left; 0 = none)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="contenox-lsp",
        description="A language server that keeps a local model warm for one repository. "
        "Without a command it serves LSP on stdio.",
    )
    parser.add_argument("--version", action="version", version=f"contenox-lsp {__version__}")
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    ask = sub.add_parser(
        "ask", help="answer a question with the workspace as context (streamed to stdout)"
    )
    _add_common(ask)
    ask.add_argument("question", help="the question or prompt")
    _add_workspace_args(ask)
    ask.add_argument("--max-tokens", type=int, default=128, help="tokens to generate (default 128)")
    ask.add_argument("--json", action="store_true", help="print the answer and metrics as JSON")
    ask.add_argument(
        "--raw",
        action="store_true",
        help="send the text as-is (no workspace context, no prompt format)",
    )

    explain_p = sub.add_parser(
        "explain-context", help="show the context segments and what is cached for this workspace"
    )
    _add_common(explain_p)
    _add_workspace_args(explain_p)
    explain_p.add_argument("--question", default="", help="the question of the user turn")
    explain_p.add_argument("--max-tokens", type=int, default=128, help=argparse.SUPPRESS)
    explain_p.add_argument("--json", action="store_true", help="ranges, hashes, classes, totals")

    prof = sub.add_parser("profile", help="inspect profiles")
    prof_sub = prof.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    show = prof_sub.add_parser(
        "show", help="print the effective profile and where each value came from"
    )
    _add_common(show)
    show.add_argument("--json", action="store_true")

    _add_model_parser(sub)

    bench = sub.add_parser("bench", help="measure the warm session against the baselines")
    _add_common(bench)
    bench.add_argument("--workspace", metavar="DIR", help="repository for the edit-trace replay")
    bench.add_argument("--out", metavar="DIR", default="bench-out", help="report folder")
    size = bench.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, about 5 minutes")
    size.add_argument("--full", action="store_true", help="adds 8k and 16k suffix points")
    bench.add_argument(
        "--openvino-model-dir",
        metavar="DIR",
        help="OpenVINO IR folder for the backends section (default: the cached int8 conversion)",
    )
    bench.add_argument(
        "--sections",
        metavar="NAME,NAME",
        help="run only these sections (e.g. bigrepo); the others are reported as skipped",
    )
    bench.add_argument(
        "--bigrepo-sizes",
        metavar="N,N,N",
        help="file counts of the bigrepo section's workspaces (default 2000,8000,20000)",
    )

    ev = sub.add_parser("eval", help="measure the assembled context against ground truth")
    ev_sub = ev.add_subparsers(dest="eval_command", metavar="WHAT", required=True)
    ctx = ev_sub.add_parser(
        "context", help="file recall, definitions located and bodies present on bug-fix tasks"
    )
    _add_common(ctx)
    ctx.add_argument("--tasks", required=True, metavar="FILE",
                     help="tasks.json (fields: ../shared/ctxeval/README.md)")
    ctx.add_argument("--budgets", default="1024,2048,4096", metavar="N,N",
                     help="tokens beside the question (default 1024,2048,4096)")
    ctx.add_argument("--task", action="append", default=[], metavar="ID",
                     help="only this task (repeatable)")
    ctx.add_argument("--loro", action="store_true",
                     help="also leave-one-repository-out over the repo map's share")
    ctx.add_argument("--question-tokens", type=int, default=None, metavar="N",
                     help="bound the question's code to N tokens, as the server's "
                          "questionCodeMs does at its measured prefill rate (default: unbounded)")
    ctx.add_argument("--out", metavar="DIR", default="eval-out", help="report folder")
    cmp = ev_sub.add_parser(
        "compare", help="two eval context reports task by task: per budget and measure, the "
                        "paired difference with its interval, tasks won and lost")
    cmp.add_argument("a", metavar="A", help="the baseline report (context-eval.json, or the "
                                            "folder holding it)")
    cmp.add_argument("b", metavar="B", help="the report compared with it")
    cmp.add_argument("--split", default=None, metavar="LABEL",
                     help="the rows compared: a split of the --loro grid (map=0,cursor=0) or "
                          "'default' (each report's own split); default: held out when both "
                          "ran --loro, else 'default'")
    cmp.add_argument("--json", action="store_true", help="print JSON")
    ne = ev_sub.add_parser(
        "next-edit", help="replay commits through the server; exact-region match and reversals "
                          "of its next-edit suggestions")
    _add_common(ne)
    ne.add_argument("--tasks", metavar="FILE", default=None,
                    help="tasks JSON ({tasks: [{id, path, before, after}]}; default: the "
                         "commits shipped in contenox_bench/data/next_edit_tasks.json)")
    ne.add_argument("--task", action="append", default=[], metavar="ID",
                    help="only this task (repeatable)")
    ne.add_argument("--settle", type=float, default=30.0, metavar="S",
                    help="longest wait for an edit to settle before each request (default 30)")
    ne.add_argument("--out", metavar="DIR", default="eval-out", help="report folder")

    rk = ev_sub.add_parser(
        "ranker", help="fit the question search's ranker on bug-fix tasks and check it "
                       "leave-one-repository-out")
    rk.add_argument("--tasks", required=True, metavar="FILE",
                    help="tasks.json (fields: ../shared/ctxeval/README.md)")
    rk.add_argument("--task", action="append", default=[], metavar="ID",
                    help="only this task (repeatable)")
    rk.add_argument("--l2", type=float, default=1.0, metavar="X",
                    help="L2 penalty on the standardised weights (default 1.0)")
    rk.add_argument("--out", metavar="DIR", default="eval-out", help="report folder")
    cc = ev_sub.add_parser(
        "completion", help="CrossCodeEval-style tasks from a repository through the server's "
                           "inline completion, beside the window-only prompt")
    _add_common(cc)
    source = cc.add_mutually_exclusive_group()
    source.add_argument("--repo", metavar="DIR", default=None,
                        help="build the tasks from this repository (default: the current "
                             "folder)")
    source.add_argument("--tasks", metavar="FILE", default=None,
                        help="run the tasks of an earlier run's completion-tasks.json")
    cc.add_argument("--n", type=int, default=30, metavar="N",
                    help="tasks to build (default 30)")
    cc.add_argument("--seed", type=int, default=0, help="task sampling seed (default 0)")
    cc.add_argument("--out", metavar="DIR", default="eval-out", help="report folder")

    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    _add_common(serve)
    add_server_arguments(serve)
    serve.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    # vscode-languageclient and others append --stdio; it is the default, accept it.
    for p in (parser, serve):
        p.add_argument("--stdio", action="store_true", help=argparse.SUPPRESS)
    serve.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    serve.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    return parser


def _add_model_parser(sub: Any) -> None:
    from engine.openvino.convert import WEIGHT_FORMATS

    model = sub.add_parser("model", help="model files: what a model is, conversion")
    model_sub = model.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    info = model_sub.add_parser(
        "info", help="what the profile's model is and what this server makes of it "
        "(format, FIM, stops, KV memory, exact reuse)")
    _add_common(info)
    info.add_argument("--json", action="store_true")
    conv = model_sub.add_parser(
        "convert", help="convert a GGUF file or HF folder for another backend"
    )
    conv.add_argument("--to", choices=["openvino"], required=True, help="target backend")
    conv.add_argument(
        "--weight-format",
        choices=list(WEIGHT_FORMATS),
        default="int8",
        help="weight compression (default int8; int4 is visibly degraded on small models)",
    )
    conv.add_argument("src", help="a .gguf file, a HF model folder, or 'embedded:gemma3-270m'")
    conv.add_argument(
        "out",
        nargs="?",
        default=None,
        help="output folder (replaced if it exists); omitted: the cache entry that a profile "
        "with an empty openvino.model_dir loads (kept if it is already there)",
    )


def _load_profile(args: argparse.Namespace) -> Any:
    from engine import load_profile

    profile = load_profile(args.profile)
    if args.model:
        profile = profile.with_overrides({"model.path": args.model}, source="cli --model")
    return profile


def _print_error(exc: EngineError | InputError, as_json: bool) -> None:
    if isinstance(exc, EngineError | InputError):
        if as_json:
            print(json.dumps({"error": exc.to_dict()}, indent=2))
        print(f"contenox-lsp: error [{exc.code}]: {exc.message}", file=sys.stderr)
    else:
        print(f"contenox-lsp: error: {exc}", file=sys.stderr)


def cmd_profile_show(args: argparse.Namespace) -> int:
    profile = _load_profile(args)
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
    else:
        print(profile.describe())
    return EXIT_OK


def _turn_request(args: argparse.Namespace, root: Any, question: str) -> Any:
    from contenox_lsp.workspace_session import TurnRequest, WorkspaceError, resolve_file

    file = resolve_file(root, args.file)
    if args.line is not None and (file is None or args.line < 1):
        raise WorkspaceError("--line needs --file and must be >= 1", line=args.line)
    return TurnRequest(question=question, file=file, line=args.line, max_tokens=args.max_tokens,
                       outputs=_test_output(args.test_output))


def _test_output(name: str | None) -> tuple[tuple[str, str, str], ...]:
    """``--test-output``: the file's text (its last ``MAX_OUTPUT_CHARS``, where a run's
    failures are) as a ``test`` output."""
    from contenox_lsp.params import MAX_OUTPUT_CHARS

    if name is None:
        return ()
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text(errors="replace")
    except OSError as exc:
        raise InputError(f"--test-output: cannot read {name}: {exc.strerror or exc}",
                         test_output=name) from exc
    return (("test", "stdin" if name == "-" else Path(name).name, text[-MAX_OUTPUT_CHARS:]),)


def _context_budget(args: argparse.Namespace) -> Any:
    """The one budget beside the question from ``--context-tokens``, ``--map-tokens`` and
    ``--code-tokens`` (the server's ``contextTokens``, ``repoMapTokens``, ``codeTokens``)."""
    from contenox_lsp.context_budget import DEFAULT_CONTEXT_TOKENS, ContextBudget

    for flag, value in (("--context-tokens", args.context_tokens),
                        ("--map-tokens", args.map_tokens), ("--code-tokens", args.code_tokens)):
        if value is not None and not 0 <= value <= 65_536:
            raise InputError(f"{flag} must be between 0 and 65536",
                             **{flag[2:].replace("-", "_"): value})
    tokens = DEFAULT_CONTEXT_TOKENS if args.context_tokens is None else args.context_tokens
    return ContextBudget(tokens, map_cap=args.map_tokens, code_cap=args.code_tokens)


def _emit(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


def cmd_ask(args: argparse.Namespace) -> int:
    from engine import open_session

    if args.max_tokens < 1:
        print("contenox-lsp: error: --max-tokens must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    if args.raw:
        return _ask_raw(args)
    from contenox_lsp.workspace_session import WorkspaceTurn, resolve_workspace

    root = resolve_workspace(args.workspace)
    turn = _turn_request(args, root, args.question)
    budget = _context_budget(args)
    with open_session(_load_profile(args)) as session:
        ws = WorkspaceTurn(root, session, budget=budget)
        outcome = ws.ask(turn, (lambda _p: None) if args.json else _emit)
    if args.json:
        print(json.dumps({"text": outcome.text, "metrics": outcome.metrics}, indent=2))
    else:
        sys.stdout.write("\n")
        m = outcome.metrics
        print(
            f"[{m['reusedTokens']} of {m['promptTokens']} prompt tokens reused, "
            f"ttft {m['ttftMs']:.0f} ms, {m['decodeTokensPerSecond']:.1f} tok/s]",
            file=sys.stderr,
        )
    return EXIT_OK


def _ask_raw(args: argparse.Namespace) -> int:
    from engine import open_session
    from engine.results import drain

    profile = _load_profile(args)
    with open_session(profile) as session:
        tokens = session.tokenize(args.question, add_bos=session.profile.bos_policy == "add")
        pre = session.prefill(tokens)
        gen = drain(session.stream(max_tokens=args.max_tokens), None if args.json else _emit)
    if args.json:
        doc = {"text": gen.text, "prefill": pre.to_dict(), "generate": gen.to_dict()}
        print(json.dumps(doc, indent=2))
    else:
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_explain_context(args: argparse.Namespace) -> int:
    from contenox_lsp.workspace_session import WorkspaceTurn, resolve_workspace
    from contextasm import format_explain_table
    from engine import open_session

    root = resolve_workspace(args.workspace)
    turn = _turn_request(args, root, args.question)
    budget = _context_budget(args)
    with open_session(_load_profile(args)) as session:
        ws = WorkspaceTurn(root, session, budget=budget)
        if args.json:
            # The server's contenox/explainContext document, plus the folder it describes.
            doc = {"workspace": str(root), **ws.explain_view(turn)}
        else:
            _, exp, _ = ws.explain(turn)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(format_explain_table(exp.rows, exp.totals))
    return EXIT_OK


def cmd_eval_context(args: argparse.Namespace) -> int:
    return _bench_command("eval-context")(args, _load_profile)


def cmd_eval_compare(args: argparse.Namespace) -> int:
    return _bench_command("eval-compare")(args, _load_profile)


def cmd_eval_next_edit(args: argparse.Namespace) -> int:
    return _bench_command("eval-next-edit")(args, _load_profile)


def cmd_eval_completion(args: argparse.Namespace) -> int:
    return _bench_command("eval-completion")(args, _load_profile)


def cmd_eval_ranker(args: argparse.Namespace) -> int:
    return _bench_command("eval-ranker")(args, _load_profile)


def cmd_bench(args: argparse.Namespace) -> int:
    return _bench_command("bench")(args, _load_profile)


def _bench_command(name: str) -> Any:
    """A command of the benchmark package, found through its ``contenox_lsp.commands`` entry
    point (the server package imports nothing of the benchmark)."""
    from importlib.metadata import entry_points

    for point in entry_points(group=COMMANDS_GROUP):
        if point.name == name:
            return point.load()
    raise InputError(
        f"'{name}' is provided by the contenox_bench package, which is not installed with "
        "its entry points: reinstall the project (pip install -e .)", command=name)


def cmd_serve(args: argparse.Namespace) -> int:
    from contenox_lsp import app

    options = options_from_args(args)
    if getattr(args, "tcp", False):
        app.run_tcp(args.host, args.port, options)
    else:
        app.run_stdio(options)
    return EXIT_OK


def cmd_model_info(args: argparse.Namespace) -> int:
    from contenox_lsp.model_info import model_info, render
    from engine import open_session

    with open_session(_load_profile(args)) as session:
        doc = model_info(session)
    print(json.dumps(doc, indent=2) if args.json else render(doc))
    return EXIT_OK


def cmd_model_convert(args: argparse.Namespace) -> int:
    """``model convert``: one status line to stderr, stdout stays empty."""
    import time
    from pathlib import Path

    from engine.model_files import resolve_model_path
    from engine.openvino.convert import convert_quietly
    from engine.profile import EMBEDDED_MODEL, default_profile

    src_arg = str(args.src)
    src = resolve_model_path(default_profile()) if src_arg == EMBEDDED_MODEL else Path(src_arg)
    t0 = time.perf_counter()
    try:
        out = convert_quietly(src, None if args.out is None else Path(args.out),
                              args.weight_format)
    except ImportError as exc:
        print(f"contenox-lsp: error: conversion needs the 'convert' extra ({exc.name} missing)",
              file=sys.stderr)
        return EXIT_ERROR
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"converted {src} → {out} ({args.weight_format}, {size / 1e6:.0f} MB, "
          f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    serving = args.command in (None, "serve")
    if args.log_level is None and not serving:
        args.log_level = "warning"
    if not serving:
        _setup_logging(args.log_level)
    try:
        if args.command is None:
            return cmd_serve(args)
        if args.command == "ask":
            return cmd_ask(args)
        if args.command == "explain-context":
            return cmd_explain_context(args)
        if args.command == "profile":
            return cmd_profile_show(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "bench":
            return cmd_bench(args)
        if args.command == "model":
            if args.model_command == "info":
                return cmd_model_info(args)
            return cmd_model_convert(args)
        if args.command == "eval":
            if args.eval_command == "compare":
                return cmd_eval_compare(args)
            if args.eval_command == "next-edit":
                return cmd_eval_next_edit(args)
            if args.eval_command == "completion":
                return cmd_eval_completion(args)
            if args.eval_command == "ranker":
                return cmd_eval_ranker(args)
            return cmd_eval_context(args)
    except (EngineError, InputError) as exc:
        _print_error(exc, getattr(args, "json", False))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
