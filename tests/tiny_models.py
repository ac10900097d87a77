"""Tiny random-weight GGUF models around real vocabularies (issue 31's test models).

``build(vocab, dest, arch=...)`` writes a small model (width 64, 2 layers — 6 for ``gemma3``,
so that one of them is a global-attention layer — seeded random weights, f16) of one of the
architectures the families run on (``llama``, ``qwen2``, ``starcoder2``, ``gemma3``), whose
tokenizer — tokens, scores, types, merges, special ids, BOS/EOS policy and chat template — is
copied field by field from a vocabulary-only GGUF of llama.cpp's ``models/`` folder
(``tests/fixtures/vocab``; the large ones stored xz-compressed). ``chat_template`` puts a
published template into a vocabulary that ships none; ``added_tokens`` writes tokens at fixed
ids (Qwen2.5-Coder's FIM and repository tokens into the Qwen2 vocabulary's padding slots).
llama.cpp loads the result like any model; its answers mean nothing, but its tokens, prompt
format, stops and cache are the family's. A few MB (tens for 256k vocabularies), built in about
a second for small vocabularies, up to a minute for 256k-token ones (gguf's reader walks every
token), so ``cached_build`` keeps them in the user cache, keyed by everything they are built
from.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import platformdirs
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD, N_FF, N_HEAD = 64, 128, 4
HEAD_DIM = N_EMBD // N_HEAD
ARCHITECTURES = ("llama", "qwen2", "starcoder2", "gemma3")

#: Qwen2.5-Coder's added tokens at their published ids (tokenizer_config.json of
#: Qwen/Qwen2.5-Coder-*): the FIM and repository-level ones, and those in between so that
#: every id is the model's own. 3 = control token, 4 = user-defined.
QWEN25_CODER_TOKENS: dict[int, tuple[str, int]] = {
    151646: ("<|object_ref_start|>", 3), 151647: ("<|object_ref_end|>", 3),
    151648: ("<|box_start|>", 3), 151649: ("<|box_end|>", 3),
    151650: ("<|quad_start|>", 3), 151651: ("<|quad_end|>", 3),
    151652: ("<|vision_start|>", 3), 151653: ("<|vision_end|>", 3),
    151654: ("<|vision_pad|>", 3), 151655: ("<|image_pad|>", 3), 151656: ("<|video_pad|>", 3),
    151657: ("<tool_call>", 4), 151658: ("</tool_call>", 4),
    151659: ("<|fim_prefix|>", 3), 151660: ("<|fim_middle|>", 3), 151661: ("<|fim_suffix|>", 3),
    151662: ("<|fim_pad|>", 3), 151663: ("<|repo_name|>", 3), 151664: ("<|file_sep|>", 3),
}


def vocab_file(vocab_dir: Path, name: str, scratch: Path) -> Path:
    """``ggml-vocab-NAME.gguf`` of ``vocab_dir``, decompressed into ``scratch`` when it is
    stored as ``.gguf.xz``."""
    plain = vocab_dir / f"ggml-vocab-{name}.gguf"
    if plain.exists():
        return plain
    packed = plain.with_name(plain.name + ".xz")
    out = scratch / plain.name
    if not out.exists():
        with lzma.open(packed) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def _field_value(reader: GGUFReader, key: str) -> tuple[object, GGUFValueType,
                                                         GGUFValueType | None]:
    field = reader.fields[key]
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            values: list[object] = [bytes(field.parts[i]).decode("utf-8", "surrogateescape")
                                    for i in field.data]
        else:
            values = [field.parts[i].tolist()[0] for i in field.data]
        return values, kind, sub
    if kind == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), kind, None
    return field.parts[field.data[0]].tolist()[0], kind, None


def _copy_tokenizer(writer: GGUFWriter, reader: GGUFReader, chat_template: str | None,
                    added: Mapping[int, tuple[str, int]]) -> int:
    """The vocabulary's tokenizer keys into ``writer``; returns the vocabulary size."""
    n_vocab = 0
    for key in reader.fields:
        if not key.startswith("tokenizer.") or (key == "tokenizer.chat_template"
                                                and chat_template is not None):
            continue
        value, kind, _sub = _field_value(reader, key)
        if key == "tokenizer.ggml.tokens" and isinstance(value, list):
            n_vocab = len(value)
            for tid, (text, _type) in added.items():
                value[tid] = text
        if key == "tokenizer.ggml.token_type" and isinstance(value, list):
            for tid, (_text, ttype) in added.items():
                value[tid] = ttype
        if kind == GGUFValueType.ARRAY:
            writer.add_array(key, value)  # type: ignore[arg-type]
        elif kind == GGUFValueType.STRING:
            writer.add_string(key, str(value))
        else:
            writer.add_key_value(key, value, kind)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    return n_vocab


