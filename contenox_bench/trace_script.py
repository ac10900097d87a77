"""The scripted editing session of the edit-trace replay: workspace, targets and steps.

Targets are found with ``ast`` so any Python workspace works: a file whose functions get body
edits, another file with a one-line signature to change, a third file to pin. Edits are typed
one character per ``didChange`` at the start of a line (ASCII only, so utf-16 columns are
character counts).
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from contenox_bench.corpus import stdlib_root

#: Part of the running interpreter's standard library: a small real package plus neighbours.
STDLIB_PART = ("json", "textwrap.py", "shlex.py", "fnmatch.py", "glob.py")
STDLIB_TARGETS = ("json/decoder.py", "json/encoder.py", "json/scanner.py")
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox"}
_SIG = re.compile(r"^(\s*)def (\w+)\((.*)\)(\s*->\s*[^:]+)?:\s*$")


def copy_stdlib_part(dest: Path) -> Path:
    root = dest / "workspace"
    src = stdlib_root()
    for name in STDLIB_PART:
        p = src / name
        if p.is_dir():
            shutil.copytree(p, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        elif p.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, root / name)
    return root


@dataclass(frozen=True)
class Func:
    name: str
    arg: str  # first parameter that is not self/cls ("" when none)


@dataclass
class Targets:
    edit_file: Path
    funcs: list[Func]  # body_edit → funcs[0]; body_edit_2 and _3 → funcs[1]
    sig_file: Path
    sig_func: str
    pin_file: Path


@dataclass(frozen=True)
class Typed:
    """Text typed at (line, character), one character per didChange."""

    path: Path
    line: int
    character: int
    text: str


@dataclass
class Step:
    kind: str
    question: str
    cursor: tuple[Path, int]  # (file, 0-based line) of the ask
    open_files: list[Path] = field(default_factory=list)
    typing: list[Typed] = field(default_factory=list)
    pin: Path | None = None


def _py_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if any(part in _SKIP_DIRS or part.startswith(".") for part in rel[:-1]):
            continue
        if p.stat().st_size > 200_000 or "test" in p.name:
            continue
        out.append(p)
    return out


def _body_candidates(text: str) -> list[Func]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or len(node.body) < 3:
            continue
        if not _SIG.match(lines[node.lineno - 1]):
            continue  # decorators / multi-line signatures: keep the script simple
        args = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
        out.append(Func(node.name, args[0] if args else ""))
    # Unique names only: a step finds its function again by name after earlier edits.
    names = [f.name for f in out]
    return [f for f in out if names.count(f.name) == 1]


def _sig_candidate(text: str) -> str | None:
    for line in text.splitlines():
        m = _SIG.match(line)
        params = m.group(3) if m else ""
        if m and params.strip() and not {"=", "*", "(", ")"} & set(params) \
                and m.group(2) != "__init__":
            if len(re.findall(rf"^\s*def {m.group(2)}\(", text, re.M)) == 1:
                return m.group(2)
    return None


def find_targets(root: Path, preferred: tuple[str, ...] = ()) -> Targets:
    files = [root / p for p in preferred if (root / p).is_file()] or _py_files(root)
    if not files:
        raise ValueError(f"no Python files to edit under {root}")
    texts = {p: p.read_text("utf-8", errors="replace") for p in files}
    ranked = sorted(files, key=lambda p: (-len(_body_candidates(texts[p])), str(p)))
    if preferred:
        ranked = files
    edit_file = ranked[0]
    funcs = _body_candidates(texts[edit_file])
    if len(funcs) < 2:
        raise ValueError(f"{edit_file} has fewer than two functions to edit")
    rest = [p for p in files if p != edit_file]
    sig_file = next((p for p in rest if _sig_candidate(texts[p])), edit_file)
    sig_func = _sig_candidate(texts[sig_file])
    if sig_func is None:
        raise ValueError("no one-line function signature to change")
    pins = [p for p in rest if p != sig_file] or [sig_file]
    pin_file = min(pins[:5], key=lambda p: abs(len(texts[p]) - 6000))
    return Targets(edit_file, funcs[:2], sig_file, sig_func, pin_file)


def _def_line(text: str, name: str) -> int:
    for i, line in enumerate(text.splitlines()):
        m = _SIG.match(line)
        if m and m.group(2) == name:
            return i
    raise ValueError(f"def {name} not found")


def _last_stmt(text: str, name: str) -> tuple[int, int]:
    """(0-based line, indent) of the last statement of function ``name``."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            last = node.body[-1]
            return last.lineno - 1, last.col_offset
    raise ValueError(f"function {name} not found")


