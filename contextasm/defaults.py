"""What every prompt starts from unless the workspace says otherwise: the built-in system
prompt and task policy, and the schemas of the actions the server offers. Pure: the
workspace's own files are read by ``contenox_lsp.workspace_reads``."""

from __future__ import annotations

from typing import Any

DEFAULT_SYSTEM_PROMPT = """\
You are Contenox, a coding assistant that runs locally next to the developer's editor.
You see one repository through the context below: tool schemas, a task policy, the
repository's own instructions, a map of its files and symbols, pinned files, the current
uncommitted changes, diagnostics and test output, and finally the developer's request.
Answer precisely and briefly. Refer to code by file path and line. When you propose a code
change, show it as a unified diff against the current file contents."""

DEFAULT_TASK_POLICY = """\
- Ground every statement in the context given; if it is not enough, say what is missing.
- Prefer the smallest change that solves the problem; keep the surrounding code style.
- Do not invent functions, modules or APIs that the repository map does not show.
- The diff section is the developer's uncommitted work: it is the most likely place of a bug.
- Pinned files are the ones the developer marked as relevant: read them first.
- Diagnostics or output marked (stale) predate the latest edit and may no longer apply."""


def default_task_policy() -> str:
    return DEFAULT_TASK_POLICY


def default_tool_schemas() -> list[dict[str, Any]]:
    """JSON schemas of the actions the server offers: explain, fix, docstring, pin, unpin."""
    path = {"type": "string", "description": "workspace-relative file path"}
    line = {"type": "integer", "minimum": 1}
    return [
        _tool(
            "explain",
            "Explain what the code in a line range does and why.",
            {"path": path, "start_line": line, "end_line": line},
            ["path", "start_line"],
        ),
        _tool(
            "fix",
            "Propose a fix for the code in a line range (and the diagnostic there), "
            "as a unified diff.",
            {
                "path": path,
                "start_line": line,
                "end_line": line,
                "diagnostic": {"type": "string", "description": "the diagnostic message"},
            },
            ["path", "start_line"],
        ),
        _tool(
            "docstring",
            "Write a docstring for the function or class defined at a line.",
            {"path": path, "line": line},
            ["path", "line"],
        ),
        _tool(
            "pin",
            "Pin a file or a line range into the stable context.",
            {"path": path, "start_line": line, "end_line": line},
            ["path"],
        ),
        _tool(
            "unpin",
            "Remove a pinned file or range from the stable context.",
            {"path": path, "start_line": line, "end_line": line},
            ["path"],
        ),
    ]


def _tool(
    name: str, description: str, props: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        },
    }
