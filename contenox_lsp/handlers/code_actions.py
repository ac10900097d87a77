"""Code actions and their ``workspace/executeCommand`` commands.

Actions are cheap to list (no model call); the model runs only when the client executes the
command. Prose answers come back as the command result and a ``window/showMessage``; code
answers (fix, docstring) become a ``WorkspaceEdit`` applied through ``workspace/applyEdit``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any

from lsprotocol import types

from contenox_lsp import params as P
from contenox_lsp.documents import open_document
from contenox_lsp.handlers.common import (
    add_pin,
    remove_pins,
    run_cancellable,
    runtime,
    single_arg,
    text_of,
    turn_for,
)
from contenox_lsp.paths import relative_to_roots
from contenox_lsp.server import ContenoxServer
from contenox_lsp.turn import TurnSpec, line_span

logger = logging.getLogger(__name__)

CMD_EXPLAIN = "contenox.explain"
CMD_FIX = "contenox.fix"
CMD_DOCSTRING = "contenox.docstring"
CMD_PIN = "contenox.pin"
CMD_UNPIN = "contenox.unpin"

# Custom sub-kinds (lsprotocol accepts plain strings next to the enum).
KIND_EXPLAIN = "refactor.contenox.explain"
KIND_DOCSTRING = "refactor.contenox.docstring"
KIND_PIN = "source.contenox.pin"

_DEF_RE = re.compile(r"^(\s*)(async\s+def|def|class)\s+\w+")
_FENCE_RE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1\s*$", re.S | re.M)


#: The kinds ``textDocument/codeAction`` offers (advertised in the server capabilities).
CODE_ACTION_OPTIONS = types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, KIND_EXPLAIN, KIND_DOCSTRING, KIND_PIN],
    resolve_provider=False,
)


def code_action(ls: ContenoxServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    path = ls.checked_path(uri)  # outside the workspace: InvalidParams, like every request
    rng = params.range
    actions: list[types.CodeAction] = []
    loc = {"uri": uri, "range": _range_json(rng)}
    has_selection = rng.start != rng.end
    if has_selection:
        actions.append(_action("Contenox: Explain selection", KIND_EXPLAIN, CMD_EXPLAIN, [loc]))
    for diag in params.context.diagnostics:
        arg = {"uri": uri, "range": _range_json(diag.range), "diagnostic": _diag_json(diag)}
        short = diag.message.splitlines()[0][:60] if diag.message else "diagnostic"
        act = _action(f"Contenox: Fix this diagnostic ({short})",
                      types.CodeActionKind.QuickFix, CMD_FIX, [arg])
        act.diagnostics = [diag]
        actions.append(act)
    text = text_of(ls, path)
    if text is not None and def_line_at(text, rng.start.line) is not None:
        actions.append(_action("Contenox: Add docstring", KIND_DOCSTRING, CMD_DOCSTRING, [loc]))
    if ls.pins.is_pinned(path):
        actions.append(_action("Contenox: Unpin this file", KIND_PIN, CMD_UNPIN, [{"uri": uri}]))
    else:
        actions.append(_action("Contenox: Pin this file", KIND_PIN, CMD_PIN, [{"uri": uri}]))
    only = params.context.only
    rt = ls.runtime
    if (not has_selection and not only and rt is not None
            and open_document(ls.workspace, path) is not None):
        # Editors ask for the actions at the cursor as it moves (VS Code does so on every
        # move): where the user is, so the idle prefill warms an ask there.
        rt.cursor_at(path, rng.start.line)
    if only:
        actions = [a for a in actions if a.kind is not None and _kind_matches(a.kind, only)]
    return actions


# -- commands -----------------------------------------------------------------------------------

async def cmd_explain(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    uri, rng = _loc_arg(args, CMD_EXPLAIN)
    path = ls.checked_path(uri)
    turn = turn_for(ls, path, rng, rng.start, "Explain what the selected code does.")
    out = await run_cancellable(ls, runtime(ls).run_prompt(turn, ls.options.max_tokens))
    ls.show(out["text"] or "(no answer)")
    return out


async def cmd_fix(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    arg = single_arg(args, CMD_FIX)
    uri = P.req_str(arg, "uri", "arguments[0]")
    # The action sends the diagnostic's range as ``range`` too (the documented argument);
    # the lines to fix are the diagnostic's.
    P.range_(arg.get("range"), "arguments[0].range")
    diag = P.diagnostic(arg.get("diagnostic"), "arguments[0].diagnostic")
    path = ls.checked_path(uri)
    text = text_of(ls, path)
    if text is None:
        raise P.invalid(f"{uri} cannot be read")
    first, last = diag.range.start.line, _last_line(diag.range)
    lines_rng = types.Range(start=types.Position(line=first, character=0),
                            end=types.Position(line=last, character=0))
    where = f"{relative_to_roots(path, ls.roots())}:{first + 1}"
    question = (
        f"Fix this problem: {diag.message}\n"
        "Reply with the corrected version of the selected lines in one fenced code block."
    )
    outputs = (("diagnostics", where, f"line {first + 1}: {diag.message}"),)
    turn = turn_for(ls, path, lines_rng, lines_rng.start, question, outputs)
    turn = _with_selection(turn, line_span(text, first, last))
    # The fix rewrites the selected lines: prompt lookup drafts them from the prompt.
    out = await run_cancellable(ls, runtime(ls).run_prompt(turn, ls.options.max_tokens,
                                                           rewrite=True))
    code = first_code_block(out["text"])
    if code is None:
        ls.show("Contenox: the answer has no code block; nothing applied.\n\n" + out["text"])
        return {**out, "applied": False}
    edit_range = types.Range(start=types.Position(line=first, character=0),
                             end=types.Position(line=last + 1, character=0))
    new_text = code if code.endswith("\n") else code + "\n"
    applied = await _apply(ls, uri, edit_range, new_text, "Contenox: fix diagnostic")
    return {**out, "applied": applied}


async def cmd_docstring(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    uri, rng = _loc_arg(args, CMD_DOCSTRING)
    path = ls.checked_path(uri)
    text = text_of(ls, path)
    if text is None:
        raise P.invalid(f"{uri} cannot be read")
    found = def_line_at(text, rng.start.line)
    if found is None:
        raise P.invalid("no function or class definition at this position")
    def_line, indent = found
    body_end = max(_last_line(rng), def_line + 1)
    code = line_span(text, def_line, min(body_end + 20, def_line + 60))
    sel_rng = types.Range(start=types.Position(line=def_line, character=0),
                          end=types.Position(line=body_end, character=0))
    question = ("Write a concise docstring for this definition. "
                "Reply with the docstring text only, no code.")
    turn = _with_selection(turn_for(ls, path, sel_rng, sel_rng.start, question), code)
    out = await run_cancellable(ls, runtime(ls).run_prompt(turn, ls.options.max_tokens))
    doc = clean_docstring(out["text"])
    if not doc:
        ls.show("Contenox: the model gave no docstring.")
        return {**out, "applied": False}
    insert_at = signature_end(text, def_line) + 1
    pad = indent + "    "
    body = doc.replace('"""', r"\"\"\"")
    lines = body.split("\n")
    rendered = pad + '"""' + lines[0] + ("\n" + "\n".join(
        (pad + ln) if ln.strip() else "" for ln in lines[1:]) + "\n" + pad if len(lines) > 1
        else "") + '"""\n'
    pos = types.Position(line=insert_at, character=0)
    applied = await _apply(ls, uri, types.Range(start=pos, end=pos), rendered,
                           "Contenox: add docstring")
    return {**out, "applied": applied, "docstring": doc}


