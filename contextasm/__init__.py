"""Backend-independent context assembly: segments, manifest, cache policy, explain-context.

Typical use (the engine provides the tokenizer and the identity)::

    inputs = gather_inputs(root, "why does parse() fail?", file_path="src/p.py", line=42,
                           repo_map=RepoMap(m.text, m.digest, render=...))
    asm = assemble(inputs, session, identity, max_new_tokens=512)
    n, reason = asm.reuse_against_resident(session.resident_tokens, session.identity)
    table = format_explain_table(explain(asm, n).rows)

See ``contextasm/README.md`` for the full API.
"""

from __future__ import annotations

from contextasm.assembly import DEFAULT_MARGIN, Assembly, DroppedSegment, Segment, assemble
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
from contextasm.workspace import (
    DEFAULT_SYSTEM_PROMPT,
    DEFAULT_TASK_POLICY,
    current_diff,
    cursor_context,
    default_tool_schemas,
    file_text,
    gather_inputs,
    load_pin,
    load_repo_instructions,
    load_system_prompt,
    repo_map_from_index,
)

__all__ = [
    "AUTO_FORMAT",
    "BOS_POLICIES",
    "DEFAULT_MARGIN",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TASK_POLICY",
    "OUTPUT_KINDS",
    "PROMPT_FORMATS",
    "STABLE_KINDS",
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
    "current_diff",
    "cursor_context",
    "default_token_cache",
    "default_tool_schemas",
    "detect_prompt_format",
    "explain",
    "file_text",
    "format_explain_table",
    "gather_inputs",
    "get_format",
    "load_pin",
    "load_repo_instructions",
    "load_system_prompt",
    "repo_map_from_index",
    "resolve_prompt_format",
]
