"""Model conversion for the OpenVINO backend: GGUF (or a Hugging Face folder) → OpenVINO IR.

``contenox-lsp model convert --to openvino [--weight-format int8|fp16|int4] SRC OUT``

openvino-genai cannot read the embedded Gemma 3 GGUF itself (its GGUF reader knows neither
Q5_0 tensors nor the gemma3 architecture), so the offline route is::

    GGUF --transformers (gguf_file=...)--> HF folder --optimum-intel--> IR (with-past)
         --gguf vocab--> BPE tokenizer --openvino_tokenizers--> tokenizer/detokenizer IR

transformers' own GGUF tokenizer for Gemma 3 is wrong (it builds a Unigram model from what are
SentencePiece-BPE merge scores), so the tokenizer is rebuilt here from the GGUF vocabulary,
scores and token types as a byte-fallback BPE whose merge order follows the scores, the way
llama.cpp's SPM tokenizer merges. ``tokenizer_matches_llama`` checks the ids against llama.cpp.

Everything heavy (torch, transformers, optimum-intel, gguf, tokenizers) is imported lazily: the
engine package imports without any of it. This module never prints to stdout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.errors import EngineError, ModelLoadError, ModelNotFoundError
from engine.model_files import sha256_file

log = logging.getLogger(__name__)

WEIGHT_FORMATS = ("int8", "fp16", "int4")
MANIFEST_NAME = "contenox_conversion.json"
CONVERTER_VERSION = 1

# GGUF token types (llama.cpp's llama_token_type).
_TT_NORMAL = 1
_TT_UNKNOWN = 2
_TT_CONTROL = 3
_TT_USER_DEFINED = 4
_TT_UNUSED = 5
_TT_BYTE = 6


class ConversionError(EngineError):
    """A conversion step failed; ``data['step']`` names it."""

    code = "conversion_failed"


def _hide_broken_torchvision() -> None:
    """Make transformers see no torchvision when the installed one cannot load.

    optimum-intel 2.2 requires torchvision, and PyPI's torchvision wheel is built against the
    CUDA torch: beside the CPU torch it fails at import ("operator torchvision::nms does not
    exist"), and transformers then refuses to import Gemma 3 at all. Nothing in a text-model
    export uses torchvision, so a broken one is hidden (``sys.modules[name] = None`` makes
    ``importlib.util.find_spec`` answer None); a working one is left alone.
    """
    if "torchvision" in sys.modules:
        return
    try:
        import torchvision  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name == "torchvision":
            return  # not installed: nothing to hide
        _hide_module("torchvision", exc)
    except Exception as exc:  # RuntimeError from a torch/torchvision build mismatch
        _hide_module("torchvision", exc)


def _hide_module(top: str, why: BaseException) -> None:
    for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
        del sys.modules[name]
    sys.modules[top] = None  # type: ignore[assignment]
    log.info("%s hidden from the export (cannot load: %s)", top, why)


def cache_entry(digest: str, weight_format: str, cache_root: Path | None = None) -> Path:
    """Where ``cached_convert`` keeps the conversion of a source with this sha256 digest."""
    from engine.model_files import cache_dir

    root = cache_root or (cache_dir() / "openvino")
    return root / f"{digest[:16]}-{weight_format}-v{CONVERTER_VERSION}"


# ----------------------------------------------------------------------------- GGUF tokenizer


def _field_value(reader: Any, key: str, default: Any = None) -> Any:
    """A scalar or array field of a GGUF, decoded by hand (``contents()`` is ~100x slower on a
    262k-entry vocabulary)."""
    f = reader.fields.get(key)
    if f is None:
        return default
    parts = [f.parts[i] for i in f.data]
    is_array = len(f.types) > 1 or len(f.data) != 1
    str_type = 8  # GGUFValueType.STRING
    if not is_array:
        p = parts[0]
        if f.types and int(f.types[0]) == str_type:
            return bytes(p).decode("utf-8")
        return p[0].item()
    if len(f.types) > 1 and int(f.types[1]) == str_type:
        return [bytes(p).decode("utf-8") for p in parts]
    return [p[0].item() for p in parts]


def gguf_vocab(gguf_path: Path) -> dict[str, Any]:
    """The tokenizer facts stored in a GGUF: tokens, scores, types, special ids, flags."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    model = _field_value(reader, "tokenizer.ggml.model")
    tokens = list(_field_value(reader, "tokenizer.ggml.tokens"))
    scores = [float(s) for s in _field_value(reader, "tokenizer.ggml.scores", [0.0] * len(tokens))]
    types = [int(t) for t in _field_value(reader, "tokenizer.ggml.token_type", [1] * len(tokens))]
    return {
        "model": model,
        "tokens": tokens,
        "scores": scores,
        "types": types,
        "bos": _field_value(reader, "tokenizer.ggml.bos_token_id"),
        "eos": _field_value(reader, "tokenizer.ggml.eos_token_id"),
        "unk": _field_value(reader, "tokenizer.ggml.unknown_token_id"),
        "pad": _field_value(reader, "tokenizer.ggml.padding_token_id"),
        "add_bos": bool(_field_value(reader, "tokenizer.ggml.add_bos_token", True)),
        "add_eos": bool(_field_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_space_prefix": bool(_field_value(reader, "tokenizer.ggml.add_space_prefix", False)),
        "chat_template": _field_value(reader, "tokenizer.chat_template", ""),
        "architecture": _field_value(reader, "general.architecture", ""),
    }


def _spm_merges(
    tokens: Sequence[str], scores: Sequence[float], types: Sequence[int]
) -> list[tuple[str, str]]:
    """BPE merges equivalent to SentencePiece-BPE scores: a pair whose concatenation is a
    vocabulary piece merges with that piece's score as priority (higher first)."""
    vocab = {
        t: i for i, t in enumerate(tokens) if types[i] in (_TT_NORMAL, _TT_USER_DEFINED, _TT_UNUSED)
    }
    merges: list[tuple[float, int, int, str, str]] = []
    for piece, pid in vocab.items():
        if len(piece) < 2 or types[pid] != _TT_NORMAL:
            continue
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            li = vocab.get(left)
            ri = vocab.get(right)
            if li is not None and ri is not None:
                merges.append((-scores[pid], li, ri, left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def build_hf_tokenizer(gguf_path: Path) -> Any:
    """A ``PreTrainedTokenizerFast`` equal to llama.cpp's tokenizer for an SPM-vocab GGUF."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    v = gguf_vocab(gguf_path)
    if v["model"] != "llama":
        raise ConversionError(
            f"tokenizer rebuild supports SentencePiece ('llama') GGUF vocabularies, not "
            f"{v['model']!r}; convert from a Hugging Face folder instead",
            step="tokenizer",
            tokenizer_model=v["model"],
        )
    tokens: list[str] = v["tokens"]
    types: list[int] = v["types"]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _spm_merges(tokens, v["scores"], types)
    unk = tokens[v["unk"]] if v["unk"] is not None else None
    bpe = BPE(vocab=vocab, merges=merges, unk_token=unk, byte_fallback=True, fuse_unk=True)
    tok = Tokenizer(bpe)
    norm: list[Any] = []
    if v["add_space_prefix"]:
        norm.append(normalizers.Prepend("▁"))
    norm.append(normalizers.Replace(" ", "▁"))
    tok.normalizer = normalizers.Sequence(norm)
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        + ([decoders.Strip(" ", 1, 0)] if v["add_space_prefix"] else [])
    )
    # llama.cpp splits raw text on control tokens (when parsing specials) and always on
    # user-defined tokens, matching their literal text: the same as unnormalized added tokens.
    added = [
        AddedToken(tokens[i], special=types[i] == _TT_CONTROL, normalized=False)
        for i in range(len(tokens))
        if types[i] in (_TT_CONTROL, _TT_USER_DEFINED)
    ]
    tok.add_tokens(added)

    def name(idx: Any) -> str | None:
        return tokens[int(idx)] if idx is not None else None

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=name(v["bos"]),
        eos_token=name(v["eos"]),
        unk_token=unk,
        pad_token=name(v["pad"]),
        add_bos_token=v["add_bos"],
        add_eos_token=v["add_eos"],
        clean_up_tokenization_spaces=False,
    )
    if v["chat_template"]:
        hf.chat_template = v["chat_template"]
    return hf


# ----------------------------------------------------------------------------- conversion


def source_digest(src: Path) -> str:
    """sha256 of a GGUF file, or of a HF folder's files (names + contents)."""
    if src.is_file():
        return sha256_file(src)
    h = hashlib.sha256()
    for p in sorted(q for q in src.rglob("*") if q.is_file()):
        h.update(p.relative_to(src).as_posix().encode() + b"\0" + sha256_file(p).encode())
    return h.hexdigest()


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for pkg in ("openvino", "openvino-tokenizers", "optimum-intel", "transformers", "torch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "missing"
    return out


def _gguf_to_hf(src: Path, hf_dir: Path) -> None:
    _hide_broken_torchvision()
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar line per tensor would flood the log
    t0 = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(src.parent), gguf_file=src.name, dtype=torch.float32
        )
    except Exception as exc:
        raise ConversionError(
            f"transformers could not load {src}: {exc}", step="gguf_to_hf", src=str(src)
        ) from exc
    model.save_pretrained(str(hf_dir))
    del model
    tok = build_hf_tokenizer(src)
    tok.save_pretrained(str(hf_dir))
    log.info("GGUF → HF folder in %.1f s", time.perf_counter() - t0)


def _export_ir(hf_dir: Path, out: Path, weight_format: str) -> None:
    """optimum-intel export to fp32 IR, then weight compression with NNCF / fp16 on save.

    (optimum-intel 2.2's ``main_export`` ignores an explicit ``quantization_config``; its CLI
    quantizes in a second pass. Doing that pass here keeps the options explicit.)
    """
    _hide_broken_torchvision()
    import openvino as ov
    from optimum.exporters.openvino import main_export
    from optimum.intel import OVConfig

    t0 = time.perf_counter()
    try:
        main_export(
            model_name_or_path=str(hf_dir),
            output=str(out),
            task="text-generation-with-past",
            ov_config=OVConfig(dtype="fp32"),
            convert_tokenizer=False,
            library_name="transformers",
        )
    except Exception as exc:
        raise ConversionError(
            f"optimum-intel export failed: {exc}", step="export", src=str(hf_dir)
        ) from exc
    log.info("HF → IR (fp32) in %.1f s", time.perf_counter() - t0)
    t1 = time.perf_counter()
    xml = out / "openvino_model.xml"
    core = ov.Core()
    model = core.read_model(str(xml))
    if weight_format in ("int8", "int4"):
        import nncf

        if weight_format == "int8":
            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        else:
            model = nncf.compress_weights(
                model, mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=64, ratio=1.0
            )
    tmp = out / "compressed"
    tmp.mkdir()
    ov.save_model(model, str(tmp / "openvino_model.xml"), compress_to_fp16=weight_format != "int8")
    del model
    for name in ("openvino_model.xml", "openvino_model.bin"):
        os.replace(tmp / name, out / name)
    tmp.rmdir()
    log.info("weights → %s in %.1f s", weight_format, time.perf_counter() - t1)


def _export_tokenizer(hf_dir: Path, out: Path) -> None:
    _hide_broken_torchvision()
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(hf_dir))
    ov_tok, ov_detok = convert_tokenizer(hf_tok, with_detokenizer=True, skip_special_tokens=True)
    ov.save_model(ov_tok, str(out / "openvino_tokenizer.xml"))
    ov.save_model(ov_detok, str(out / "openvino_detokenizer.xml"))
    hf_tok.save_pretrained(str(out))


def convert(src: Path, out: Path, weight_format: str) -> Path:
    """Convert ``src`` (a GGUF file or a HF model folder) into an OpenVINO model folder ``out``.

    ``out`` receives ``openvino_model.xml/.bin``, ``openvino_tokenizer.xml/.bin``,
    ``openvino_detokenizer.xml/.bin``, the HF config/tokenizer files and
    ``contenox_conversion.json`` (source digest, options, tool versions, timing). The folder is
    written next to ``out`` and renamed into place, so a failed conversion never leaves a
    half-written model behind.
    """
    src = Path(src)
    out = Path(out)
    if weight_format not in WEIGHT_FORMATS:
        raise ConversionError(
            f"unknown weight format {weight_format!r} (allowed: {' | '.join(WEIGHT_FORMATS)})",
            step="options",
            weight_format=weight_format,
        )
    if not src.exists():
        raise ModelNotFoundError(f"conversion source not found: {src}", path=str(src))
    is_gguf = src.is_file()
    if is_gguf and src.suffix.lower() != ".gguf":
        raise ConversionError(f"{src} is neither a .gguf file nor a folder", step="options")
    if not is_gguf and not (src / "config.json").is_file():
        raise ConversionError(f"{src} has no config.json (not a HF model folder)", step="options")
    t0 = time.perf_counter()
    digest = source_digest(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        stage = work / "ir"
        stage.mkdir()
        if is_gguf:
            hf_dir = work / "hf"
            _gguf_to_hf(src, hf_dir)
        else:
            hf_dir = src
        _export_ir(hf_dir, stage, weight_format)
        _export_tokenizer(hf_dir, stage)
        if not (stage / "openvino_model.xml").is_file():
            raise ConversionError("export produced no openvino_model.xml", step="export")
        manifest = {
            "converter_version": CONVERTER_VERSION,
            "source": str(src),
            "source_digest": digest,
            "weight_format": weight_format,
            "task": "text-generation-with-past",
            "tokenizer": "rebuilt from GGUF (SPM-BPE, byte fallback)" if is_gguf else "source",
            "model_digest": sha256_file(stage / "openvino_model.bin"),
            "versions": _versions(),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        (stage / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        if out.exists():
            shutil.rmtree(out)
        os.replace(stage, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def cached_convert(src: Path, weight_format: str, cache_root: Path | None = None) -> Path:
    """``convert`` into ``<cache>/openvino/<source digest[:16]>-<format>-v<N>``, once."""
    src = Path(src)
    digest = source_digest(src) if src.is_dir() else _cached_file_digest(src)
    out = cache_entry(digest, weight_format, cache_root)
    if (out / MANIFEST_NAME).is_file() and (out / "openvino_model.xml").is_file():
        return out
    return convert(src, out, weight_format)


def _cached_file_digest(src: Path) -> str:
    from engine.model_files import cached_file_facts

    return cached_file_facts(src, lambda: {"sha256": sha256_file(src)}, "sha256")["sha256"]


# ----------------------------------------------------------------------------- CLI helpers


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout meanwhile to stderr, at the fd level: NNCF logs to
    stdout through a handler bound at import time, and native code writes to fd 1 directly.
    The CLI's stdout stays clean for whatever consumes it."""
    out = sys.stdout
    out.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        out.flush()
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        sys.stdout = out


def convert_quietly(src: Path, out: Path | None, weight_format: str) -> Path:
    """``convert`` (into ``out``) or ``cached_convert`` (``out`` None) with stdout kept clean
    for whatever consumes the caller's output."""
    with _stdout_to_stderr():
        if out is None:
            return cached_convert(src, weight_format)
        return convert(src, out, weight_format)


__all__ = [
    "WEIGHT_FORMATS",
    "ConversionError",
    "ModelLoadError",
    "build_hf_tokenizer",
    "cache_entry",
    "cached_convert",
    "convert",
    "convert_quietly",
    "gguf_vocab",
    "source_digest",
]
