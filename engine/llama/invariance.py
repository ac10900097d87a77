"""Which micro-batch sizes give a token the same bits whatever else is in its batch.

Exact reuse needs a warm prefill to compute every token as a cold prefill of the same prompt
does. llama.cpp's CPU kernels are batch-invariant from some micro-batch size on, and that size
depends on the CPU and the build: measured on a 2-core AMD EPYC (AVX2), with weight repacking
off and flash attention off, a token computed in a micro-batch of 8 or more tokens has the
same bits whatever the batch's size, position and other tokens, and one computed in a batch
of 1-7 tokens does not (engine/README.md has the table). So the engine measures it at load:
``find_min_batch`` decodes a short prompt once in one micro-batch and then in splits that put
tokens into micro-batches of a candidate size (in the middle and at the end of the prompt),
and compares the last token's logits *and the whole KV state* bit for bit. The smallest
candidate for which every split agrees is the schedule's minimum micro-batch; none means the
kernels are not invariant at any size tried, and the engine falls back to the chunked
schedule. Results are kept per model, build and kernel-selecting settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.json_map import read_map, write_entry

#: Minimum micro-batch sizes tried, smallest first.
CANDIDATES = (8, 16, 32, 64)

#: Text the probe prompt is made of (any text works; code is what the engine sees most).
PROBE_TEXT = '''def dedent(text):
    """Remove any common leading whitespace from every line in `text`."""
    margin = None
    text = _whitespace_only_re.sub('', text)
    indents = _leading_whitespace_re.findall(text)
    for indent in indents:
        if margin is None:
            margin = indent
        elif indent.startswith(margin):
            pass
        elif margin.startswith(indent):
            margin = indent
        else:
            for i, (x, y) in enumerate(zip(margin, indent)):
                if x != y:
                    margin = margin[:i]
                    break
    if margin:
        text = re.sub(r'(?m)^' + margin, '', text)
    return text
'''

#: Decodes the probe prompt's first ``sum(sizes)`` tokens into an empty sequence, one
#: micro-batch per size, and returns what must be bitwise equal (last logits + KV state).
RunFn = Callable[[Sequence[int]], bytes]


def probe_length(k: int, max_batch: int) -> int:
    """The probe prompt for candidate ``k``: a few micro-batches long, one at most."""
    return min(4 * k + 40, max_batch)


def splits(k: int, n: int) -> list[list[int]]:
    """Splits of an ``n``-token prompt that put tokens into micro-batches of ``k``, ``k + 1``
    and ``k + 3`` tokens, in the middle and at the end (every part at least ``k``)."""
    a = (n - k) // 3
    return [[a, k, n - a - k], [n - k - 1, k + 1], [k + 3, n - k - 3]]


def find_min_batch(run: RunFn, max_batch: int) -> int | None:
    """The smallest candidate size from which micro-batches are invariant (see the module
    doc), or None. The reference decodes the probe prompt as one micro-batch of at most
    ``max_batch`` tokens; a candidate needs room for three of its size in it."""
    for k in CANDIDATES:
        n = probe_length(k, max_batch)
        if n < 3 * k + 3:
            break
        reference = run([n])
        if all(run(sizes) == reference for sizes in splits(k, n)):
            return k
    return None


def kernel_settings(profile: Any) -> dict[str, object]:
    """The profile settings that select llama.cpp's kernels or their rounding: part of every
    probe's cache key (this one and the restored-window probe's)."""
    return {"repack": profile.get("context.repack_weights"),
            "flash_attn": profile.get("context.flash_attn"),
            "type_k": profile.get("context.type_k"), "type_v": profile.get("context.type_v"),
            "swa_full": profile.swa_full, "n_gpu_layers": profile.get("context.n_gpu_layers"),
            "n_threads_batch": profile.get("context.n_threads_batch")}


def probe_key(**facts: object) -> str:
    """The cache key of one probe: everything that selects kernels or their rounding."""
    text = json.dumps(facts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def load_probe(path: Path, key: str) -> tuple[bool, int | None]:
    """(found, min_batch) from the cache file; a damaged entry counts as not found."""
    doc = read_map(path)
    if key not in doc:
        return False, None
    value = doc[key]
    if value is None:
        return True, None
    if isinstance(value, int) and not isinstance(value, bool) and value in CANDIDATES:
        return True, value
    return False, None


def store_probe(path: Path, key: str, min_batch: int | None) -> None:
    write_entry(path, key, min_batch)
