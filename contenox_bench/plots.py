"""PNG plots (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err(stats: list[dict[str, Any]]) -> tuple[list[float], list[list[float]]]:
    meds = [s["median"] for s in stats]
    lo = [m - s["min"] for m, s in zip(meds, stats, strict=True)]
    hi = [s["max"] - m for m, s in zip(meds, stats, strict=True)]
    return meds, [lo, hi]


def curve(section: dict[str, Any], path: Path) -> None:
    plt = _plt()
    rows = section["rows"]
    xs = [r["changed_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, label, fmt in (("cold_ttft_ms", "cold (whole prompt prefilled)", "o-"),
                            ("warm_ttft_ms", "warm (stable prefix in KV)", "s-")):
        meds, err = _err([r[key] for r in rows])
        n = rows[0][key]["n"]
        ax.errorbar(xs, [m / 1000 for m in meds], yerr=[[e / 1000 for e in side] for side in err],
                    fmt=fmt, capsize=3, label=f"{label}, median of {n}")
    bounds = [(r["changed_tokens"], r["goal_bound_ms"]) for r in rows
              if r["goal_bound_ms"] is not None and r["changed_tokens"] > 0]
    if bounds:
        ax.plot([b[0] for b in bounds], [b[1] / 1000 for b in bounds], "k--", lw=1,
                label="goal bound for warm")
    ax.set_xscale("symlog", linthresh=256)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel(f"changed suffix tokens after a {section['stable_prefix_tokens']}-token "
                  "stable prefix")
    ax.set_ylabel("time to first token (s)")
    ax.set_title("Suffix-growth curve: TTFT vs changed tokens (bars: min–max)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def trace(section: dict[str, Any], path: Path) -> None:
    plt = _plt()
    steps = section["steps"]
    xs = list(range(len(steps)))
    fig, ax = plt.subplots(figsize=(9, 6))
    for key, marker in (("a", "o"), ("b", "s"), ("c", "^"), ("d", "v")):
        med = section["ttft_ms"][key]["median"]
        ax.plot(xs, [s[key]["ttft_ms"] / 1000 for s in steps], marker=marker,
                label=f"{key}: {section['systems'][key]} (median {med / 1000:.2f} s)")
    ax.set_yscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels([s["step"] for s in steps], rotation=20)
    ax.set_ylabel("time to first token (s, log)")
    ax.set_title("Edit-trace replay: TTFT of each ask")
    ax.grid(True, which="both", alpha=0.3)
    # Below the axes: inside it would hide the points of the last steps.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def scaling(section: dict[str, Any], path: Path) -> None:
    plt = _plt()
    rows = section["rows"]
    xs = [r["stable_tokens"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for key, label, fmt in (("cold_ttft_ms", "cold", "o-"), ("warm_ttft_ms", "warm", "s-")):
        meds, err = _err([r[key] for r in rows])
        ax1.errorbar(xs, [m / 1000 for m in meds], yerr=[[e / 1000 for e in s] for s in err],
                     fmt=fmt, capsize=3, label=f"{label}, median of {rows[0][key]['n']}")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")  # warm stays well below a second while cold grows to a minute
    ax1.set_xticks(xs)
    ax1.set_xticklabels([str(x) for x in xs])
    ax1.set_xlabel("stable context tokens")
    ax1.set_ylabel("TTFT of a new question (s, log)")
    ax1.grid(True, alpha=0.3)
    ax1.legend()
    kv = [(r["stable_tokens"], r["kv_state_bytes"] / 2**20) for r in rows
          if r.get("kv_state_bytes") is not None]
    if kv:
        ax2.plot([x for x, _ in kv], [y for _, y in kv], "o-", label="KV state (sequence)")
    rss = [(r["stable_tokens"], r["process_rss_bytes"] / 2**20) for r in rows
           if not kv and r.get("process_rss_bytes") is not None]
    if rss:  # no per-sequence KV state on this backend (no snapshots): the process instead
        ax2.plot([x for x, _ in rss], [y for _, y in rss], "o-", label="process RSS")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(xs)
    ax2.set_xticklabels([str(x) for x in xs])
    ax2.set_xlabel("stable context tokens")
    ax2.set_ylabel("MiB")
    ax2.grid(True, alpha=0.3)
    ax2.legend()
    fig.suptitle("Scaling with the stable-context size")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
