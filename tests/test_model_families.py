"""The models developers run, end to end on the real llama.cpp: tiny random-weight models
built around real vocabularies (``tests/tiny_models.py``) go through ``explain-context`` and
``ask`` with their own prompt format, and warm == cold on the engine. Random weights say
nothing about answers; they prove the tokens, the format and the cache on each family."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from tiny_models import build

from engine import load_profile, open_session

VOCAB = Path(__file__).parent / "fixtures" / "vocab"

# vocabulary → (prompt format, its source): Phi-3 is SentencePiece with a two-token newline
# (round 2 crashed on it), Qwen2 is BPE with a ChatML template, LLaMA SPM has no template.
FAMILIES = {
    "phi-3": ("template-", "template"),
    "qwen2": ("chatml", "template"),
    "llama-spm": ("base", "base: no template"),
}


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tiny-models")
    return {name: build(VOCAB / f"ggml-vocab-{name}.gguf", out / f"tiny-{name}.gguf")
            for name in FAMILIES}


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
    fmt, source = FAMILIES[family]
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
    assert again["metrics"]["restoredFromSnapshot"] > 0  # the stable prefix came from disk
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
    fmt, source = FAMILIES.get(family, ("base", "base: no template"))
    assert info["promptFormat"].startswith(fmt) and info["promptFormatSource"] == source
    assert info["architecture"] == ("gemma3" if family == "embedded" else "llama")
    assert info["kvBytesPerToken"] > 0 and info["endOfGeneration"]
    assert info["exactReuse"]["kind"] in ("invariant", "chunked")
    assert info["completionMode"] in ("prefix", "fim")
    # The tiny models are trained on 2,048 positions; the default profile asks for 8,192.
    assert bool(info["fits"]) == (family != "embedded")
