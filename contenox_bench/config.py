"""Sizes and repetition counts of each mode (``--quick``, default, ``--full``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: Step kinds of the edit trace, in script order (see ``trace_script``).
TRACE_STEPS_DEFAULT = ("open", "body_edit", "body_edit_2", "signature", "pin", "test_output",
                       "body_edit_3")
TRACE_STEPS_QUICK = ("open", "body_edit", "signature", "pin", "test_output")


@dataclass(frozen=True)
class TraceConfig:
    steps: tuple[str, ...] = TRACE_STEPS_DEFAULT
    repo_map_tokens: int = 1024  # the server's default
    max_tokens: int = 8  # answer length of each ask (TTFT does not depend on it)
    idle_gap_s: float = 5.0  # quiet time between the last edit and the ask
    keystroke_s: float = 0.06  # one didChange per typed character at this interval
    debounce_ms: int = 300  # the server's default
    startup_timeout_s: float = 900.0  # hang guard while a server loads/warms, not a timing
    ask_timeout_s: float = 900.0


@dataclass(frozen=True)
class TypingConfig:
    lines: int = 5  # lines of the function body typed back
    repo_map_tokens: int = 1024  # the server's default
    pause_s: float = 0.2  # the user's pause before each request (Neovim's 200 ms debounce)


@dataclass(frozen=True)
class NextEditConfig:
    tasks: int = 3  # how many of the shipped tasks (data/next_edit_tasks.json) are replayed
    settle_s: float = 30.0  # longest wait for the idle warm-up after a hunk (then it asks)
    repo_map_tokens: int = 256


@dataclass(frozen=True)
class FleetConfig:
    """Section 12: developers on llama-server replicas behind vllm-router (default mode)."""

    enabled: bool = True
    developers: int = 4
    replicas: int = 2
    slots: int = 8  # per replica; a developer's slot is their key's hash modulo this
    steps: int = 4  # edits (each: idle prefill, then an ask) per developer
    context_chars: int = 2400  # each workspace's stable context (~600 tokens)
    n_ctx: int = 2048  # per slot
    stagger_s: float = 0.5  # between developers' starts
    timeout_s: float = 600.0  # hang guard per request / developer, not a timing


@dataclass(frozen=True)
class RestartConfig:
    sizes: tuple[int, ...] = (2048, 8192)  # stable-prefix tokens (repo map + pins)
    max_tokens: int = 8  # answer length (TTFT does not depend on it)
    timeout_s: float = 1800.0  # hang guard while a server loads/warms, not a timing


@dataclass(frozen=True)
class BigRepoConfig:
    """The bigrepo section: the repository index on N copied Python files (issue 32)."""

    sizes: tuple[int, ...] = (2000, 8000, 20000)  # files of each synthetic workspace
    edits: int = 20  # signature edits (and as many body edits), each on another file
    focus_changes: int = 3  # maps with a new focus file (each a new ranking)
    map_tokens: int = 1024  # the server's default repoMapTokens
    seed: int = 0  # package order of the workspace, choice of the edited files
    source: str | None = None  # folder of .py files to copy (default: site-packages)
    child_timeout_s: float = 1800.0  # hang guard per phase, not a timing


@dataclass(frozen=True)
class BenchConfig:
    mode: str
    n_ctx: int
    reps: int  # repetitions of warm / cheap measurements
    cold_reps: int  # repetitions of long cold prefills (curve, scaling)
    runtime_prefix: int  # stable prefix of the runtime report (the 2k snapshot goal)
    runtime_suffix: int  # changed suffix of the runtime report
    overhead_tokens: int  # prompt of the engine-vs-bare-loop pairs
    overhead_pairs: int  # interleaved (engine, bare) pairs: a paired ratio resists drift
    greedy_tokens: int  # tokens compared by each warm == cold check
    decode_tokens: int  # tokens generated for decode tokens/s
    curve_prefix: int
    curve_points: tuple[int, ...]
    scaling_sizes: tuple[int, ...]
    scaling_question: int  # tokens of the user turn asked after each stable context
    # Backends section (llama.cpp vs OpenVINO on the same assembled prompts).
    backends_cold_sizes: tuple[int, ...] = (2048, 4096)  # cold prefill tokens/s points
    backends_prefix: int = 2048  # stable prefix of the warm changed-suffix row
    backends_suffix: int = 128  # its changed suffix (the user turn: cursor code + question)
    # The remote section's edit trace (a, b on the llama-server backend; c, d on llama-server
    # itself): two more language servers, so not in --quick.
    remote_trace: bool = True
    backends_child_timeout_s: float = 1800.0  # hang guard per backend child, not a timing
    # Drift section: warm vs cold per reuse path. The prefix is longer than Gemma 3's
    # 512-token sliding window by default (restores keep only the window's cells).
    drift_prefix: int = 617
    drift_tokens: int = 64  # greedy tokens compared (the identical-prefix length is of these)
    trace: TraceConfig = field(default_factory=TraceConfig)
    typing: TypingConfig = field(default_factory=TypingConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)
    next_edit: NextEditConfig = field(default_factory=NextEditConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    bigrepo: BigRepoConfig = field(default_factory=BigRepoConfig)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT = BenchConfig(
    mode="default",
    n_ctx=10240,  # the 8k scaling point plus its question and answer
    reps=3,
    cold_reps=2,
    runtime_prefix=2048,
    runtime_suffix=128,
    overhead_tokens=1024,
    overhead_pairs=4,
    greedy_tokens=8,
    decode_tokens=32,
    curve_prefix=2048,
    curve_points=(0, 256, 1024, 4096),
    scaling_sizes=(1024, 2048, 4096, 8192),
    scaling_question=64,
)

QUICK = replace(
    DEFAULT,
    mode="quick",
    n_ctx=4096,
    reps=2,
    cold_reps=1,
    runtime_prefix=512,
    runtime_suffix=64,
    overhead_tokens=512,
    overhead_pairs=2,
    greedy_tokens=4,
    decode_tokens=8,
    curve_prefix=512,
    curve_points=(0, 128, 512),
    scaling_sizes=(512, 1024),
    scaling_question=32,
    backends_cold_sizes=(512, 1024),
    backends_prefix=512,
    backends_suffix=64,
    remote_trace=False,
    drift_prefix=231,
    drift_tokens=16,
    trace=TraceConfig(
        steps=TRACE_STEPS_QUICK,
        repo_map_tokens=256,
        max_tokens=4,
        idle_gap_s=2.5,
        keystroke_s=0.03,
    ),
    typing=TypingConfig(lines=2, repo_map_tokens=256),
    restart=RestartConfig(sizes=(768,)),
    next_edit=NextEditConfig(tasks=1),
    fleet=FleetConfig(enabled=False),
    bigrepo=BigRepoConfig(sizes=(200, 500, 1000), edits=5, focus_changes=1),
)

FULL = replace(
    DEFAULT,
    mode="full",
    n_ctx=20480,  # 2k prefix + 16k suffix + answer
    curve_points=(0, 256, 1024, 4096, 8192, 16384),
)


def for_mode(quick: bool, full: bool) -> BenchConfig:
    if quick:
        return QUICK
    if full:
        return FULL
    return DEFAULT
