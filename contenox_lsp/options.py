"""Server options: CLI flags merged with the client's ``initializationOptions``.

Invalid initialization options never fail ``initialize``: each bad key is reported as a
warning (shown to the user with ``window/showMessage``) and its default is kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from contenox_lsp.context_budget import DEFAULT_CONTEXT_TOKENS, ContextBudget
from contenox_lsp.errors import InputError

# initializationOptions key → (dataclass field, accepted python types, validator description)
_KEYS: dict[str, tuple[str, tuple[type, ...], str]] = {
    "profile": ("profile", (str,), "a path to a profile TOML file"),
    "model": ("model", (str,), "a GGUF file path"),
    "debounceMs": ("debounce_ms", (int,), "an integer between 0 and 60000"),
    "prefillOnIdle": ("prefill_on_idle", (bool,), "true or false"),
    "contextTokens": ("context_tokens", (int,), "an integer between 0 and 65536"),
    "repoMapTokens": ("repo_map_tokens", (int,), "an integer between 0 and 65536"),
    "codeTokens": ("code_tokens", (int,), "an integer between 0 and 65536"),
    "questionCodeMs": ("question_code_ms", (int,), "an integer between 0 and 600000"),
    "maxTokens": ("max_tokens", (int,), "an integer between 1 and 4096"),
    "snapshotDir": ("snapshot_dir", (str,), "a directory path"),
    "autoSnapshots": ("auto_snapshots", (bool,), "true or false"),
    "logLevel": ("log_level", (str,), "one of debug, info, warning, error"),
}

_RANGES: dict[str, tuple[int, int]] = {
    "debounce_ms": (0, 60_000),
    "context_tokens": (0, 65_536),
    "repo_map_tokens": (0, 65_536),
    "code_tokens": (0, 65_536),
    "question_code_ms": (0, 600_000),
    "max_tokens": (1, 4096),
}

_LOG_LEVELS = ("debug", "info", "warning", "error")


@dataclass(frozen=True)
class ServerOptions:
    """Everything the server can be configured with (CLI flags or initializationOptions)."""

    profile: str | None = None
    """Profile TOML path; None → the engine's built-in default (embedded model)."""
    model: str | None = None
    """Override of the profile's model path (a GGUF file or ``embedded:...``)."""
    debounce_ms: int = 300
    """Idle time after the last edit before re-assembly and pre-prefill."""
    prefill_on_idle: bool = True
    """Pre-prefill the prompt up to the user turn in idle time."""
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    """The bound on a turn's context beside the question (``ContextBudget``): the repo map's
    share, then the code segments in what is left."""
    repo_map_tokens: int | None = None
    """The repo map's budget inside ``context_tokens``; None → its share (1,024 of 2,560)."""
    code_tokens: int | None = None
    """A cap on the code segments (J) inside ``context_tokens``; None → what is left. 35% for
    the definitions the cursor's code uses, the rest for those matching the question (bounded
    by ``question_code_ms``)."""
    question_code_ms: int = 1000
    """Prefill time an ask may spend on the code its question finds (it cannot be prefilled
    before the question): that part gets at most what the engine's measured prefill rate
    computes in this time (the cursor's part keeps its share). 0: no bound."""
    max_tokens: int = 256
    """Default answer length for asks and code actions."""
    snapshot_dir: str | None = None
    """Where ``contenox/snapshot`` keeps files; None → the profile's / platform cache dir."""
    auto_snapshots: bool = True
    """Save the stable prefix by itself and restore it at start-up (also needs the profile's
    ``cache.auto_snapshots``)."""
    log_level: str = "info"
    extra: dict[str, Any] = field(default_factory=dict)
    """Unrecognised-but-harmless keys are kept here (and warned about)."""

    def context_budget(self) -> ContextBudget:
        """The one budget beside the question these options give."""
        return ContextBudget(self.context_tokens, map_cap=self.repo_map_tokens,
                             code_cap=self.code_tokens)


def merge_initialization_options(
    base: ServerOptions, raw: Any
) -> tuple[ServerOptions, list[str]]:
    """Apply ``raw`` (the client's initializationOptions) over ``base``.

    Returns the effective options and human-readable warnings for every rejected key.
    """
    if raw is None:
        return base, []
    if not isinstance(raw, dict):
        return base, [f"initializationOptions must be an object, got {type(raw).__name__}"]

    warnings: list[str] = []
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        spec = _KEYS.get(key)
        if spec is None:
            warnings.append(
                f"initializationOptions: unknown key {key!r} ignored "
                f"(known: {', '.join(sorted(_KEYS))})"
            )
            continue
        name, kinds, expected = spec
        # bool is an int subclass: reject True for integer options explicitly.
        ok = isinstance(value, kinds) and not (
            isinstance(value, bool) and bool not in kinds
        )
        if ok and name in _RANGES:
            lo, hi = _RANGES[name]
            ok = lo <= value <= hi
        if ok and name == "log_level":
            ok = value in _LOG_LEVELS
        if ok and isinstance(value, str) and not value.strip():
            ok = False
        if not ok:
            warnings.append(
                f"initializationOptions.{key}: invalid value {value!r}, expected {expected}; "
                "using the default"
            )
            continue
        changes[name] = value
    return replace(base, **changes), warnings


def add_server_arguments(parser: Any) -> None:
    """The server's own flags of ``contenox-lsp serve`` (``--profile``, ``--model`` and
    ``--log-level`` are every command's)."""
    parser.add_argument("--debounce-ms", type=int, default=None,
                        help="idle time after an edit before re-assembly (default 300)")
    parser.add_argument("--no-prefill-on-idle", action="store_true",
                        help="do not pre-prefill the context in idle time")
    parser.add_argument("--context-tokens", type=int, default=None,
                        help="the bound on the context beside the question: repo map, pins, "
                             "diff, outputs, code (default 2560)")
    parser.add_argument("--repo-map-tokens", type=int, default=None,
                        help="the repo map's budget inside it (default: 40%%, 1024; 0 = none)")
    parser.add_argument("--code-tokens", type=int, default=None,
                        help="a cap on the code segments inside it (default: what is left; "
                             "0 = none)")
    parser.add_argument("--question-code-ms", type=int, default=None,
                        help="prefill time an ask may spend on the code its question finds "
                             "(default 1000; 0 = no bound)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="default answer length (default 256)")
    parser.add_argument("--snapshot-dir", default=None, help="where snapshots are kept")
    parser.add_argument("--no-auto-snapshots", action="store_true",
                        help="never save or restore snapshots by itself")


def options_from_args(ns: Any) -> ServerOptions:
    """ServerOptions from an argparse namespace (flags of ``add_server_arguments``; any
    missing attribute keeps its default, so the CLI's own parser works too)."""
    opts = ServerOptions()
    changes: dict[str, Any] = {}
    for name in ("profile", "model", "debounce_ms", "context_tokens", "repo_map_tokens",
                 "code_tokens",
                 "question_code_ms", "max_tokens",
                 "snapshot_dir", "log_level"):
        v = getattr(ns, name, None)
        if v is None:
            continue
        lo, hi = _RANGES.get(name, (None, None))
        if lo is not None and hi is not None and not lo <= v <= hi:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} must be between {lo} and {hi}", **{name: v})
        changes[name] = v
    if getattr(ns, "no_prefill_on_idle", False):
        changes["prefill_on_idle"] = False
    if getattr(ns, "no_auto_snapshots", False):
        changes["auto_snapshots"] = False
    return replace(opts, **changes)