def build(vocab: Path, dest: Path, seed: int = 7, *, arch: str = "llama",
          chat_template: str | None = None,
          added_tokens: Mapping[int, tuple[str, int]] | None = None,
          name: str | None = None) -> Path:
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; one of {ARCHITECTURES}")
    reader = GGUFReader(vocab)
    n_layer = 6 if arch == "gemma3" else 2
    writer = GGUFWriter(str(dest), arch)
    writer.add_name(f"tiny-{name or dest.stem.removeprefix('tiny-')}")
    writer.add_context_length(2048)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(HEAD_DIM)
    if arch == "starcoder2":
        writer.add_layer_norm_eps(1e-5)
    else:
        writer.add_layer_norm_rms_eps(1e-6)
    if arch == "gemma3":
        writer.add_sliding_window(64)  # shorter than the tests' prompts: SWA is exercised
        writer.add_key_length(HEAD_DIM)
        writer.add_value_length(HEAD_DIM)
    writer.add_file_type(1)  # mostly f16
    n_vocab = _copy_tokenizer(writer, reader, chat_template, added_tokens or {})
    rng = np.random.default_rng(seed)

    def tensor(name: str, *shape: int) -> None:
        data = rng.normal(0.0, 0.08, size=shape).astype(np.float16 if len(shape) > 1
                                                          else np.float32)
        writer.add_tensor(name, data)

    def norm(name: str, size: int = N_EMBD, *, bias: bool = False) -> None:
        writer.add_tensor(f"{name}.weight", np.ones(size, np.float32))
        if bias:
            writer.add_tensor(f"{name}.bias", np.zeros(size, np.float32))

    biased = arch == "starcoder2"
    tensor("token_embd.weight", n_vocab, N_EMBD)
    for i in range(n_layer):
        blk = f"blk.{i}"
        norm(f"{blk}.attn_norm", bias=biased)
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"{blk}.{part}.weight", N_EMBD, N_EMBD)
            if (arch == "qwen2" and part != "attn_output") or biased:
                tensor(f"{blk}.{part}.bias", N_EMBD)
        if arch == "gemma3":
            norm(f"{blk}.attn_q_norm", HEAD_DIM)
            norm(f"{blk}.attn_k_norm", HEAD_DIM)
            norm(f"{blk}.post_attention_norm")
            norm(f"{blk}.post_ffw_norm")
        norm(f"{blk}.ffn_norm", bias=biased)
        if arch != "starcoder2":
            tensor(f"{blk}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"{blk}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"{blk}.ffn_down.weight", N_EMBD, N_FF)
        if biased:
            tensor(f"{blk}.ffn_up.bias", N_FF)
            tensor(f"{blk}.ffn_down.bias", N_EMBD)
    norm("output_norm", bias=biased)
    # No output.weight: llama.cpp ties the output to token_embd (half the file).
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def cached_build(vocab: Path, name: str, *, arch: str = "llama",
                 chat_template: str | None = None,
                 added_tokens: Mapping[int, tuple[str, int]] | None = None) -> Path:
    """``build`` into the user cache (``<cache>/contenox-lsp/test-models``), once per input:
    the key covers this module's source, the vocabulary's bytes and every argument."""
    key = hashlib.sha256()
    key.update(Path(__file__).read_bytes())
    key.update(hashlib.sha256(vocab.read_bytes()).digest())
    key.update(json.dumps([arch, chat_template, sorted((added_tokens or {}).items())]).encode())
    root = Path(os.environ.get("CONTENOX_TEST_MODELS")
                or Path(platformdirs.user_cache_dir("contenox-lsp")) / "test-models")
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"tiny-{name}-{key.hexdigest()[:16]}.gguf"
    if not dest.exists():
        partial = dest.with_suffix(f".{os.getpid()}.partial")
        build(vocab, partial, arch=arch, chat_template=chat_template, added_tokens=added_tokens,
              name=name)
        partial.replace(dest)  # atomic: a half-written model is never "cached"
    return dest
