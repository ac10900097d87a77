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


def probe_length(k: int) -> int:
    """The probe prompt's length for candidate ``k``: room for three micro-batches of it and
    some more."""
    return 4 * k + 40


def splits(k: int, n: int) -> list[list[int]]:
    """Splits of an ``n``-token prompt that put tokens into micro-batches of ``k``, ``k + 1``
    and ``k + 3`` tokens, in the middle and at the end (every part at least ``k``)."""
    a = (n - k) // 3
    return [[a, k, n - a - k], [n - k - 1, k + 1], [k + 3, n - k - 3]]


def within(sizes: Sequence[int], max_batch: int, k: int) -> list[int]:
    """``sizes`` with every part over ``max_batch`` cut into micro-batches of at most that,
    none under ``k`` (the last of a part borrows from the one before; ``max_batch >= 2k``)."""
    out: list[int] = []
    for size in sizes:
        while size > max_batch:
            take = max_batch if size - max_batch >= k else size - k
            out.append(take)
            size -= take
        out.append(size)
    return out


def find_min_batch(run: RunFn, max_batch: int) -> int | None:
    """The smallest candidate size from which micro-batches are invariant (see the module
    doc), or None. The reference decodes the probe prompt in micro-batches of ``max_batch``
    (one where it fits), each split in micro-batches of at most that; every part of either
    is at least the candidate, so a candidate needs ``max_batch >= 2k``."""
    for k in CANDIDATES:
        if max_batch < 2 * k:
            break
        n = probe_length(k)
        reference = run(within([n], max_batch, k))
        if all(run(within(sizes, max_batch, k)) == reference for sizes in splits(k, n)):
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


#: Part of every cache key: a probe that measures differently measures anew (2: micro-batches
#: of at most the maximum, the reference included, instead of one reference batch).
PROBE_VERSION = 2


def probe_key(**facts: object) -> str:
    """The cache key of one probe: everything that selects kernels or their rounding."""
    text = json.dumps({**facts, "probe_version": PROBE_VERSION}, sort_keys=True, default=str)
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
