"""The models developers run, end to end on the real llama.cpp: tiny random-weight models
built around real vocabularies (``tests/tiny_models.py``) go through ``explain-context``,
``ask``, ``model info`` and an inline completion on the real server with their own prompt
format and FIM layout, and warm == cold on the engine. Random weights say nothing about
answers; they prove the tokens, the format, the stops and the cache on each family."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_lsp_support import (
    change_doc,
    open_doc,
    raw_request,
    request,
    start_client,
    stop_client,
    wait_warm,
)
from tiny_models import QWEN25_CODER_TOKENS, cached_build, vocab_file

from contenox_lsp.completion.prompt import RepoContext, build_prompt
from contenox_lsp.completion.window import cursor_window
from engine import load_profile, open_session

VOCAB = Path(__file__).parent / "fixtures" / "vocab"

#: meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json (the vendored llama-bpe
#: vocabulary carries no template).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] "
    "| trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

#: mistralai/Mistral-7B-Instruct-v0.1, tokenizer_config.json (no system role: it refuses one).
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}")


@dataclass(frozen=True)
class Family:
    """A tiny model of one family and what its user gets: the prompt format (a prefix for
    ``template-<digest>``) and its source, the completion mode and layout."""

    vocab: str
    arch: str
    fmt: str
    source: str
    completion: tuple[str, str]
    template: str | None = None
    added: Mapping[int, tuple[str, int]] = field(default_factory=dict)


FAMILIES = {
    # SentencePiece with a two-token newline (round 2 crashed on it); the template drops
    # system messages.
    "phi-3": Family("phi-3", "llama", "template-", "template", ("prefix", "plain")),
    "qwen2": Family("qwen2", "qwen2", "chatml", "template", ("prefix", "plain")),
    "qwen2.5-coder": Family("qwen2", "qwen2", "chatml", "template", ("fim", "repository"),
                            added=QWEN25_CODER_TOKENS),
    "llama3": Family("llama-bpe", "llama", "llama3", "template", ("prefix", "plain"),
                     template=LLAMA3_TEMPLATE),
    # Mistral / Llama 2 / CodeLlama: SentencePiece, [INST], no system role.
    "mistral": Family("llama-spm", "llama", "template-", "template", ("prefix", "plain"),
                      template=MISTRAL_TEMPLATE),
    "llama-spm": Family("llama-spm", "llama", "base", "base: no template", ("prefix", "plain")),
    "command-r": Family("command-r", "llama", "template-", "template", ("prefix", "plain")),
    "gemma-4": Family("gemma-4", "gemma3", "template-", "template", ("prefix", "plain")),
    "deepseek-coder": Family("deepseek-coder", "llama", "base", "base: no template",
                             ("fim", "plain")),
    "starcoder": Family("starcoder", "starcoder2", "base", "base: no template", ("fim", "plain")),
}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tiny-models")
    return {name: cached_build(vocab_file(VOCAB, f.vocab, out), name, arch=f.arch,
                               chat_template=f.template, added_tokens=f.added)
            for name, f in FAMILIES.items()}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("family-ws")
    shutil.copy(Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py", root / "textwrap.py")
    return root


def _cli(workspace: Path | None, model: Path | None, *args: str
         ) -> tuple[dict[str, Any], str]:
    cache = (workspace.parent if workspace else Path(os.environ.get("TMPDIR", "/tmp")))
    env = {**os.environ, "CONTENOX_CACHE_DIR": str(cache / "family-cache")}
    where = ["--workspace", str(workspace)] if workspace else []
    done = subprocess.run(
        [sys.executable, "-m", "contenox_lsp.cli", *args, *where,
         *(["--model", str(model)] if model else []), "--json"],
        capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_explain_and_ask_run_in_the_familys_own_format(family: str, tiny: dict[str, Path],
                                                       workspace: Path) -> None:
    fmt, source = FAMILIES[family].fmt, FAMILIES[family].source
    explained, _ = _cli(workspace, tiny[family], "explain-context", "--question",
                        "What does dedent do?")
    assert explained["promptFormat"].startswith(fmt)
    assert explained["promptFormatSource"] == source
    labels = [s["label"] for s in explained["segments"]]
    assert labels[0] == "system" and labels[-1] == "user"
    asked, _ = _cli(workspace, tiny[family], "ask", "What does dedent do?", "--max-tokens", "4")
    m = asked["metrics"]
    assert m["promptTokens"] == explained["totalTokens"]
    assert m["decodeTokens"] >= 1 or m["finishReason"] == "stop"
    again, _ = _cli(workspace, tiny[family], "ask", "What does dedent do?", "--max-tokens", "4")
    if m["stableSnapshotSaved"]:
        assert again["metrics"]["restoredFromSnapshot"] > 0  # the stable prefix came from disk
    else:  # only a sliding-window family on a CPU that restores its window inexactly
        env = {**os.environ, "CONTENOX_CACHE_DIR": str(workspace.parent / "family-cache")}
        info = json.loads(subprocess.run(
            [sys.executable, "-m", "contenox_lsp.cli", "model", "info", "--model",
             str(tiny[family]), "--json"], capture_output=True, text=True, timeout=600,
            env=env, check=True).stdout)
        assert info["exactReuse"]["snapshotsPastWindow"].startswith("refused"), info
        assert again["metrics"]["restoredFromSnapshot"] == 0
    assert again["text"] == asked["text"]  # warm == cold, on this family's tokens


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_warm_equals_cold_on_each_family(family: str, tiny: dict[str, Path]) -> None:
    prof = load_profile(None).with_overrides({"model.path": str(tiny[family]),
                                              "context.n_ctx": 1024}, source="test")
    text = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text("utf-8")
    with open_session(prof) as s:
        base = s.tokenize(text, add_bos=True)[:300]
        full = base + s.tokenize("\n# In one sentence:\n")
        s.reset()
        s.prefill(full)
        cold = s.next_token_logits().tobytes(), s.generate(max_tokens=8).tokens
        s.reset()
        s.prefill(base[:200] + s.tokenize(" other"))
        s.generate(max_tokens=4)
        r = s.prefill(full)
        assert r.reused_tokens >= 150
        assert (s.next_token_logits().tobytes(), s.generate(max_tokens=8).tokens) == cold


@pytest.mark.parametrize("family", [*sorted(FAMILIES), "embedded"])
def test_model_info_says_what_a_user_gets(family: str, tiny: dict[str, Path],
                                          workspace: Path) -> None:
    info, _ = _cli(None, None if family == "embedded" else tiny[family], "model", "info")
    fam = FAMILIES.get(family, Family("", "gemma3", "base", "base: no template",
                                      ("prefix", "plain")))
    assert info["promptFormat"].startswith(fam.fmt) and info["promptFormatSource"] == fam.source
    assert info["architecture"] == fam.arch
    assert (info["completionMode"], info["completionLayout"]) == fam.completion
    assert info["kvBytesPerToken"] > 0 and info["endOfGeneration"]
    assert info["exactReuse"]["kind"] in ("invariant", "chunked")
    # The tiny models are trained on 2,048 positions; the default profile asks for 8,192.
    assert bool(info["fits"]) == (family != "embedded")


def test_the_repository_layout_is_the_models_own(tiny: dict[str, Path]) -> None:
    """Qwen2.5-Coder's repository-level FIM layout, token for token as llama-server's
    ``/infill`` builds it; one more character changes only the end; the model's stops
    include the file separator (a model that starts another file ends the item)."""
    prof = load_profile(None).with_overrides({"model.path": str(tiny["qwen2.5-coder"]),
                                              "context.n_ctx": 1024}, source="test")
    source = "import os\n\ndef load(path):\n    return open(path).re"
    context = RepoContext("", (("util/io.py", "def read(path)\nclass Reader\n  def close(self)\n"),
                               ("notes.py", "X = 1\n")), "myproject")
    with open_session(prof) as s:
        win = cursor_window(source, 3, len("    return open(path).re"))
        prompt = build_prompt(s, context, "app/main.py", win, "fim")
        assert (prompt.mode, prompt.layout) == ("fim", "repository")
        assert s.detokenize(prompt.tokens, special=True) == (
            "<|repo_name|>myproject\n"
            "<|file_sep|>util/io.py\ndef read(path)\nclass Reader\n  def close(self)\n"
            "<|file_sep|>notes.py\nX = 1\n"
            "<|file_sep|>app/main.py\n"
            f"<|fim_prefix|>{win.before}<|fim_suffix|>{win.after}<|fim_middle|>")
        # The repository part is what stays warm, and it is the same tokens on the next key.
        repo_part = s.detokenize(prompt.tokens[:prompt.context_tokens], special=True)
        assert repo_part.endswith("X = 1\n") and "app/main.py" not in repo_part
        typed = build_prompt(s, context, "app/main.py",
                             cursor_window(source + "a", 3, len("    return open(path).rea")),
                             "fim")
        assert typed.tokens[:prompt.code_end - 2] == prompt.tokens[:prompt.code_end - 2]
        stops = set(s.model_facts()["endOfGeneration"])
        assert {"<|file_sep|>", "<|repo_name|>", "<|fim_pad|>", "<|endoftext|>"} <= stops
        # The same vocabulary without the repository tokens keeps the plain FIM layout.
    with open_session(prof.with_overrides({"model.path": str(tiny["deepseek-coder"])},
                                          source="test")) as s:
        plain = build_prompt(s, context, "app/main.py", win, "fim")
        assert plain.layout == "plain"


COMPLETION_SOURCE = "import textwrap\n\n\ndef banner(text):\n    return textwrap."


@pytest.mark.parametrize("family", sorted(FAMILIES))
async def test_an_inline_completion_in_the_familys_layout(family: str, tiny: dict[str, Path],
                                                          workspace: Path) -> None:
    """The real server on each family: a completion in its mode and layout, and a
    keystroke after it reuses the repository part (the whole prompt but the new tokens)."""
    doc = workspace / "banner.py"
    doc.write_text(COMPLETION_SOURCE, "utf-8")
    client = await start_client(workspace, "neovim", {"model": str(tiny[family])},
                                inline_completion=True)
    try:
        uri = open_doc(client, doc, COMPLETION_SOURCE)
        await wait_warm(client)
        line, col = 4, len("    return textwrap.")

        async def complete(character: int, version: int) -> dict[str, Any]:
            out: dict[str, Any] = await raw_request(client, "textDocument/inlineCompletion", {
                "textDocument": {"uri": uri, "version": version},
                "position": {"line": line, "character": character},
                "context": {"triggerKind": 2},
                "formattingOptions": {"tabSize": 4, "insertSpaces": True}}, timeout=300)
            return out

        first = await complete(col, 1)
        assert isinstance(first["items"], list)  # random weights: an item or none
        status = (await request(client, "contenox/status", None))["completion"]
        assert (status["mode"], status["layout"]) == FAMILIES[family].completion
        assert status["lastDecodeTokens"] >= 1 and status["lastContextTokens"] > 0
        explained = await request(client, "contenox/explainContext", None)
        assert (explained["completionMode"], explained["completionLayout"]) == \
            FAMILIES[family].completion
        change_doc(client, uri, 2, [(line, col, line, col, "d")])
        await complete(col + 1, 2)
        status = (await request(client, "contenox/status", None))["completion"]
        assert status["requests"] == 2
        assert status["lastReusedTokens"] >= status["lastContextTokens"]
        # The new character and what a warm prefill recomputes beside it (the suffix and
        # middle of a FIM prompt follow the cursor, so they are prefilled again).
        assert status["lastNewTokens"] <= 64
    finally:
        await stop_client(client)


def _cli_error(model: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "contenox_lsp.cli", "model", "info",
                           "--model", str(model), "--json", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    error: dict[str, Any] = json.loads(done.stdout)["error"]
    return error


def test_a_file_that_is_not_a_whole_model_is_a_structured_error(tmp_path: Path,
                                                                 tiny: dict[str, Path]) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n", "utf-8")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny["qwen2"].read_bytes()[: 3 << 20])
    for bad in (text, truncated):
        assert _cli_error(bad)["code"] == "model_load_failed"
    assert _cli_error(tmp_path / "absent.gguf")["code"] == "model_not_found"


def test_settings_a_vocabulary_cannot_give_are_reported(tmp_path: Path,
                                                        tiny: dict[str, Path]) -> None:
    """A profile that forces FIM and ChatML on a SentencePiece vocabulary without either: the
    server falls back (prefix completions) or frames with plain text, and ``model info``
    says so in ``fits``."""
    profile = tmp_path / "forced.toml"
    profile.write_text('[prompt]\nformat = "chatml"\n\n[completion]\nmode = "fim"\n', "utf-8")
    info, _ = _cli(None, tiny["llama-spm"], "model", "info", "--profile", str(profile))
    assert info["completionMode"] == "prefix" and info["promptFormatSource"] == "profile"
    fits = " ".join(info["fits"])
    assert "no FIM tokens" in fits and "<|im_start|>" in fits and "<|im_end|>" in fits
    # The same settings on the vocabularies that have the tokens: nothing to report there.
    info, _ = _cli(None, tiny["qwen2.5-coder"], "model", "info", "--profile", str(profile))
    assert info["completionMode"] == "fim"
    assert not [p for p in info["fits"] if "FIM" in p or "im_start" in p]
