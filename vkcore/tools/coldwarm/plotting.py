"""Grouped bars per stage and condition, drawn with the optional matplotlib."""

from __future__ import annotations

from typing import Any

from vkcore.tools.coldwarm.stages import STAGE_LABELS, STAGES


def plot(report: dict[str, Any], path: str) -> None:
    """Grouped bars per stage and condition (median, whiskers min-max), log scale.

    Needs matplotlib (``pip install vkcore[plot]``); RuntimeError with that advice if absent.
    """
    try:
        import matplotlib  # noqa: PLC0415 - optional extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'vkcore[plot]'") from None
    conditions = report["settings"]["conditions"]
    pooled = report["summary"]["pooled"]
    width = 0.8 / len(conditions)
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, cond in enumerate(conditions):
        meds, low, high = [], [], []
        for stage in STAGES:
            s = pooled[cond][stage]
            m = (s["median"] or 0.0) * 1e3
            meds.append(m)
            low.append(m - (s["min"] or 0.0) * 1e3)
            high.append((s["max"] or 0.0) * 1e3 - m)
        xs = [j + (i - (len(conditions) - 1) / 2) * width for j in range(len(STAGES))]
        ax.bar(xs, meds, width, yerr=[low, high], capsize=2, label=cond)
    ax.set_xticks(range(len(STAGES)), [STAGE_LABELS[s] for s in STAGES], rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms (median, min-max)")
    env = report["environment"]
    ax.set_title(
        f"vkcore cold vs warm: {env.get('name')} "
        f"({env.get('driver_name')} {env.get('driver_info')})"
    )
    ax.legend(title="condition", ncol=len(conditions), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
