"""Backend-independent context assembly: segments, manifest, cache policy, explain-context.

Typical use (the engine provides the tokenizer and the identity; the caller reads the
workspace: this package does no I/O, ``contenox_lsp.workspace_reads`` is the product's)::

    inputs = ContextInputs(system_prompt=DEFAULT_SYSTEM_PROMPT, ..., repo_map=RepoMap(...),
                           user=UserTurn(question="why does parse() fail?"))
    asm = assemble(inputs, session, identity, max_new_tokens=512)
    n, reason = asm.reuse_against_resident(session.resident_tokens, session.identity)
    table = format_explain_table(explain(asm, n).rows)

See ``contextasm/README.md`` for the full API.
"""

from __future__ import annotations

from contextasm.assembly import DEFAULT_MARGIN, Assembly, DroppedSegment, Segment, assemble
from contextasm.defaults import (
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TASK_POLICY,
    default_tool_schemas,
)
from contextasm.errors import (
    ContextAsmError,
    ContextOverflowError,
    InvalidInputError,
    ManifestError,
    SnapshotStoreError,
    TokenizerMismatchError,
    UnknownPromptFormatError,
)
from contextasm.explain import (
    ExplainRow,
    ExplainTotals,
    Explanation,
    explain,
    format_explain_table,
)
from contextasm.formats import (
    AUTO_FORMAT,
    BOS_POLICIES,
    PROMPT_FORMATS,
    PromptFormat,
    detect_prompt_format,
    get_format,
    resolve_prompt_format,
)
from contextasm.identity import ContextIdentity
from contextasm.inputs import (
    OUTPUT_KINDS,
    TOOL_OUTPUT_KINDS,
    CodeSnippet,
    ContextInputs,
    OutputEntry,
    Pin,
    RepoInstructions,
    RepoMap,
    RepoMapRenderer,
    UserTurn,
)
from contextasm.manifest import Manifest, SegmentRecord, common_prefix_length
from contextasm.segments import STABLE_KINDS, CacheClass, SegmentKind
from contextasm.snapshot_key import SnapshotKey
from contextasm.store import SnapshotEntry, SnapshotStore
from contextasm.tokens import TokenCache, Tokenizer, default_token_cache

__all__ = [
    "AUTO_FORMAT",
    "BOS_POLICIES",
    "DEFAULT_MARGIN",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TASK_POLICY",
    "OUTPUT_KINDS",
    "PROMPT_FORMATS",
    "STABLE_KINDS",
    "TOOL_OUTPUT_KINDS",
    "Assembly",
    "CacheClass",
    "CodeSnippet",
    "ContextAsmError",
    "ContextIdentity",
    "ContextInputs",
    "ContextOverflowError",
    "DroppedSegment",
    "ExplainRow",
    "ExplainTotals",
    "Explanation",
    "InvalidInputError",
    "Manifest",
    "ManifestError",
    "OutputEntry",
    "Pin",
    "PromptFormat",
    "RepoInstructions",
    "RepoMap",
    "RepoMapRenderer",
    "Segment",
    "SegmentKind",
    "SegmentRecord",
    "SnapshotEntry",
    "SnapshotKey",
    "SnapshotStore",
    "SnapshotStoreError",
    "TokenCache",
    "Tokenizer",
    "TokenizerMismatchError",
    "UnknownPromptFormatError",
    "UserTurn",
    "assemble",
    "common_prefix_length",
    "default_token_cache",
    "default_tool_schemas",
    "detect_prompt_format",
    "explain",
    "format_explain_table",
    "get_format",
    "resolve_prompt_format",
]
