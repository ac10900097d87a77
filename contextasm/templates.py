"""A prompt format derived from the model's own chat template.

``prompt.format = "auto"`` renders the GGUF's chat template the way llama.cpp and transformers
do (Jinja in a sandbox, ``trim_blocks``/``lstrip_blocks``, ``bos_token``/``eos_token``,
``add_generation_prompt``) with sentinel messages, and reads the marker texts off the
rendering: what comes before the system text (``open``), between it and the user text
(``user_open``), and after the user text with the generation prompt (``close``). A second
rendering with other sentinels must give exactly the same markers around them (the round
trip), so a template that reorders messages or whose markers depend on the content is
refused with the reason, never guessed. Templates that drop or reject a system message
(Phi-3, Gemma) are split on a single user message instead: the context and the question then
share the one user turn, as the hand-written ``gemma`` format does.

The end of an assistant turn (rendered after a sentinel answer) becomes the format's stop text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contextasm.errors import ContextAsmError
from contextasm.formats import (
    AUTO_FORMAT,
    PROMPT_FORMATS,
    PromptFormat,
    detect_prompt_format,
    register_format,
)

# Two sets of contents of other lengths, words and lines: markers that depend on the content
# differ between them.
_SENTINELS = (("Q7SYSTEMxA", "Q7USERxA", "Q7ANSWERxA"),
              ("K4 the system text,\nlonger", "K4 what the user\nasks here?", "K4 an answer\nz"))


class TemplateFormatError(ContextAsmError):
    """The chat template cannot be split into fixed markers around the messages."""

    code = "template_not_usable"


@dataclass(frozen=True)
class DerivedFormat:
    """A format read off a chat template: its markers, and whether it has a system turn."""

    format: PromptFormat
    system_turn: bool


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        undefined=jinja2.ChainableUndefined)

    def raise_exception(message: str) -> None:
        raise TemplateFormatError(f"the template refused the conversation: {message}")

    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "2026-01-01"  # fixed: the prompt must not vary
    return env


def _render(template: jinja2.Template, messages: Sequence[Mapping[str, str]], generation: bool,
            bos_token: str, eos_token: str) -> str:
    try:
        return template.render(messages=list(messages), add_generation_prompt=generation,
                               bos_token=bos_token, eos_token=eos_token, tools=None)
    except TemplateFormatError:
        raise
    except Exception as exc:  # a template is foreign code: any failure is "not usable"
        raise TemplateFormatError(f"the template failed to render: {exc}") from exc


def _split(text: str, parts: Sequence[str]) -> list[str] | None:
    """``text`` cut around each of ``parts`` (each exactly once, in order), or None."""
    out: list[str] = []
    pos = 0
    for part in parts:
        if text.count(part) != 1:
            return None
        i = text.find(part, pos)
        if i < 0:
            return None
        out.append(text[pos:i])
        pos = i + len(part)
    out.append(text[pos:])
    return out


def _strip_bos(head: str, bos_token: str) -> str:
    # BOS comes from the profile's BOS policy as a token, never from marker text.
    return head[len(bos_token):] if bos_token and head.startswith(bos_token) else head


def _markers(template: jinja2.Template, system_turn: bool, bos: str, eos: str
             ) -> tuple[str, str, str, str] | None:
    """(open, user_open, close, end of an answer) for one layout, or None when the template
    does not render that layout with fixed markers (round trip over two sentinel sets)."""
    found: list[tuple[str, str, str, str]] = []
    for system, user, answer in _SENTINELS:
        if system_turn:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            parts = _split(_render(template, msgs, True, bos, eos), (system, user))
        else:
            msgs = [{"role": "user", "content": user}]
            cut = _split(_render(template, msgs, True, bos, eos), (user,))
            parts = None if cut is None else [cut[0], "", cut[1]]
        if parts is None:
            return None
        answered = _split(_render(template, [*msgs, {"role": "assistant", "content": answer}],
                                  False, bos, eos), (answer,))
        end = answered[1] if answered is not None else ""
        found.append((_strip_bos(parts[0], bos), parts[1], parts[2], end))
    return found[0] if found[0] == found[1] else None


def derive_format(chat_template: str, bos_token: str = "", eos_token: str = "") -> DerivedFormat:
    """The prompt format of ``chat_template`` (module doc); ``TemplateFormatError`` says why a
    template cannot be used."""
    try:
        template = _environment().from_string(chat_template)
    except jinja2.TemplateError as exc:
        raise TemplateFormatError(f"the template does not parse: {exc}") from exc
    system_turn = True
    try:
        markers = _markers(template, True, bos_token, eos_token)
    except TemplateFormatError:
        markers = None
    if markers is None:  # no system role (dropped, refused or folded): one user turn
        system_turn = False
        markers = _markers(template, False, bos_token, eos_token)
    if markers is None:
        raise TemplateFormatError(
            "the template does not put fixed markers around a system and a user message, "
            "nor around a single user message (it reorders them or its markers depend on "
            "the content)")
    open_, user_open, close, end = markers
    if not close:
        raise TemplateFormatError("the template has no generation prompt after the user turn")
    stop = (end.strip(),) if end.strip() else ()
    name = _family(open_, user_open, close) or "template-" + hashlib.sha256(
        "\0".join(markers).encode()).hexdigest()[:12]
    return DerivedFormat(PromptFormat(name=name, open=open_, user_open=user_open, close=close,
                                      stop=stop), system_turn)


def _family(open_: str, user_open: str, close: str) -> str | None:
    """The hand-written format with exactly these markers (its name keeps cache identities)."""
    for fmt in PROMPT_FORMATS.values():
        if (fmt.open, fmt.user_open, fmt.close) == (open_, user_open, close) and fmt.open:
            return fmt.name
    return None


@dataclass(frozen=True)
class FormatChoice:
    """The prompt format a model gets and where it came from (``source``: ``profile``,
    ``template``, ``family (...)``, ``base: no template``, ``base: template not usable (...)``)."""

    name: str
    source: str


def choose_prompt_format(configured: str, chat_template: str | None, bos_token: str = "",
                         eos_token: str = "") -> FormatChoice:
    """``configured`` unless it is ``auto``; then the format derived from the chat template
    (registered under its name), else the hand-written family its marker texts name, else
    ``base``. Every fallback says why in ``source``."""
    if configured != AUTO_FORMAT:
        return FormatChoice(configured, "profile")
    if not chat_template:
        return FormatChoice("base", "base: no template")
    try:
        derived = derive_format(chat_template, bos_token, eos_token)
    except TemplateFormatError as exc:
        family = detect_prompt_format(chat_template)
        if family != "base":
            return FormatChoice(family, f"family ({exc})")
        return FormatChoice("base", f"base: template not usable ({exc})")
    if derived.format.name not in PROMPT_FORMATS:
        register_format(derived.format)
    return FormatChoice(derived.format.name, "template")