async def cmd_pin(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    arg = single_arg(args, CMD_PIN)
    return await add_pin(ls, P.req_str(arg, "uri", "arguments[0]"),
                         P.opt_range(arg, "range", "arguments[0]"))


async def cmd_unpin(ls: ContenoxServer, *args: Any) -> dict[str, Any]:
    arg = single_arg(args, CMD_UNPIN)
    return remove_pins(ls, P.req_str(arg, "uri", "arguments[0]"),
                       P.opt_range(arg, "range", "arguments[0]"))


# -- helpers ------------------------------------------------------------------------------------

def first_code_block(answer: str) -> str | None:
    m = _FENCE_RE.search(answer)
    return m.group(2) if m else None


def clean_docstring(answer: str) -> str:
    """Model answer → docstring body: unfenced, unquoted, trimmed."""
    text = answer.strip()
    block = first_code_block(text + "\n")
    if block is not None:
        text = block.strip()
    for q in ('"""', "'''"):
        if text.startswith(q):
            text = text[3:]
        if text.endswith(q):
            text = text[:-3]
    return text.strip()


def def_line_at(text: str, line: int) -> tuple[int, str] | None:
    """The nearest ``def``/``class`` line at or above ``line`` (Python), with its indent."""
    lines = text.splitlines()
    for i in range(min(line, len(lines) - 1), -1, -1):
        m = _DEF_RE.match(lines[i])
        if m:
            return i, m.group(1)
    return None


def signature_end(text: str, def_line: int) -> int:
    """Last line of a (possibly multi-line) signature: the first line ending with ':'."""
    lines = text.splitlines()
    for i in range(def_line, min(len(lines), def_line + 30)):
        if lines[i].split("#", 1)[0].rstrip().endswith(":"):
            return i
    return def_line


def _with_selection(turn: TurnSpec, selection: str) -> TurnSpec:
    return replace(turn, selection=selection or None, cursor_context=None)


async def _apply(ls: ContenoxServer, uri: str, rng: types.Range, new_text: str,
                 label: str) -> bool:
    edit = types.WorkspaceEdit(changes={uri: [types.TextEdit(range=rng, new_text=new_text)]})
    try:
        result = await ls.workspace_apply_edit_async(
            types.ApplyWorkspaceEditParams(edit=edit, label=label)
        )
    except Exception as exc:
        logger.info("workspace/applyEdit failed: %s", exc)
        ls.show(f"Contenox: could not apply the edit: {exc}", types.MessageType.Warning)
        return False
    applied = bool(getattr(result, "applied", False))
    if not applied:
        reason = getattr(result, "failure_reason", None) or "refused by the editor"
        ls.show(f"Contenox: edit not applied ({reason})", types.MessageType.Warning)
    return applied


def _loc_arg(args: tuple[Any, ...], cmd: str) -> tuple[str, types.Range]:
    arg = single_arg(args, cmd)
    uri = P.req_str(arg, "uri", "arguments[0]")
    rng = P.range_(arg.get("range"), "arguments[0].range")
    return uri, rng


def _last_line(rng: types.Range) -> int:
    if rng.end.character == 0 and rng.end.line > rng.start.line:
        return rng.end.line - 1
    return rng.end.line


def _action(title: str, kind: types.CodeActionKind | str, command: str,
            arguments: list[Any]) -> types.CodeAction:
    return types.CodeAction(
        title=title, kind=kind,
        command=types.Command(title=title, command=command, arguments=arguments),
    )


def _kind_matches(kind: str, only: Any) -> bool:
    return any(kind == o or kind.startswith(f"{o}.") or o == "" for o in only)


def _range_json(r: types.Range) -> dict[str, Any]:
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


def _diag_json(d: types.Diagnostic) -> dict[str, Any]:
    out: dict[str, Any] = {"range": _range_json(d.range), "message": d.message}
    if d.source is not None:
        out["source"] = d.source
    if d.code is not None:
        out["code"] = d.code
    return out


#: Every ``workspace/executeCommand`` command and its handler (PROTOCOL.md documents each).
COMMANDS = {
    CMD_EXPLAIN: cmd_explain,
    CMD_FIX: cmd_fix,
    CMD_DOCSTRING: cmd_docstring,
    CMD_PIN: cmd_pin,
    CMD_UNPIN: cmd_unpin,
}
