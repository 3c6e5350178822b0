"""Output: the table, the plot and the JSON of a bench run."""

from __future__ import annotations

import json
from typing import Any

from vkcore.tools.bench.targets import TARGETS


def format_table(result: dict[str, Any]) -> str:
    """The human-readable report: environment, every comparison, the targets."""
    env = result["environment"]
    copy_gbs = result["copy_bandwidth_median"] / 1e9
    lines = [
        f"vkcore bench ({'quick' if result['quick'] else 'full'}, "
        f"{result['repeats']} repeats, medians)",
        f"date {env['date']}  cpu {env['cpu_model']} x{env['cpu_count']}  "
        f"LP_NUM_THREADS={env['lp_num_threads'] or 'unset'}",
        f"device {env['device']}  driver {env['driver']}",
        f"numpy copy bandwidth {copy_gbs:.1f} GB/s (read + write); a copy kernel with the "
        f"softmax access pattern: {_gbs(result['kernel_copy_bandwidth_median'])} "
        "(device time)",
        "",
        f"{'comparison':<52} {'shape':>14} {'baseline':>10} {'vkcore':>10} {'ratio':>7} "
        f"{'spread':>13} {'minima':>6} {'GB/s':>6} {'roof':>5}",
    ]
    for c in result["comparisons"]:
        shape = "x".join(str(s) for s in c["shape"])
        bw = c["bandwidth_bytes_per_s"]
        gbs = f"{bw / 1e9:6.1f}" if bw else "     -"
        roof = f"{bw / result['copy_bandwidth_median']:5.2f}" if bw else "    -"
        lo, hi = c["ratio_spread"]
        label = "call/floor" if c["overhead"] else "ratio"
        spread = f"{lo:.2f}-{hi:.2f}" if c["ratio"] is not None else "n/a"
        lines.append(
            f"{c['title'][:52]:<52} {shape:>14} "
            f"{_ms(c['baseline_median_s'])} {_ms(c['candidate_median_s'])} "
            f"{_num(c['ratio'], 7)} {spread:>13} "
            f"{_num(c['ratio_of_minimums'], 6)} {gbs} {roof}"
            + ("  (call/floor)" if label != "ratio" else "")
        )
    for err in result.get("errors", []):
        lines.append(f"FAILED {err['step']}: {err['error']}")
    lines += ["", "targets (worst shape of each group):"]
    for t in result["targets"]:
        if t["value"] is None:
            lines.append(f"  -    {t['title']}: {t['note']}")
            continue
        mark = "MET " if t["met"] else "MISS"
        lines.append(f"  {mark} {t['title']}: {t['value']:.2f} (target {t['kind']} {t['target']})")
    lines.append(f"\n{result['seconds']:.1f} s")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:8.3f}ms" if seconds is not None else f"{'n/a':>10}"


def _num(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'n/a':>{width}}"


def _gbs(bytes_per_s: float | None) -> str:
    return f"{bytes_per_s / 1e9:.1f} GB/s" if bytes_per_s is not None else "n/a"


def write_plot(result: dict[str, Any], path: str) -> None:
    """Ratios against their targets, and each kernel's bandwidth against the copy roof."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comps = result["comparisons"]
    curve = [c for c in comps if c["group"] == "batched_per_column" and c["ratio"]]
    fig, axes = plt.subplots(3 if curve else 2, 1, figsize=(12, 15 if curve else 10))
    ax1, ax2 = axes[0], axes[1]
    if curve:
        _per_column_curve(axes[2], curve)
    labels = [f"{c['group']}\n{'x'.join(map(str, c['shape']))}" for c in comps]
    values = [c["ratio"] or 0.0 for c in comps]
    colors = ["tab:orange" if c["overhead"] else "tab:blue" for c in comps]
    ax1.bar(range(len(comps)), values, color=colors)
    for i, c in enumerate(comps):
        target = TARGETS.get(c["group"])
        if target is not None:
            ax1.plot([i - 0.4, i + 0.4], [target[1]] * 2, color="red")
    ax1.axhline(1.0, color="gray", linewidth=0.8)
    ax1.set_xticks(range(len(comps)), labels, rotation=75, fontsize=7)
    ax1.set_ylabel("baseline / vkcore (orange: call / floor)")
    ax1.set_title("ratios (red: target)")
    bw = [(c["bandwidth_bytes_per_s"] or 0) / 1e9 for c in comps]
    ax2.bar(range(len(comps)), bw)
    ax2.axhline(result["copy_bandwidth_median"] / 1e9, color="red", label="numpy copy")
    if result["kernel_copy_bandwidth_median"] is not None:
        ax2.axhline(
            result["kernel_copy_bandwidth_median"] / 1e9,
            color="purple",
            label="copy kernel on the device",
        )
    ax2.set_xticks(range(len(comps)), labels, rotation=75, fontsize=7)
    ax2.set_ylabel("effective GB/s")
    ax2.set_title("roofline position: minimum bytes moved / time")
    ax2.legend()
    env = result["environment"]
    fig.suptitle(f"vkcore bench {env['date']} - {env['device']} - {env['cpu_model']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _per_column_curve(ax: Any, rows: list[dict[str, Any]]) -> None:
    """Batched matvec: device time per column against b, next to one vector call."""
    b = [c["shape"][-1] for c in rows]
    ax.plot(b, [c["candidate_median_s"] * 1e3 for c in rows], "o-", label="per column of a batch")
    ax.plot(b, [c["baseline_median_s"] * 1e3 for c in rows], "--", label="one vector call")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("columns b")
    ax.set_ylabel("ms (device time)")
    ax.set_title("INT8 matvec 4096x4096: time per column of X (n, b)")
    ax.legend()


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=str)
