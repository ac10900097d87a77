"""The cache manifest: strict JSON round trip, reusable prefix and its reasons, every identity
field as a mandatory miss, and comparison against a resident token list."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from test_contextasm_support import (
    LlamaVocabTokenizer,
    load_tokenizer,
    make_identity,
    sample_inputs,
)

from contextasm import (
    Assembly,
    ContextIdentity,
    Manifest,
    ManifestError,
    Pin,
    SegmentKind,
    TokenCache,
    assemble,
    common_prefix_length,
)


@pytest.fixture(scope="session")
def gemma() -> LlamaVocabTokenizer:
    return load_tokenizer()


def build(tok: Any, inputs: Any = None, **ident: Any) -> Assembly:
    return assemble(
        inputs or sample_inputs(),
        tok,
        make_identity(tok, **ident),
        max_new_tokens=256,
        token_cache=TokenCache(),
    )


def test_json_round_trip(gemma: LlamaVocabTokenizer):
    asm = build(gemma, block_size=32)
    m = asm.manifest
    text = m.to_json()
    back = Manifest.from_json(text)
    assert back == m
    assert back.to_json() == text
    d = json.loads(text)
    assert d["identity_digest"] == m.identity.digest()
    assert d["stable_end"] == asm.stable_end and d["user_start"] == asm.user_start
    assert d["identity"]["block_size"] == 32
    seg = d["segments"][0]
    assert set(seg) == {
        "kind", "label", "byte_hash", "token_hash", "prefix_hash", "token_start", "token_end",
        "cache_class", "invalidation", "truncated", "padding",
    }  # fmt: skip
    assert d["segments"][0]["kind"] == "system"


def _mutations(d: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []

    def mutate(name: str, fn: Any) -> None:
        c = json.loads(json.dumps(d))
        fn(c)
        out.append((name, c))

    mutate("unknown top key", lambda c: c.update(extra=1))
    mutate("missing top key", lambda c: c.pop("user_start"))
    mutate("unknown segment key", lambda c: c["segments"][0].update(extra=1))
    mutate("missing segment key", lambda c: c["segments"][1].pop("token_hash"))
    mutate("bool as int", lambda c: c["segments"][0].update(token_start=False))
    mutate("int as bool", lambda c: c["segments"][0].update(truncated=0))
    mutate("bad kind", lambda c: c["segments"][0].update(kind="banner"))
    mutate("bad class", lambda c: c["segments"][0].update(cache_class="urgent"))
    mutate(
        "gap in ranges",
        lambda c: c["segments"][1].update(token_start=c["segments"][1]["token_start"] + 1),
    )
    mutate("wrong n_tokens", lambda c: c.update(n_tokens=c["n_tokens"] + 1))
    mutate("wrong stable_end", lambda c: c.update(stable_end=c["stable_end"] - 1))
    mutate("wrong user_start", lambda c: c.update(user_start=0))
    mutate("order", lambda c: c["segments"].reverse())
    mutate("digest", lambda c: c.update(identity_digest="0" * 64))
    mutate("identity unknown key", lambda c: c["identity"].update(extra=1))
    mutate("schema version", lambda c: c.update(schema_version=99))
    return out


def test_from_dict_is_strict(gemma: LlamaVocabTokenizer):
    d = build(gemma).manifest.to_dict()
    for name, bad in _mutations(d):
        with pytest.raises(ManifestError) as err:
            Manifest.from_dict(bad)
        assert err.value.code == "invalid_manifest", name
    with pytest.raises(ManifestError):
        Manifest.from_json("{not json")
    with pytest.raises(ManifestError):
        Manifest.from_dict([1, 2])


def _other_value(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2
    if isinstance(value, float):
        return value * 2.0
    return value + "-other"


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ContextIdentity)])
def test_every_identity_field_is_a_mandatory_miss(gemma: LlamaVocabTokenizer, field: str):
    asm = build(gemma)
    other = dataclasses.replace(asm.identity, **{field: _other_value(getattr(asm.identity, field))})
    other_manifest = dataclasses.replace(asm.manifest, identity=other)
    assert asm.manifest.reusable_prefix(other_manifest) == (0, f"profile field {field}")
    assert other_manifest.reusable_prefix(asm.manifest) == (0, f"profile field {field}")
    assert asm.reuse_against_resident(asm.tokens, other) == (0, f"profile field {field}")


def test_reusable_prefix_reasons(gemma: LlamaVocabTokenizer):
    base = build(gemma)
    assert base.manifest.reusable_prefix(base.manifest) == (base.n_tokens, "identical")
    # A pin added after the existing pins: reuse through the existing ones.
    pins = (*sample_inputs().pins, Pin("pkg/new.py", 1, 1, "x = 1"))
    more = build(gemma, sample_inputs(pins=pins))
    n, reason = more.manifest.reusable_prefix(base.manifest)
    assert n == base.segments_of(SegmentKind.PINNED)[-1].token_end
    assert reason == "segment pinned pkg/new.py:1-1 replaces diff"
    # Diff removed: the segment after the pins is now diagnostics.
    nodiff = build(gemma, sample_inputs(diff=""))
    n, reason = nodiff.manifest.reusable_prefix(base.manifest)
    assert n == base.stable_end and "replaces diff" in reason
    # A snapshot's manifest covers only the stable prefix A–F.
    n_stable = len([s for s in base.segments if s.token_end <= base.stable_end])
    stable_only = dataclasses.replace(
        base.manifest,
        segments=base.manifest.segments[:n_stable],
        n_tokens=base.stable_end,
        user_start=base.stable_end,
    )
    assert base.manifest.reusable_prefix(stable_only) == (
        base.stable_end,
        "segment diff not cached",
    )
    assert stable_only.reusable_prefix(base.manifest) == (
        base.stable_end,
        "segment diff no longer in the prompt",
    )
    # An inconsistent manifest cannot even be built.
    with pytest.raises(ManifestError):
        dataclasses.replace(base.manifest, segments=base.manifest.segments[:-1])


def test_manifest_helpers(gemma: LlamaVocabTokenizer):
    asm = build(gemma)
    m = asm.manifest
    diff = asm.segment(SegmentKind.DIFF)
    assert diff is not None
    assert m.segment_at(diff.token_start) == diff.record()
    assert m.segment_at(asm.n_tokens) is None
    assert m.boundary(diff.token_end) == diff.record()
    assert m.boundary(diff.token_end - 1) is None
    assert m.prefix_class(asm.stable_end).value == "high"
    assert m.prefix_class(asm.segment(SegmentKind.INSTRUCTIONS).token_end).value == "highest"
    assert m.prefix_class(asm.user_start).value == "low"  # includes a stale log
    key = asm.prefix_key(asm.stable_end)
    assert key.n_tokens == asm.stable_end
    assert key.prefix_hash == asm.segments_of(SegmentKind.PINNED)[-1].prefix_hash
    # Off-boundary keys are computed from the tokens.
    mid = asm.prefix_key(10)
    assert mid.n_tokens == 10 and mid.prefix_hash not in {s.prefix_hash for s in asm.segments}
    assert asm.prefix_key(10) == mid


def test_reuse_against_resident_tokens(gemma: LlamaVocabTokenizer):
    asm = build(gemma)
    ident = asm.identity
    diff = asm.segment(SegmentKind.DIFF)
    assert diff is not None
    assert asm.reuse_against_resident(asm.tokens, ident) == (asm.n_tokens, "identical")
    assert asm.reuse_against_resident([*asm.tokens, 1, 2], ident) == (asm.n_tokens, "identical")
    # Token-level, not snapped to boundaries: diverging inside the diff segment.
    cut = diff.token_start + 3
    resident = [*asm.tokens[:cut], 0, 0, 0]
    assert asm.reuse_against_resident(resident, ident) == (
        cut,
        f"segment diff differs at token {cut}",
    )
    assert asm.reuse_against_resident(asm.tokens[:cut], ident) == (cut, "segment diff not resident")
    assert asm.reuse_against_resident(asm.tokens, None) == (0, "no resident state")


def test_common_prefix_length():
    a = list(range(20_000))
    assert common_prefix_length(a, a) == 20_000
    b = [*a[:12_345], -1, *a[12_346:]]
    assert common_prefix_length(a, b) == 12_345
    assert common_prefix_length(a, a[:5]) == 5
    assert common_prefix_length([], a) == 0
