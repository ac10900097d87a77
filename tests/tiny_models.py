"""Tiny random-weight GGUF models around real vocabularies (issue 31's test models).

``build(vocab, dest)`` writes a 2-layer ``llama``-architecture model (width 64, seeded random
weights, f16) whose tokenizer — tokens, scores, types, merges, special ids, BOS/EOS policy and
chat template — is copied field by field from a vocabulary-only GGUF of llama.cpp's
``models/`` folder (``tests/fixtures/vocab``). llama.cpp loads it like any model; its answers
mean nothing, but its tokens, prompt format, stops and cache are the family's. A few MB, built
in well under a second; cached by the caller.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD, N_FF, N_LAYER, N_HEAD = 64, 128, 2, 4


def _copy_field(writer: GGUFWriter, reader: GGUFReader, key: str) -> None:
    field = reader.fields[key]
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == GGUFValueType.STRING:
            values: list[object] = [bytes(field.parts[i]).decode("utf-8", "surrogateescape")
                                    for i in field.data]
        else:
            values = [field.parts[i].tolist()[0] for i in field.data]
        writer.add_array(key, values)
    elif kind == GGUFValueType.STRING:
        writer.add_string(key, bytes(field.parts[field.data[0]]).decode("utf-8"))
    else:
        writer.add_key_value(key, field.parts[field.data[0]].tolist()[0], kind)


def build(vocab: Path, dest: Path, seed: int = 7) -> Path:
    reader = GGUFReader(vocab)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    writer = GGUFWriter(str(dest), "llama")
    writer.add_name(f"tiny-{vocab.stem.removeprefix('ggml-vocab-')}")
    writer.add_context_length(2048)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(1)  # mostly f16
    for key in reader.fields:
        if key.startswith("tokenizer."):
            _copy_field(writer, reader, key)
    rng = np.random.default_rng(seed)

    def tensor(name: str, *shape: int) -> None:
        data = rng.normal(0.0, 0.08, size=shape).astype(np.float16 if len(shape) > 1
                                                          else np.float32)
        writer.add_tensor(name, data)

    tensor("token_embd.weight", n_vocab, N_EMBD)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{part}.weight", N_EMBD, N_EMBD)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, np.float32))
        tensor(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        tensor(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    # No output.weight: llama.cpp ties the output to token_embd (half the file).
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest
