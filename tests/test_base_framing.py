"""Base-model framing: a model without a chat template (the embedded Gemma 3 270M base model)
gets a document to continue ("Question: … Answer:"), no tool schemas, and stop texts that end
the answer where the document would go on; instruction models keep their chat format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_contextasm_support import (
    LlamaVocabTokenizer,
    load_tokenizer,
    make_identity,
    sample_inputs,
)

from contextasm import (
    SegmentKind,
    UserTurn,
    assemble,
    detect_prompt_format,
    get_format,
    resolve_prompt_format,
)
from engine.results import drain

# Fragments of the real chat templates of each family (as shipped in their GGUF metadata).
GEMMA_TEMPLATE = "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ role }}\n"
CHATML_TEMPLATE = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'"
LLAMA3_TEMPLATE = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"


@pytest.fixture(scope="module")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


def test_the_format_follows_the_chat_template() -> None:
    assert detect_prompt_format(None) == "base"
    assert detect_prompt_format("") == "base"
    assert detect_prompt_format(GEMMA_TEMPLATE) == "gemma"
    assert detect_prompt_format(CHATML_TEMPLATE) == "chatml"
    assert detect_prompt_format(LLAMA3_TEMPLATE) == "llama3"
    assert detect_prompt_format("{{ messages }}") == "base"  # a family not known here
    assert resolve_prompt_format("auto", GEMMA_TEMPLATE) == "gemma"
    assert resolve_prompt_format("chatml", None) == "chatml"  # the profile can force one


def test_the_embedded_base_model_is_framed_as_a_document(model_path: str) -> None:
    """``prompt.format = "auto"`` on the embedded model (its GGUF has no chat template)."""
    from engine.llama.model import vocab_chat_template

    assert vocab_chat_template(Path(model_path)) is None
    assert resolve_prompt_format("auto", vocab_chat_template(Path(model_path))) == "base"


def test_base_framing_has_no_tools_and_ends_in_the_answer_cue(gemma: LlamaVocabTokenizer) -> None:
    ident = make_identity(gemma, prompt_format="base")
    where = sample_inputs(user=UserTurn(question="Where is the text parsed?"))
    asm = assemble(where, gemma, ident, max_new_tokens=64)
    assert asm.segment(SegmentKind.TOOLS) is None  # JSON schemas mean nothing to a base model
    assert "<start_of_turn>" not in asm.text
    assert asm.text.endswith("Question: Where is the text parsed?\nAnswer: See `")
    why = assemble(sample_inputs(user=UserTurn(question="Why is whitespace kept?")), gemma,
                   ident, max_new_tokens=64)
    assert why.text.endswith("Question: Why is whitespace kept?\nAnswer:")
    chat = assemble(where, gemma, make_identity(gemma, prompt_format="gemma"), max_new_tokens=64)
    assert chat.segment(SegmentKind.TOOLS) is not None
    assert chat.text.endswith("Question: Where is the text parsed?<end_of_turn>\n"
                              "<start_of_turn>model\n")


def test_a_stop_text_ends_the_answer_with_the_cold_runs_tokens(llama_session: Any) -> None:
    """drain's stop: the answer is the greedy text up to the stop, the stream ends there (not
    at max_tokens), the session stays usable, and the lead starts the answer."""
    session = llama_session
    prompt = session.tokenize("Question: What is a function in Python?\nAnswer:", add_bos=True)
    session.reset()
    session.prefill(prompt)
    cold = session.generate(48)
    at = cold.text.find("e")
    assert at >= 0, "the greedy answer has an 'e' to stop at"
    session.reset()
    session.prefill(prompt)
    pieces: list[str] = []
    stopped = drain(session.stream(max_tokens=48), pieces.append, stop=("e",), lead="See `")
    assert stopped.finish_reason == "stop"
    assert stopped.text == "See `" + cold.text[:at]
    assert "".join(pieces) == stopped.text
    assert stopped.decode_tokens < cold.decode_tokens  # it stopped decoding, not just printing
    session.prefill(prompt)  # still usable: the same prompt gives the same answer
    assert session.generate(48).text == cold.text
    assert get_format("base").stop and "\nQuestion:" in get_format("base").stop


def _pieces(*pieces: str) -> Any:
    """A stream as ``Session.stream`` gives one: pieces, ``send(True)`` to stop, the result
    returned (text over the protocol: the model cannot be made to open with a fence)."""
    from engine.results import GenerateResult

    def gen() -> Any:
        sent = 0
        for p in pieces:
            sent += 1
            if (yield p):
                break
        return GenerateResult(tokens=list(range(sent)), text="".join(pieces[:sent]),
                              ttft_ms=0.0, decode_tokens=sent, decode_ms=0.0, decode_tok_s=0.0,
                              finish_reason="length")

    return gen()


def test_an_answer_that_opens_with_a_fence_is_not_cut_to_nothing() -> None:
    """A base model may answer with a code block: the fence (a stop) before any text opens the
    answer, the next fence closes it and ends it; elsewhere a fence still ends the answer."""
    base = get_format("base")
    assert "\n```" in base.stop and "\n```" in base.opening

    def run(*pieces: str) -> Any:
        return drain(_pieces(*pieces), None, base.stop, "", base.opening)

    fenced = run(" \n", "```", "python\n", "return obj", "\n```", "\nmore", " text")
    assert fenced.text == " \n```python\nreturn obj\n```" and fenced.finish_reason == "stop"
    plain = run(" It returns", " obj.", "\n```", "python\n")
    assert plain.text == " It returns obj." and plain.finish_reason == "stop"
    asked = run("\nQuestion:", " what else?")  # a new question is never an answer
    assert asked.text == "" and asked.finish_reason == "stop"
    blank = run("\n\n\n", "It returns obj.", "\n\n\n", "Next")
    assert blank.text == "\n\n\nIt returns obj." and blank.finish_reason == "stop"
    # Without ``opening`` (chat formats), every stop ends the answer where it appears.
    assert drain(_pieces("\n```", "python"), None, base.stop).text == ""
