"""Deterministic prompt assembly: inputs → segments A–J → tokens, manifest and reuse keys.

Each segment is rendered from its inputs alone and tokenized on its own; the prompt is the
concatenation of the segments' token lists. So every segment boundary is a token boundary, a
segment's tokens do not depend on its neighbours, and an edit to one input changes that segment
and (through the prefix hashes) only the prefixes that contain it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from contextasm import render
from contextasm.budget import Slot, Variant, fit, padding_for, region, total_tokens
from contextasm.difftools import focus_order, parse_diff, render_units
from contextasm.errors import ContextOverflowError, InvalidInputError, TokenizerMismatchError
from contextasm.formats import PromptFormat, check_bos_policy, get_format
from contextasm.hashing import PrefixHasher, prefix_hash, text_hash, token_hash
from contextasm.identity import ContextIdentity
from contextasm.inputs import CodeSnippet, ContextInputs, OutputEntry, Pin, RepoMap
from contextasm.manifest import Manifest, SegmentRecord, common_prefix_length
from contextasm.segments import STABLE_KINDS, CacheClass, SegmentKind
from contextasm.snapshot_key import SnapshotKey
from contextasm.tokens import TokenCache, Tokenizer, default_token_cache

logger = logging.getLogger(__name__)

#: Tokens kept free besides ``max_new_tokens`` (template slack, a stop token).
DEFAULT_MARGIN = 32

_REPO_MAP_STEP = 0.85  # each smaller repo-map rung asks for 85% of the previous budget
_REPO_MAP_MIN_BUDGET = 32
# First-pass floors (see budget.fit): what a segment keeps before others of its class go.
_SOFT_REPO_MAP_FRACTION = 0.25
_SOFT_PIN_LINES = 40
_SOFT_DIFF_HUNKS = 3
_SOFT_OUTPUT_TAIL_LINES = 30
# Shares of the limit (see budget.fit): what one volatile segment may take when over budget.
_DIFF_SHARE = 0.35
_OUTPUT_SHARE = 0.2
_USER_SHARE = 0.35


@dataclass(frozen=True)
class Segment:
    """One assembled segment: its text, its tokens and where they sit in the prompt.

    ``text`` is the rendered text including turn markers (BOS is a token, not text);
    ``padding`` neutral newline tokens follow it when it closes the block-aligned stable
    region. ``tokens`` includes BOS (segment A) and padding.
    """

    index: int
    kind: SegmentKind
    label: str
    text: str
    tokens: tuple[int, ...]
    token_start: int
    token_end: int
    byte_hash: str
    token_hash: str
    prefix_hash: str
    cache_class: CacheClass
    invalidation: str
    truncated: bool
    padding: int
    full_tokens: int  # tokens of the untruncated rendering (== len(tokens) - padding if whole)

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start

    def record(self) -> SegmentRecord:
        return SegmentRecord(
            kind=self.kind,
            label=self.label,
            byte_hash=self.byte_hash,
            token_hash=self.token_hash,
            prefix_hash=self.prefix_hash,
            token_start=self.token_start,
            token_end=self.token_end,
            cache_class=self.cache_class,
            invalidation=self.invalidation,
            truncated=self.truncated,
            padding=self.padding,
        )


@dataclass(frozen=True)
class DroppedSegment:
    """A segment the budget left out entirely (shown as ``evicted`` by explain)."""

    kind: SegmentKind
    label: str
    cache_class: CacheClass
    invalidation: str
    full_tokens: int


@dataclass(frozen=True)
class Assembly:
    """An assembled prompt: tokens, segments, manifest, and what the budget left out."""

    tokens: list[int]
    segments: tuple[Segment, ...]
    manifest: Manifest
    dropped: tuple[DroppedSegment, ...] = ()
    question_offset: int = 0
    """Tokens of segment I before its question (the user-open marker, where the user is)."""
    question_keyed_start: int | None = None
    """Where the question-keyed code segment starts, when there is one (before segment I)."""

    @property
    def identity(self) -> ContextIdentity:
        return self.manifest.identity

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def user_start(self) -> int:
        """Token index where segment I starts."""
        return self.manifest.user_start

    @property
    def question_start(self) -> int:
        """Token index where what depends on the question starts (the question-keyed code
        segment, else the question): everything before it (the cursor's code and the code
        around the cursor, the user turn's file and selection) is known before the question
        is, so the idle prefill can do it."""
        if self.question_keyed_start is not None:
            return self.question_keyed_start
        return self.manifest.user_start + self.question_offset

    @property
    def stable_end(self) -> int:
        """End of the highest/high region (A–F), block-aligned; the snapshot boundary."""
        return self.manifest.stable_end

    @property
    def limit(self) -> int:
        return self.manifest.limit

    @property
    def text(self) -> str:
        """The whole prompt as text (markers included, BOS not; padding as newlines)."""
        return "".join(s.text + "\n" * s.padding for s in self.segments)

    def segment(self, kind: SegmentKind) -> Segment | None:
        """The first segment of ``kind`` (None when absent)."""
        return next((s for s in self.segments if s.kind is kind), None)

    def segments_of(self, kind: SegmentKind) -> tuple[Segment, ...]:
        return tuple(s for s in self.segments if s.kind is kind)

    def prefix_key(self, n_tokens: int) -> SnapshotKey:
        """Snapshot-store key of the prefix ``tokens[:n_tokens]`` under this identity."""
        if not 0 <= n_tokens <= len(self.tokens):
            raise InvalidInputError(
                f"prefix length {n_tokens} outside 0..{len(self.tokens)}",
                data={"n_tokens": n_tokens, "total": len(self.tokens)},
            )
        boundary = self.manifest.boundary(n_tokens)
        digest = self.manifest.identity_digest
        phash = boundary.prefix_hash if boundary else prefix_hash(digest, self.tokens[:n_tokens])
        return SnapshotKey(identity_digest=digest, prefix_hash=phash, n_tokens=n_tokens)

    def prefix_class(self, n_tokens: int) -> CacheClass:
        """Cache class of the prefix ``[0, n_tokens)`` (its least valuable segment's class)."""
        return self.manifest.prefix_class(n_tokens)

    def reusable_prefix(self, other: Manifest) -> tuple[int, str]:
        """Reusable tokens of this prompt given a state described by ``other``."""
        return self.manifest.reusable_prefix(other)

    def reuse_against_resident(
        self, resident_tokens: Sequence[int], resident_identity: ContextIdentity | None
    ) -> tuple[int, str]:
        """Reusable tokens given a plain resident token list (what a live session holds).

        Token-level longest common prefix (not snapped to segment boundaries), zero on any
        identity difference. The reason names the segment where the lists diverge.
        """
        if resident_identity is None:
            return 0, "no resident state"
        field_name = self.identity.first_mismatch(resident_identity)
        if field_name is not None:
            return 0, f"profile field {field_name}"
        n = common_prefix_length(self.tokens, resident_tokens)
        if n == len(self.tokens):
            return n, "identical"
        seg = self.manifest.segment_at(n)
        label = seg.label if seg else "end"
        if n == len(resident_tokens):
            return n, f"segment {label} not resident"
        return n, f"segment {label} differs at token {n}"


def assemble(
    inputs: ContextInputs,
    tokenizer: Tokenizer,
    identity: ContextIdentity,
    *,
    max_new_tokens: int,
    margin: int = DEFAULT_MARGIN,
    block_size: int | None = None,
    token_cache: TokenCache | None = None,
) -> Assembly:
    """Assemble the prompt for ``inputs`` under ``identity`` within the context budget.

    Budget: ``identity.n_ctx - max_new_tokens - margin`` prompt tokens. Over budget, segments
    shrink in class order (low, then medium, then high; the user turn's selection and cursor
    context last); highest-class segments are never touched, and if the prompt still does not
    fit, ``ContextOverflowError`` carries ``requested`` and ``limit``. ``block_size`` defaults
    to ``identity.block_size``. Raises ``UnknownPromptFormatError`` for an unknown
    ``identity.prompt_format`` and ``TokenizerMismatchError`` when the tokenizer's digest is
    not the identity's.
    """
    fmt = get_format(identity.prompt_format)
    check_bos_policy(identity.bos_policy)
    if tokenizer.tokenizer_digest != identity.tokenizer_digest:
        raise TokenizerMismatchError(
            "tokenizer digest differs from the identity's",
            data={
                "tokenizer_digest": tokenizer.tokenizer_digest,
                "identity_tokenizer_digest": identity.tokenizer_digest,
            },
        )
    bs = identity.block_size if block_size is None else block_size
    if bs < 1 or max_new_tokens < 0 or margin < 0:
        raise InvalidInputError(
            "block_size must be >= 1, max_new_tokens and margin >= 0",
            data={"block_size": bs, "max_new_tokens": max_new_tokens, "margin": margin},
        )
    bos: tuple[int, ...] = ()
    if identity.bos_policy == "add":
        if tokenizer.bos_token_id is None:
            raise InvalidInputError("bos_policy 'add' but the tokenizer has no BOS token")
        bos = (int(tokenizer.bos_token_id),)
    limit = identity.n_ctx - max_new_tokens - margin
    builder = _Builder(
        tokenizer, token_cache if token_cache is not None else default_token_cache(), fmt, inputs
    )
    slots = builder.slots(bos)
    total = fit(slots, _shrink_stages(slots), limit, bs)
    if total > limit:
        raise ContextOverflowError(
            f"prompt needs {total} tokens after shrinking everything allowed; limit is {limit}",
            data={
                "requested": total,
                "limit": limit,
                "n_ctx": identity.n_ctx,
                "max_new_tokens": max_new_tokens,
                "margin": margin,
                "segments": {s.label: _n(s) for s in slots if s.variant() is not None},
            },
        )
    return _finish(slots, identity, bs, limit, max_new_tokens, margin, builder)


def _n(slot: Slot) -> int:
    v = slot.variant()
    return len(v.tokens) if v else 0


def _shrink_stages(slots: Sequence[Slot]) -> list[list[int]]:
    """Stages in shrink order: low (stale output, snippets, old turns; oldest first; then the
    code segments, the question's before the cursor's), medium
    (output tails, then the diff), high (repo map, then pins from the last: keeps the longest
    prefix intact), and last the code around the cursor and the user turn's selection. Highest-class
    segments are in no stage: they are never touched."""
    outputs = [i for i, s in enumerate(slots) if s.kind is SegmentKind.DIAGNOSTICS]
    low = [i for i in outputs if slots[i].cache_class is CacheClass.LOW]
    # Code: the question's search hits first, then the cursor's (warm) definitions; the code
    # around the cursor goes with the user turn, last.
    cursor = [i for i, s in enumerate(slots) if s.label == "cursor context"]
    code = sorted((i for i, s in enumerate(slots) if s.kind is SegmentKind.CODE
                   and i not in cursor), key=lambda i: not slots[i].question_keyed)
    medium = [i for i in outputs if slots[i].cache_class is not CacheClass.LOW]
    diff = [i for i, s in enumerate(slots) if s.kind is SegmentKind.DIFF]
    repo = [i for i, s in enumerate(slots) if s.kind is SegmentKind.REPO_MAP]
    pins = [i for i, s in enumerate(slots) if s.kind is SegmentKind.PINNED][::-1]
    user = [i for i, s in enumerate(slots) if s.kind is SegmentKind.USER]
    return [low + code, medium + diff, repo + pins, cursor + user]


class _Builder:
    """Creates one ``Slot`` per non-empty segment, each with its shrink ladder."""

    def __init__(
        self, tokenizer: Tokenizer, cache: TokenCache, fmt: PromptFormat, inputs: ContextInputs
    ) -> None:
        self.tokenizer = tokenizer
        self.cache = cache
        self.fmt = fmt
        self.inputs = inputs

    def variant(
        self,
        pieces: render.Pieces,
        *,
        truncated: bool = False,
        bos: tuple[int, ...] = (),
        invalidation: str | None = None,
    ) -> Variant:
        # Every rendering starts in the cache's trial tier; only those that end up in the
        # prompt are promoted (``keep``), so budget trials never push out the stable segments.
        piece_tokens = tuple(
            self.cache.tokenize(self.tokenizer, text, special=special, store=False)
            for text, special in pieces
        )
        tokens = bos + tuple(t for toks in piece_tokens for t in toks)
        return Variant(pieces, tokens, piece_tokens, truncated, invalidation)

    def keep(self, v: Variant) -> None:
        """Store / refresh the pieces of a rendering that is in the final prompt."""
        for (text, special), toks in zip(v.pieces, v.piece_tokens, strict=True):
            self.cache.put(self.tokenizer.tokenizer_digest, text, special, toks)

    def fixed(
        self,
        kind: SegmentKind,
        label: str,
        invalidation: str,
        pieces: render.Pieces,
        bos: tuple[int, ...] = (),
    ) -> Slot:
        v = self.variant(pieces, bos=bos)
        return Slot(kind, label, kind.default_cache_class, invalidation, lambda k: v, k_max=0)

    def slots(self, bos: tuple[int, ...]) -> list[Slot]:
        inp = self.inputs
        out = [
            self.fixed(
                SegmentKind.SYSTEM,
                "system",
                "system prompt (.contenox/system.md or built-in), prompt format, BOS policy",
                render.system(self.fmt, inp.system_prompt),
                bos,
            )
        ]
        for kind, label, inval, pieces in (
            (SegmentKind.TOOLS, "tools", "tool schemas",
             render.tools(inp.tool_schemas) if self.fmt.tools else ()),
            (SegmentKind.POLICY, "policy", "task policy", render.policy(inp.task_policy)),
            (
                SegmentKind.INSTRUCTIONS,
                "instructions",
                f"repo instructions ({inp.repo_instructions.source})"
                if inp.repo_instructions
                else "repo instructions",
                render.instructions(inp.repo_instructions),
            ),
        ):
            if pieces:
                out.append(self.fixed(kind, label, inval, pieces))
        if inp.repo_map is not None and render.normalize(inp.repo_map.text):
            out.append(self.repo_map_slot(inp.repo_map))
        out.extend(self.pin_slot(p) for p in inp.pins if render.normalize(p.text))
        if render.normalize(inp.diff):
            out.append(self.diff_slot(inp.diff))
        out.extend(self.output_slot(e) for e in inp.outputs if render.normalize(e.text))
        if inp.cursor_code:
            out.append(self.code_slot(
                inp.cursor_code, "code (cursor)", "Code the cursor's function uses",
                "cursor position and the definitions it reaches (symbol graph)", False))
        if inp.user.cursor_context and render.normalize(inp.user.cursor_context):
            out.append(self.cursor_slot())
        if inp.question_code:
            out.append(self.code_slot(
                inp.question_code, "code (question)", "Code that matches the question",
                "question (lexical search)", True))
        out.append(self.user_slot())
        return out

    def repo_map_slot(self, rm: RepoMap) -> Slot:
        full = self.variant(render.repo_map(rm.text))
        inval = f"repo map: signatures/symbols (digest {rm.digest[:12]})"
        renderer = rm.render
        if renderer is None:
            # No re-render callable: keep the map's first lines (it is ranked, best first).
            lines = render.normalize(rm.text).split("\n")

            def by_lines(k: int) -> Variant | None:
                if k >= len(lines):
                    return full
                if k == 0:
                    return None
                text = "\n".join(lines[:k]) + f"\n({len(lines) - k} more repo-map lines omitted)"
                return self.variant(render.repo_map(text), truncated=True)

            return Slot(
                SegmentKind.REPO_MAP,
                "repo map",
                CacheClass.HIGH,
                inval,
                by_lines,
                k_max=len(lines),
                soft_floor=max(1, int(len(lines) * _SOFT_REPO_MAP_FRACTION)),
            )
        budgets: list[int] = []
        b = int(len(full.tokens) * _REPO_MAP_STEP)
        while b >= _REPO_MAP_MIN_BUDGET:
            budgets.append(b)
            b = int(b * _REPO_MAP_STEP)
        k_max = len(budgets) + 1
        # Soft floor: the smallest rung still asking for a quarter of the full map.
        soft_rungs = [j for j, b in enumerate(budgets) if b >= len(full.tokens) * 0.25]
        soft = k_max - 1 - soft_rungs[-1] if soft_rungs else k_max

        def by_budget(k: int) -> Variant | None:
            if k >= k_max:
                return full
            if k == 0:
                return None
            budget = budgets[k_max - 1 - k]
            text, digest = renderer(budget)
            logger.debug("repo map re-rendered for %d tokens (digest %s)", budget, digest[:12])
            if not render.normalize(text):
                return None
            return self.variant(
                render.repo_map(text),
                truncated=True,
                invalidation=f"repo map: signatures/symbols (digest {digest[:12]}, "
                f"budget {budget})",
            )

        return Slot(
            SegmentKind.REPO_MAP,
            "repo map",
            CacheClass.HIGH,
            inval,
            by_budget,
            k_max=k_max,
            soft_floor=soft,
        )

    def pin_slot(self, pin: Pin) -> Slot:
        n_lines = len(render.normalize(pin.text).split("\n"))

        def by_lines(k: int) -> Variant | None:
            if k == 0:
                return None
            return self.variant(render.pin(pin, None if k >= n_lines else k), truncated=k < n_lines)

        return Slot(
            SegmentKind.PINNED,
            f"pinned {pin.path}:{pin.start_line}-{pin.end_line}",
            CacheClass.HIGH,
            f"pinned file {pin.path} lines {pin.start_line}-{pin.end_line}",
            by_lines,
            k_max=n_lines,
            soft_floor=_SOFT_PIN_LINES,
        )

    def diff_slot(self, diff_text: str) -> Slot:
        parsed = parse_diff(render.normalize(diff_text))
        user = self.inputs.user
        order = focus_order(
            parsed, file_path=user.file_path, line=user.line, question=user.question
        )
        full = self.variant(render.diff(diff_text))
        k_max = max(len(order), 1)

        def by_hunks(k: int) -> Variant | None:
            if k >= k_max:
                return full
            if k == 0:
                return None
            note = f"(diff reduced: {k} of {len(order)} hunks shown, nearest the cursor/question)"
            return self.variant(render.diff(render_units(parsed, order[:k]), note), truncated=True)

        return Slot(
            SegmentKind.DIFF,
            "diff",
            CacheClass.MEDIUM,
            "working-tree diff vs HEAD and unsaved buffers",
            by_hunks,
            k_max=k_max,
            soft_floor=_SOFT_DIFF_HUNKS,
            share=_DIFF_SHARE,
        )

    def output_slot(self, entry: OutputEntry) -> Slot:
        label = render.output_label(entry)
        inval = f"{label}{' (stale)' if entry.stale else ''}"
        if entry.cache_class is CacheClass.LOW:
            full = self.variant(render.output(entry))
            # Low entries go whole or not at all: they are the first thing to give up.
            return Slot(
                SegmentKind.DIAGNOSTICS,
                label,
                CacheClass.LOW,
                inval,
                lambda k: full if k else None,
                k_max=1,
            )
        n_lines = len(render.normalize(entry.text).split("\n"))

        def by_tail(k: int) -> Variant | None:
            if k == 0:
                return None
            return self.variant(
                render.output(entry, None if k >= n_lines else k), truncated=k < n_lines
            )

        return Slot(
            SegmentKind.DIAGNOSTICS,
            label,
            entry.cache_class,
            inval,
            by_tail,
            k_max=n_lines,
            soft_floor=_SOFT_OUTPUT_TAIL_LINES,
            share=_OUTPUT_SHARE,
        )

    def code_slot(self, snippets: Sequence[CodeSnippet], label: str, heading: str,
                  invalidation: str, question_keyed: bool) -> Slot:
        """A code segment; smaller rungs keep fewer snippets (the last ones go first)."""
        n = len(snippets)

        def by_count(k: int) -> Variant | None:
            if k == 0:
                return None
            # A file-only snippet is a pointer, not a definition left out.
            omitted = sum(1 for s in snippets[k:] if not s.file_only)
            return self.variant(render.code(heading, snippets[:k], omitted), truncated=k < n)

        return Slot(SegmentKind.CODE, label, CacheClass.LOW, invalidation, by_count, k_max=n,
                    soft_floor=1, question_keyed=question_keyed)

    def cursor_slot(self) -> Slot:
        """The code around the cursor: cursor-keyed, so it sits before the question's code;
        it shrinks with the user turn (last), keeping the lines nearest the cursor."""
        turn = self.inputs.user
        cur = len(render.normalize(turn.cursor_context or "").split("\n"))

        def by_lines(k: int) -> Variant | None:
            if k == 0:
                return None
            return self.variant(render.cursor(turn, None if k >= cur else k), truncated=k < cur)

        return Slot(SegmentKind.CODE, "cursor context", CacheClass.LOW,
                    "cursor position and the text around it", by_lines, k_max=cur,
                    share=_USER_SHARE)

    def user_slot(self) -> Slot:
        turn = self.inputs.user
        sel = len(render.normalize(turn.selection).split("\n")) if turn.selection else 0

        def by_lines(k: int) -> Variant | None:
            # The selection shrinks from its end; the question always stays.
            pieces = render.user(self.fmt, turn, selection_lines=None if k >= sel else k)
            return self.variant(pieces, truncated=k < sel)

        return Slot(
            SegmentKind.USER,
            "user",
            CacheClass.LOW,
            "question or selection",
            by_lines,
            k_max=sel,
            share=_USER_SHARE,
        )

    def newline_token(self) -> int:
        """The token block alignment pads with: one that adds one newline wherever it is
        appended. A single-token newline is that token; SentencePiece vocabularies give
        ``"\n"`` as a word-start marker plus the newline byte, so the token that one more
        newline adds is used (prompts are concatenated token lists, so no text has to
        tokenize to the padding)."""
        one = self.cache.tokenize(self.tokenizer, "\n", special=False)
        if len(one) == 1:
            return one[0]
        two = self.cache.tokenize(self.tokenizer, "\n\n", special=False)
        if len(two) == len(one) + 1 and two[: len(one)] == one:
            return two[-1]
        raise InvalidInputError(
            "block alignment needs a token that adds one newline; this tokenizer gives "
            f"{one} for a newline and {two} for two (set cache.block_size = 1)",
            data={"tokens": list(one)},
        )


def _finish(
    slots: Sequence[Slot],
    identity: ContextIdentity,
    block_size: int,
    limit: int,
    max_new_tokens: int,
    margin: int,
    builder: _Builder,
) -> Assembly:
    kept: list[tuple[Slot, Variant]] = []
    dropped: list[DroppedSegment] = []
    for slot in slots:
        v = slot.variant()
        if v is None:
            dropped.append(
                DroppedSegment(
                    slot.kind, slot.label, slot.cache_class, slot.invalidation, slot.full_tokens
                )
            )
        else:
            kept.append((slot, v))
            builder.keep(v)
    stable_len = sum(len(v.tokens) for s, v in kept if s.kind in STABLE_KINDS)
    pad = padding_for(stable_len, block_size)
    last_stable = max((i for i, (s, _) in enumerate(kept) if s.kind in STABLE_KINDS), default=-1)
    # The volatile segments (diff, outputs) and then the cursor's code are padded too, each
    # group on its own: the idle pre-prefill of everything before the question ends on a
    # block boundary, and an ask without a cursor (no cursor code) still reuses the diff.
    volatile = [i for i, (s, _) in enumerate(kept) if region(s) == 1]
    volatile_len = sum(len(kept[i][1].tokens) for i in volatile)
    pad_user = padding_for(stable_len + pad + volatile_len, block_size) if volatile_len else 0
    last_volatile = volatile[-1] if volatile else -1
    cursor = [i for i, (s, _) in enumerate(kept) if region(s) == 2]
    cursor_len = sum(len(kept[i][1].tokens) for i in cursor)
    pad_cursor = (padding_for(stable_len + pad + volatile_len + pad_user + cursor_len, block_size)
                  if cursor_len else 0)
    last_cursor = cursor[-1] if cursor else -1
    newline = (builder.newline_token(),) if pad or pad_user or pad_cursor else ()

    digest = identity.digest()
    hasher = PrefixHasher(digest)
    segments: list[Segment] = []
    tokens: list[int] = []
    for i, (slot, v) in enumerate(kept):
        padding = {last_stable: pad, last_volatile: pad_user, last_cursor: pad_cursor}.get(i, 0)
        seg_tokens = v.tokens + newline * padding
        hasher.update(seg_tokens)
        text = "".join(t for t, _ in v.pieces)
        segments.append(
            Segment(
                index=i,
                kind=slot.kind,
                label=slot.label,
                text=text,
                tokens=seg_tokens,
                token_start=len(tokens),
                token_end=len(tokens) + len(seg_tokens),
                byte_hash=text_hash(text),
                token_hash=token_hash(seg_tokens),
                prefix_hash=hasher.digest(),
                cache_class=slot.cache_class,
                invalidation=v.invalidation or slot.invalidation,
                truncated=v.truncated,
                padding=padding,
                full_tokens=slot.full_tokens,
            )
        )
        tokens.extend(seg_tokens)
    assert len(tokens) == total_tokens(slots, block_size)  # the fit was computed on these
    stable_end = segments[last_stable].token_end if last_stable >= 0 else 0
    user = next(s for s in segments if s.kind is SegmentKind.USER)
    user_variant = next(v for s, v in kept if s.kind is SegmentKind.USER)
    q = render.question_piece(user_variant.pieces)
    question_offset = sum(len(t) for t in user_variant.piece_tokens[:q])
    if user.index == 0:
        question_offset += len(user_variant.tokens) - sum(len(t) for t in user_variant.piece_tokens)
    manifest = Manifest(
        identity=identity,
        segments=tuple(s.record() for s in segments),
        n_tokens=len(tokens),
        user_start=user.token_start,
        stable_end=stable_end,
        limit=limit,
        max_new_tokens=max_new_tokens,
        margin=margin,
    )
    if dropped:
        logger.info("context budget %d: left out %s", limit, ", ".join(d.label for d in dropped))
    keyed = next((seg for seg, (s, _) in zip(segments, kept, strict=True) if s.question_keyed),
                 None)
    return Assembly(
        tokens=tokens, segments=tuple(segments), manifest=manifest, dropped=tuple(dropped),
        question_offset=question_offset,
        question_keyed_start=keyed.token_start if keyed is not None else None,
    )
