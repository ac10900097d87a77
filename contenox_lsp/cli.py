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
from typing import Any

from contenox_lsp import __version__

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


def _add_common(p: argparse.ArgumentParser, top: bool = False) -> None:
    # Subcommands repeat the options but must not overwrite values given before the command.
    keep = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--log-level",
        **({"default": "warning"} if top else keep),
        choices=["debug", "info", "warning", "error"],
        help="stderr log level, llama.cpp's own log included (default: warning)",
    )
    p.add_argument(
        "--profile", metavar="FILE", help="profile TOML (default: built-in embedded model)", **keep
    )
    p.add_argument("--model", metavar="GGUF", help="override the profile's model path", **keep)


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
        "ask", help="answer a question on the warm session and print it (streamed)"
    )
    _add_common(ask)
    ask.add_argument("question", help="the question or prompt")
    ask.add_argument("--max-tokens", type=int, default=128, help="tokens to generate (default 128)")
    ask.add_argument("--json", action="store_true", help="print the answer and metrics as JSON")
    ask.add_argument(
        "--raw",
        action="store_true",
        help="send the text as-is (no workspace context, no prompt format)",
    )

    prof = sub.add_parser("profile", help="inspect profiles")
    prof_sub = prof.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    show = prof_sub.add_parser(
        "show", help="print the effective profile and where each value came from"
    )
    _add_common(show)
    show.add_argument("--json", action="store_true")

    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    _add_common(serve)
    serve.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help=argparse.SUPPRESS)
    serve.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    return parser


def _load_profile(args: argparse.Namespace) -> Any:
    from engine import load_profile

    profile = load_profile(args.profile)
    if args.model:
        profile = profile.with_overrides({"model.path": args.model}, source="cli --model")
    return profile


def _print_error(exc: Exception, as_json: bool) -> None:
    from engine import EngineError

    if isinstance(exc, EngineError):
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


def cmd_ask(args: argparse.Namespace) -> int:
    from engine import open_session

    if args.max_tokens < 1:
        print("contenox-lsp: error: --max-tokens must be >= 1", file=sys.stderr)
        return EXIT_USAGE
    profile = _load_profile(args)
    with open_session(profile) as session:
        tokens = session.tokenize(args.question, add_bos=profile.bos_policy == "add")
        pre = session.prefill(tokens)
        stream = session.stream(max_tokens=args.max_tokens)
        while True:
            try:
                piece = next(stream)
            except StopIteration as stop:
                gen = stop.value
                break
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
    if args.json:
        print(
            json.dumps(
                {"text": gen.text, "prefill": pre.to_dict(), "generate": gen.to_dict()}, indent=2
            )
        )
    else:
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from contenox_lsp import server

    if args.tcp:
        server.run_tcp(args.host, args.port, args)
    else:
        server.run_stdio(args)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level)
    from engine import EngineError

    try:
        if args.command is None:
            args.tcp = False
            return cmd_serve(args)
        if args.command == "ask":
            return cmd_ask(args)
        if args.command == "profile":
            return cmd_profile_show(args)
        if args.command == "serve":
            return cmd_serve(args)
    except EngineError as exc:
        _print_error(exc, getattr(args, "json", False))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
