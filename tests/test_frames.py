"""Frames of a traceback in a test's output, resolved to files inside the workspace only."""

from __future__ import annotations

from pathlib import Path

from contenox_lsp.frames import Frame, frames_in, workspace_places

TRACEBACK = """\
Traceback (most recent call last):
  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main
  File "{root}/pkg/api.py", line 4, in load
    return parse(text)
  File "pkg/parse.py", line 7, in parse
    raise ValueError(text)
ValueError: boom
"""

PYTEST_TEMPLATE = """\
    def test_load():
>       load("x")

tests/test_api.py:3: {space}
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
pkg/api.py:4: in load
    return parse(text)
pkg/parse.py:7: ValueError
"""
PYTEST = PYTEST_TEMPLATE.format(space="")  # pytest ends the line of a frame with a space


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "api.py").write_text("from pkg.parse import parse\n\n\ndef load(text):\n"
                                         "    return parse(text)\n")
    (root / "pkg" / "parse.py").write_text("\n" * 6 + "def parse(text):\n    raise ValueError\n")
    (root / "tests" / "test_api.py").write_text("def test_load():\n    load('x')\n")
    return root


def test_a_traceback_and_pytests_short_lines_give_frames() -> None:
    assert frames_in(TRACEBACK.format(root="/w")) == [
        Frame("/usr/lib/python3.11/runpy.py", 198, "_run_module_as_main"),
        Frame("/w/pkg/api.py", 4, "load"),
        Frame("pkg/parse.py", 7, "parse"),
    ]
    assert frames_in(PYTEST) == [Frame("tests/test_api.py", 3), Frame("pkg/api.py", 4, "load"),
                                 Frame("pkg/parse.py", 7)]
    assert frames_in("no frames here: x.py line 3\n") == []


def test_places_are_inside_the_workspace_innermost_first(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    outside = tmp_path / "elsewhere.py"
    outside.write_text("secret = 1\n")
    (root / "pkg" / "link.py").symlink_to(outside)
    text = TRACEBACK.format(root=root) + (
        f'  File "{outside}", line 1, in secret\n'
        '  File "../elsewhere.py", line 1, in secret\n'
        '  File "pkg/link.py", line 1, in secret\n'
        '  File "pkg/missing.py", line 2, in gone\n'
    )
    places = workspace_places([("test", "pytest", text)], [root])
    api = str((root / "pkg" / "api.py").resolve())
    parse = str((root / "pkg" / "parse.py").resolve())
    assert places == ((parse, 6), (api, 3))  # 0-based lines; runpy and the rest left out
    assert workspace_places([("test", "pytest", PYTEST)], [root]) == (
        (parse, 6), (api, 3), (str((root / "tests" / "test_api.py").resolve()), 2))


def test_an_earlier_turn_is_not_evidence_and_the_places_are_bounded(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    assert workspace_places([("turn", "earlier turn 1", PYTEST)], [root]) == ()
    assert len(workspace_places([("terminal", "shell", PYTEST)], [root], limit=2)) == 2
