"""``prompt.format = "auto"`` on the models developers run: the markers read off each real chat
template that llama-cpp-python's vendored vocabularies carry (``tests/fixtures/templates``,
copied by ``extract.py``), checked against the template's own rendering of a conversation the
derivation never saw; and the fallbacks, each with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from contextasm import get_format
from contextasm.templates import TemplateFormatError, choose_prompt_format, derive_format

TEMPLATES = Path(__file__).parent / "fixtures" / "templates"

# vocabulary → (format name or None for "template-<digest>", system turn, open, user_open, close)
EXPECTED: dict[str, tuple[str | None, bool, str, str, str]] = {
    "qwen2": ("chatml", True, "<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n",
              "<|im_end|>\n<|im_start|>assistant\n"),
    "qwen35": ("chatml", True, "<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n",
               "<|im_end|>\n<|im_start|>assistant\n"),
    # Phi-3's template drops system messages: context and question share the user turn.
    "phi-3": (None, False, "<|user|>\n", "", "<|end|>\n<|assistant|>\n"),
    "command-r": (None, True, "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
                  "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
                  "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
    "gemma-4": (None, True, "<|turn>system\n", "<turn|>\n<|turn>user\n",
                "<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"),
}


def _vocab(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((TEMPLATES / f"{name}.json").read_text("utf-8"))
    return doc


def _render(doc: dict[str, Any], messages: list[dict[str, str]]) -> str:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(doc["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token=doc["bos_token"],
        eos_token=doc["eos_token"])


def test_every_vendored_template_is_covered() -> None:
    assert sorted(p.stem for p in TEMPLATES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_markers_read_off_the_template_reproduce_its_rendering(name: str) -> None:
    doc = _vocab(name)
    want_name, system_turn, open_, user_open, close = EXPECTED[name]
    derived = derive_format(doc["chat_template"], doc["bos_token"], doc["eos_token"])
    fmt = derived.format
    assert (fmt.open, fmt.user_open, fmt.close, derived.system_turn) == (
        open_, user_open, close, system_turn)
    assert fmt.name == want_name if want_name else fmt.name.startswith("template-")
    # A conversation the derivation never saw, rendered by the template itself, is exactly
    # BOS text (when the template writes it) + the markers around the contents.
    context, question = "Repository map:\nsrc/a.py: def f()", "What does f do?"
    if system_turn:
        msgs = [{"role": "system", "content": context}, {"role": "user", "content": question}]
        body = fmt.open + context + fmt.user_open + question + fmt.close
    else:
        msgs = [{"role": "user", "content": context + "\n\n" + question}]
        body = fmt.open + context + "\n\n" + question + fmt.close
    rendered = _render(doc, msgs)
    assert rendered in (body, doc["bos_token"] + body)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_auto_picks_the_template_format_and_registers_it(name: str) -> None:
    doc = _vocab(name)
    choice = choose_prompt_format("auto", doc["chat_template"], doc["bos_token"],
                                  doc["eos_token"])
    assert choice.source == "template"
    fmt = get_format(choice.name)  # known to the assembler by its name
    assert fmt.close == EXPECTED[name][4]


def test_the_fallbacks_say_why() -> None:
    assert choose_prompt_format("gemma", "{{ anything }}").source == "profile"
    assert choose_prompt_format("auto", None) == choose_prompt_format("auto", "")
    assert choose_prompt_format("auto", None).name == "base"
    assert choose_prompt_format("auto", None).source == "base: no template"
    broken = choose_prompt_format("auto", "{% for m in messages %}{{ m.content ")
    assert broken.name == "base" and broken.source.startswith("base: template not usable")
    # A template that refuses every conversation, but whose text names a known family.
    refusing = "{{ raise_exception('no') }}<|im_start|>"
    choice = choose_prompt_format("auto", refusing)
    assert choice.name == "chatml" and choice.source.startswith("family (")


def test_templates_that_reorder_or_depend_on_content_are_refused() -> None:
    reorder = ("{% for m in messages|reverse %}[{{ m.role }}]{{ m.content }}{% endfor %}"
               "{% if add_generation_prompt %}[assistant]{% endif %}")
    with pytest.raises(TemplateFormatError):
        derive_format(reorder)
    by_length = ("{% for m in messages %}{% if m.content|length > 9 %}<long>{% endif %}"
                 "{{ m.content }}{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    with pytest.raises(TemplateFormatError):
        derive_format(by_length)
    with pytest.raises(TemplateFormatError):
        derive_format("{{ messages[0].content }}")  # no generation prompt
