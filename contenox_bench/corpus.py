"""Prompt material for the engine sections: real source text from the standard library.

The stable prefix is laid out like the server's segments (system, tools, repo map, pinned
files) so that "edit a stable segment" means what it means in the product; changed suffixes
come from other files, so a suffix never shares a first token with the previous one by accident.
"""

from __future__ import annotations

import ast
import json
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Files that exist in every CPython 3.11+ standard library; missing ones are skipped.
STABLE_FILES = ("json/decoder.py", "json/encoder.py", "json/scanner.py", "textwrap.py",
                "shlex.py", "difflib.py", "argparse.py", "ast.py", "dataclasses.py")
CHANGE_FILES = ("csv.py", "fnmatch.py", "glob.py", "string.py", "tokenize.py", "inspect.py",
                "configparser.py", "pathlib.py", "typing.py", "functools.py")
REPO_MAP_FILES = ("json/decoder.py", "json/encoder.py", "json/scanner.py", "textwrap.py",
                  "shlex.py", "difflib.py", "argparse.py", "csv.py", "fnmatch.py", "glob.py")

SYSTEM_TEXT = (
    "You are Contenox, a coding assistant that runs locally next to the editor. Answer from the "
    "repository context below; say so when it is not enough. Prefer short answers with code.\n\n"
)
TOOLS = [
    {"name": "open_file", "description": "Open a file in the editor",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
    {"name": "run_tests", "description": "Run the test suite and return its output",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}},
    {"name": "apply_edit", "description": "Replace a range of lines in a file",
     "parameters": {"type": "object", "properties": {
         "path": {"type": "string"}, "start": {"type": "integer"},
         "end": {"type": "integer"}, "text": {"type": "string"}}}},
    {"name": "search", "description": "Search the repository for a symbol or text",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
]
#: The untimed request after each reset (``cold_reset``): plain text, so its first token is
#: neither BOS nor a turn marker and no measured prompt shares a prefix (or a KV block) with it.
PRIMER_TEXT = ("# warm-up: a short unrelated request, run before each cold measurement so that "
               "a rebuilt pipeline's one-time setup is not timed\n")
GEMMA_OPEN = "<start_of_turn>user\n"
GEMMA_CLOSE = "<end_of_turn>\n<start_of_turn>model\n"


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]
    # (label, token_start, token_end) of each segment, in order.
    segments: tuple[tuple[str, int, int], ...]


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_stdlib(names: Sequence[str]) -> list[tuple[str, str]]:
    """(name, text) of each standard-library file of ``names`` that exists."""
    root = stdlib_root()
    out = []
    for name in names:
        path = root / name
        if path.is_file():
            out.append((name, path.read_text("utf-8", errors="replace")))
    return out


def repo_map_text(edited: bool = False) -> str:
    """Top-level definitions and signatures, like the server's repo map segment."""
    lines = ["# Repository map", ""]
    first_def = True
    for name, text in read_stdlib(REPO_MAP_FILES):
        lines.append(f"{name}:")
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = ast.unparse(node.args)
                if edited and first_def:
                    # The "signature change" of an edited stable segment.
                    args = f"{args}, *, strict=False" if args else "*, strict=False"
                first_def = False
                lines.append(f"  def {node.name}({args})")
            elif isinstance(node, ast.ClassDef):
                lines.append(f"  class {node.name}")
    return "\n".join(lines) + "\n\n"


class Corpus:
    """Token material built once per session (tokenizing is not free on 2 cores)."""

    def __init__(self, session: Any) -> None:
        self._s = session
        bos = [session.bos_token_id] if session.bos_token_id is not None else []
        self.head = bos + session.tokenize(GEMMA_OPEN, special=True)
        self.close = session.tokenize(GEMMA_CLOSE, special=True)
        self._system = session.tokenize(SYSTEM_TEXT, special=False)
        tools = "# Tools\n\n" + "\n".join(json.dumps(t, sort_keys=True) for t in TOOLS) + "\n\n"
        self._tools = session.tokenize(tools, special=False)
        self._map = session.tokenize(repo_map_text(False), special=False)
        self._map_edited = session.tokenize(repo_map_text(True), special=False)
        pinned = "".join(f"# Pinned: {n}\n\n```\n{t}```\n\n" for n, t in read_stdlib(STABLE_FILES))
        self._pinned = session.tokenize(pinned, special=False)
        change = "".join(f"# {n}\n{t}\n" for n, t in read_stdlib(CHANGE_FILES))
        self._change = session.tokenize(change, special=False)
        self._primer = primer_tokens(session)
        self._used_first: set[int] = set()
        self._offsets: dict[int, int] = {}

    def stable(self, n: int, *, edited: bool = False) -> Prompt:
        """The stable prefix, exactly ``n`` tokens (the pinned files fill the rest)."""
        parts = [
            ("system", self.head + self._system),
            ("tools", self._tools),
            ("repo map", self._map_edited if edited else self._map),
            ("pinned", _cycle(self._pinned, n)),
        ]
        tokens: list[int] = []
        segments = []
        for label, toks in parts:
            take = toks[: max(0, n - len(tokens))]
            if take:
                segments.append((label, len(tokens), len(tokens) + len(take)))
                tokens.extend(take)
        return Prompt(tokens=tokens, segments=tuple(segments))

    def suffix(self, n: int, variant: int) -> list[int]:
        """``n`` changed tokens; each variant starts with a token no other variant started with,
        so consecutive prompts share exactly the stable prefix."""
        if n <= 0:
            return []
        src = _cycle(self._change, n + len(self._change))
        off = self._offsets.get(variant)
        if off is None:
            off = (variant * 7919) % len(self._change)
            while src[off] in self._used_first:
                off = (off + 1) % len(self._change)
            self._used_first.add(src[off])
            self._offsets[variant] = off
        return src[off : off + n]

    def question(self, n: int, variant: int) -> list[int]:
        """A user turn of ``n`` tokens ending with the format's closing markers."""
        body = self.suffix(max(1, n - len(self.close)), variant)
        return body + self.close

    def filler(self, n: int) -> list[int]:
        return _cycle(self._pinned, n)[:n]

    def primer(self) -> list[int]:
        return list(self._primer)


def primer_tokens(session: Any) -> list[int]:
    """``PRIMER_TEXT`` in the session's tokens (see ``cold_reset``)."""
    return list(session.tokenize(PRIMER_TEXT, special=False))


#: Backends whose ``reset()`` means "the next request recomputes its prompt" (engine.remote).
REMOTE_BACKENDS = ("llama-server", "openai")


def cold_reset(session: Any, primer: Sequence[int]) -> None:
    """An empty cache, then one short unrelated request (not timed) before a cold measurement.

    ``reset()`` clears llama.cpp's KV but rebuilds OpenVINO's whole pipeline (its prefix cache
    lives there), whose first inference then pays a one-time setup a running server never pays
    again; the primer takes that cost, so "cold" means "nothing cached" on every backend. A
    remote server has no such setup, and its reset holds for the next request only (which must
    be the measured one: llama-server would otherwise find the prompt in its RAM prompt cache,
    ``--cache-ram``), so there is no primer.
    """
    session.reset()
    if getattr(session, "backend", "") not in REMOTE_BACKENDS:
        session.prefill(primer)


def _cycle(tokens: list[int], n: int) -> list[int]:
    if not tokens:
        raise RuntimeError("the corpus is empty: the standard library sources were not found")
    reps = n // len(tokens) + 1
    return (tokens * reps)[: max(n, len(tokens))]
