"""The token layout of a completion prompt.

Both layouts start with the repository-level context (the repo map and pins the chat prompt's
stable region holds, as plain text) and a file header, and end with the local window, so the
repository part stays warm and a keystroke only adds tokens at the end:

- ``prefix`` (models without FIM tokens, such as the embedded Gemma 3 base model): the code
  before the cursor, continued by the model.
- ``fim`` (models whose vocabulary has FIM tokens): ``<prefix>`` context + code before the
  cursor ``<suffix>`` code after the cursor ``<middle>``. The suffix follows the growing
  prefix, so it is prefilled again on each keystroke; it is kept short (``LINES_AFTER``).
"""

from __future__ import annotations

from dataclasses import dataclass

from contenox_lsp.completion.window import CursorWindow
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


def build_prompt(session: Session, repo_context: str, path: str, win: CursorWindow,
                 mode: str) -> CompletionPrompt:
    """The tokens of a completion at ``win`` in ``path`` (workspace-relative)."""
    bos = [session.bos_token_id] if session.bos_token_id is not None \
        and session.profile.bos_policy == "add" else []
    # Every keystroke repeats these two: looked up, not tokenized again (~3 ms a request
    # for a 1k-token context).
    cache = default_token_cache()
    context = cache.tokenize(session, repo_context, special=False)
    header = cache.tokenize(session, file_header(path), special=False)
    healed = heal_split(win.line_prefix)
    before_text = win.before[: len(win.before) - len(healed)]
    before = session.tokenize(before_text, add_bos=False, special=False)
    fim = session.fim_tokens
    if mode == "fim" and fim is not None:
        after = session.tokenize(win.after, add_bos=False, special=False)
        head = [*bos, fim.prefix, *context, *header, *before]
        return CompletionPrompt([*head, fim.suffix, *after, fim.middle], "fim",
                                len(bos) + 1 + len(context), healed, len(head))
    tokens = [*bos, *context, *header, *before]
    return CompletionPrompt(tokens, "prefix", len(bos) + len(context), healed, len(tokens))