def pytest_failure_text(t: Targets, root: Path, func: Func) -> str:
    """A pytest failure block about the function just edited (what a user pastes)."""
    rel = t.edit_file.relative_to(root).as_posix()
    arg = func.arg or "value"
    bar = "=" * 29
    lines = [
        f"{bar} test session starts {bar}",
        "platform linux -- Python 3.11, pytest-8.3.4, pluggy-1.5.0",
        f"rootdir: {root.name}",
        "collected 24 items",
        "",
        f"tests/test_{t.edit_file.stem}.py ....F...................       [100%]",
        "",
        f"{'=' * 35} FAILURES {'=' * 35}",
        f"{'_' * 24} test_{func.name}_rejects_missing_{arg} {'_' * 24}",
        "",
        f"    def test_{func.name}_rejects_missing_{arg}():",
        "        with pytest.raises(TypeError):",
        f">           {func.name}(None)",
        "",
        f"tests/test_{t.edit_file.stem}.py:41: ",
        "_ " * 40,
        "",
        f"    def {func.name}({arg}):",
        f"        if {arg} is None:",
        f">           raise ValueError(\"{arg} is required\")",
        f"E           ValueError: {arg} is required",
        "",
        f"{rel}:{_def_line(t.edit_file.read_text('utf-8'), func.name) + 3}: ValueError",
        f"{'=' * 31} short test summary info {'=' * 31}",
        f"FAILED tests/test_{t.edit_file.stem}.py::test_{func.name}_rejects_missing_{arg} - "
        f"ValueError: {arg} is required",
        f"{'=' * 26} 1 failed, 23 passed in 0.84s {'=' * 26}",
    ]
    return "\n".join(lines)


class Script:
    """Plans each step against the current buffer texts (earlier edits move lines)."""

    def __init__(self, root: Path, targets: Targets) -> None:
        self.root = root
        self.t = targets
        self.cursor: tuple[Path, int] = (targets.edit_file, 0)

    def plan(self, kind: str, texts: dict[Path, str]) -> Step:
        t = self.t
        f0 = t.funcs[0]
        edit_text = texts.get(t.edit_file) or t.edit_file.read_text("utf-8")
        if kind == "open":
            self.cursor = (t.edit_file, _def_line(edit_text, f0.name))
            return Step(kind, f"What does {f0.name} do?", self.cursor, open_files=[t.edit_file])
        if kind.startswith("body_edit"):
            func = f0 if kind == "body_edit" else t.funcs[1]
            line, indent = _last_stmt(edit_text, func.name)
            pad = " " * indent
            if kind == "body_edit":
                arg = func.arg or "value"
                code = f'{pad}if {arg} is None:\n{pad}    raise ValueError("{arg} is required")\n'
                q = f"Is the check I just added to {func.name} correct?"
            elif kind == "body_edit_2":
                code = f"{pad}# keep the old behaviour for empty input\n{pad}_count = 0\n"
                q = f"Does my change to {func.name} keep the old behaviour?"
            else:
                code = f"{pad}_count += 1  # how often this path runs\n"
                q = f"Explain my last edit to {func.name}."
            # The ask is where the typing left the cursor (the line after the new code), as an
            # editor sends it.
            self.cursor = (t.edit_file, line + code.count("\n"))
            return Step(kind, q, self.cursor, typing=[Typed(t.edit_file, line, 0, code)])
        if kind == "signature":
            sig_text = texts.get(t.sig_file) or t.sig_file.read_text("utf-8")
            line = _def_line(sig_text, t.sig_func)
            m = _SIG.match(sig_text.splitlines()[line])
            assert m is not None
            col = m.end(3)  # the parameter list's closing parenthesis
            self.cursor = (t.sig_file, line)
            opened = [] if t.sig_file in texts else [t.sig_file]
            return Step(kind, f"I added a strict parameter to {t.sig_func}. Which callers need "
                        "to change?", self.cursor, open_files=opened,
                        typing=[Typed(t.sig_file, line, col, ", strict=False")])
        if kind == "pin":
            rel = t.pin_file.relative_to(self.root).as_posix()
            self.cursor = (t.edit_file, _def_line(edit_text, f0.name))
            return Step(kind, f"How is {rel} used by {f0.name}?", self.cursor, pin=t.pin_file)
        if kind == "test_output":
            out = pytest_failure_text(t, self.root, f0)
            self.cursor = (t.edit_file, _def_line(edit_text, f0.name))
            return Step(kind, "The tests fail with this output. What is wrong?\n\n" + out,
                        self.cursor)
        raise ValueError(f"unknown trace step {kind!r}")
