"""PROTOCOL.md is the one contract: what the server registers is documented there, what is
documented there is registered, and the VS Code extension's protocol.ts follows it."""

from __future__ import annotations

import re
from pathlib import Path

from contenox_lsp.app import build_server
from contenox_lsp.errors import ERROR_NUMBERS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "contenox_lsp" / "PROTOCOL.md").read_text("utf-8")
PROTOCOL_TS = (ROOT / "editors" / "vscode" / "src" / "protocol.ts").read_text("utf-8")


def _section(title_re: str) -> str:
    """The text of the first ``#`` heading matching ``title_re`` up to the next heading of
    the same or a higher level."""
    m = re.search(rf"^(#+) {title_re}.*$", DOC, re.M)
    assert m is not None, title_re
    level = len(m.group(1))
    rest = DOC[m.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def documented_requests() -> set[str]:
    heads = re.findall(r"^#### (.+)$", DOC, re.M)
    return {name for h in heads for name in re.findall(r"`(contenox/\w+)`", h)}


def documented_commands() -> set[str]:
    table = _section("Code actions and commands")
    return set(re.findall(r"`(contenox\.\w+)`", table))


def registered() -> tuple[set[str], set[str]]:
    fm = build_server().protocol.fm
    return set(fm.features), set(fm.commands)


def test_every_registered_request_is_documented_and_vice_versa() -> None:
    features, _ = registered()
    custom = {m for m in features if m.startswith("contenox/")}
    assert custom == documented_requests()


def test_every_registered_command_is_documented_and_vice_versa() -> None:
    _, commands = registered()
    assert commands == documented_commands()


def test_every_standard_method_the_server_handles_is_mentioned() -> None:
    features, _ = registered()
    standard = {m for m in features if not m.startswith(("contenox/", "$/"))}
    lifecycle = {"initialize", "initialized", "shutdown", "exit"}
    missing = {m for m in standard - lifecycle if f"`{m}`" not in DOC}
    assert missing == set()


def test_every_error_code_is_in_the_table() -> None:
    table = _section("Errors")
    for code, number in ERROR_NUMBERS.items():
        if code == "invalid_params":
            assert "InvalidParams (-32602)" in DOC
            continue
        assert re.search(rf"`{code}` \| {number}\b", table), code


def test_protocol_ts_follows_the_document() -> None:
    methods = set(re.findall(r"'(contenox/\w+)'", PROTOCOL_TS))
    assert methods == documented_requests()
    commands = set(re.findall(r"'(contenox\.\w+)'", PROTOCOL_TS))
    assert commands == documented_commands()
    explain = _section("`contenox/explainContext`")
    top = re.sub(r"\{[^{}]*\}", "{}", explain.split('"segments"')[0])  # nested objects out
    documented = set(re.findall(r'"(\w+)":', top))
    interface = re.search(r"export interface ExplainResult \{(.*?)\n\}", PROTOCOL_TS, re.S)
    assert interface is not None
    fields = set(re.findall(r"^\s+(\w+)\??:", interface.group(1), re.M))
    assert documented | {"segments", "dropped"} == fields


def test_the_readme_links_to_the_document_instead_of_repeating_it() -> None:
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "contenox_lsp/PROTOCOL.md" in readme
    assert "#### `contenox/" not in readme
