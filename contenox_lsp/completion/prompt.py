"""The token layout of a completion prompt.

Both layouts start with the repository-level context (the repo map and pins the chat prompt's
stable region holds, as plain text) and a file header, and end with the local window, so the
repository part stays warm and a keystroke only adds tokens at the end:

- ``prefix`` (models without FIM tokens, such as the embedded Gemma 3 base model): the code
  before the cursor, continued by the model.
- ``fim`` (models whose vocabulary has FIM tokens): ``<prefix>`` context + code before the
  cursor ``<suffix>`` code after the cursor ``<middle>``. The suffix follows the growing
  prefix, so it is prefilled again on each keystroke; it is kept short (``LINES_AFTER``).
- ``fim`` in the **repository layout** (vocabularies with repository tokens too: Qwen2.5-Coder's
  ``<|repo_name|>``/``<|file_sep|>``), the layout those models were trained on and
  llama-server's ``/infill`` builds: ``<repo>`` name, then each file the context holds as
  ``<sep>`` path + content (the repo map's definitions, the pins), then ``<sep>`` the current
  path and the FIM prompt. The repository part still comes first and stays warm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contenox_lsp.completion.window import CursorWindow
from contextasm import render
from contextasm.tokens import default_token_cache
from engine import Session
from engine.fim import FimTokens

MODES = ("auto", "prefix", "fim")


@dataclass(frozen=True)
class CompletionPrompt:
    tokens: list[int]
    mode: str  # "prefix" or "fim"
    context_tokens: int  # the repository-level part (what stays warm across files)
    healed: str = ""  # trailing blanks left out of the prompt (see ``heal_split``)
    code_end: int = 0  # tokens up to the end of the code before the cursor (the rest: FIM's)
    layout: str = "plain"  # "repository": a FIM prompt in the model's repository layout


@dataclass(frozen=True)
class RepoContext:
    """The repository-level part of a completion prompt, as the chat context holds it:
    ``text`` (repo map and pins as rendered) and the same as files (``(path, content)``) for
    the repository layout; ``name``: the workspace folder's name."""

    text: str = ""
    files: tuple[tuple[str, str], ...] = ()
    name: str = ""


def heal_split(line_prefix: str) -> str:
    """The blanks at the end of a line of code (``return |``) that the prompt leaves out.

    Tokenizers glue a space to the word after it, so a prompt ending in a bare space is one
    the model has rarely seen and it tends to end the line there; without it the model writes
    `` value`` and the space is taken off again (``heal``)."""
    if not line_prefix.strip():
        return ""  # indentation only: its tokens are the usual ones
    return line_prefix[len(line_prefix.rstrip(" \t")):]


def heal(raw: str, healed: str) -> str:
    """The continuation after the cursor, given the model also wrote the ``healed`` blanks."""
    if not healed:
        return raw
    if raw.startswith(healed):
        return raw[len(healed):]
    return raw.lstrip(" \t")


def choose_mode(requested: str, fim: FimTokens | None) -> str:
    """``auto``: FIM when the vocabulary has its tokens, else prefix-only."""
    if requested == "fim" and fim is None:
        return "prefix"  # cannot build a FIM prompt without the tokens
    if requested == "auto":
        return "fim" if fim is not None else "prefix"
    return requested


def file_header(path: str) -> str:
    return f"\n# ---- {path} ----\n"


def repository_layout(fim: FimTokens | None) -> bool:
    """Whether FIM prompts use the repository layout (the vocabulary has both tokens)."""
    return fim is not None and fim.repo is not None and fim.sep is not None


def completion_layout(mode: str, fim: FimTokens | None) -> str:
    """``repository`` for FIM prompts in the model's repository layout, else ``plain``."""
    return "repository" if mode == "fim" and repository_layout(fim) else "plain"


def _repository_head(session: Session, fim: FimTokens, context: RepoContext,
                     path: str) -> tuple[list[int], list[int]]:
    """(the repository part, the current file's ``<sep>`` path line) of the layout."""
    assert fim.repo is not None and fim.sep is not None
    cache = default_token_cache()

    def text(t: str) -> list[int]:
        return list(cache.tokenize(session, t, special=False))

    head = [fim.repo, *text((context.name or "workspace") + "\n")]
    for file_path, content in context.files:
        head += [fim.sep, *text(file_path + "\n"), *text(content)]
    return head, [fim.sep, *text(path + "\n")]


def build_prompt(session: Session, context: RepoContext | str, path: str, win: CursorWindow,
                 mode: str) -> CompletionPrompt:
    """The tokens of a completion at ``win`` in ``path`` (workspace-relative); ``context``
    as text alone has no files for the repository layout."""
    if isinstance(context, str):
        context = RepoContext(text=context)
    bos = [session.bos_token_id] if session.bos_token_id is not None \
        and session.profile.bos_policy == "add" else []
    # Every keystroke repeats the context: looked up, not tokenized again (~3 ms a request
    # for a 1k-token context).
    cache = default_token_cache()
    healed = heal_split(win.line_prefix)
    before_text = win.before[: len(win.before) - len(healed)]
    before = session.tokenize(before_text, add_bos=False, special=False)
    fim = session.fim_tokens
    after = session.tokenize(win.after, add_bos=False, special=False) \
        if mode == "fim" and fim is not None else []
    if mode == "fim" and repository_layout(fim):
        assert fim is not None
        repo, current = _repository_head(session, fim, context, path)
        head = [*bos, *repo, *current, fim.prefix, *before]
        return CompletionPrompt([*head, fim.suffix, *after, fim.middle], "fim",
                                len(bos) + len(repo), healed, len(head), "repository")
    tokens = cache.tokenize(session, context.text, special=False)
    header = cache.tokenize(session, file_header(path), special=False)
    if mode == "fim" and fim is not None:
        head = [*bos, fim.prefix, *tokens, *header, *before]
        return CompletionPrompt([*head, fim.suffix, *after, fim.middle], "fim",
                                len(bos) + 1 + len(tokens), healed, len(head))
    prompt = [*bos, *tokens, *header, *before]
    return CompletionPrompt(prompt, "prefix", len(bos) + len(tokens), healed, len(prompt))


def repo_files(segment_texts: Sequence[tuple[bool, str]]) -> tuple[tuple[str, str], ...]:
    """``(path, content)`` of the repo map's and pins' segments (``(is_pin, text)`` each)."""
    out: list[tuple[str, str]] = []
    for is_pin, text in segment_texts:
        if is_pin:
            found = render.pin_file(text)
            if found is not None:
                out.append(found)
        else:
            out.extend(render.repo_map_files(text))
    return tuple(out)
