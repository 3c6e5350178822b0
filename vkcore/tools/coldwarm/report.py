"""The readable report: a header, the stage table, first results per kernel, findings."""

from __future__ import annotations

from typing import Any

from vkcore.tools.coldwarm.stages import STAGE_LABELS, STAGES


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds, one decimal (``n/a`` for None)."""
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"


def ratio(r: float | None) -> str:
    """Two decimals; three below 0.1, where the warm stage is almost free."""
    if r is None:
        return "n/a"
    return f"{r:.3f}" if r < 0.1 else f"{r:.2f}"


def format_table(report: dict[str, Any]) -> str:
    """Markdown table: stages x conditions, median and [min-max] in ms, plus ratios."""
    conditions = report["settings"]["conditions"]
    pooled, rat = report["summary"]["pooled"], report["ratios"]
    header = ["stage (ms, median [min-max])", *conditions]
    header += [f"{c}/cold" for c in conditions if c in rat]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for stage in STAGES:
        cells = [STAGE_LABELS[stage], *(cell(pooled[c][stage]) for c in conditions)]
        cells += [ratio(rat[c][stage]) for c in conditions if c in rat]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cell(s: dict[str, Any]) -> str:
    """``median [min-max]`` in ms; only the value for a single sample."""
    if s["median"] is None:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median'] * 1e3:.1f}"
    return f"{s['median'] * 1e3:.1f} [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


def format_report(report: dict[str, Any]) -> str:
    """The readable report: environment line, table, per-kernel first results, findings."""
    env, settings = report["environment"], report["settings"]
    lines = [
        f"device: {env.get('name')} ({env.get('driver_name')} {env.get('driver_info')}), vkcore "
        f"{env['vkcore_version']}, {env['cpu_count']} CPUs{_load_text(env.get('load_average'))}",
        f"{len(report['samples'])} fresh processes: {len(settings['kernels'])} kernels x "
        f"{len(settings['conditions'])} conditions x {_repetitions(settings)} "
        f"(+{len(report['primed_cache_bytes'])} priming), {report['elapsed_seconds']:.1f} s",
        "",
        format_table(report),
        "ratio columns: the median over kernels of each kernel's warm median / cold median",
        "",
        "total to first result per kernel (ms, median):",
    ]
    for kernel, by_cond in report["summary"]["per_kernel"].items():
        cells = "  ".join(
            f"{c} {ms(by_cond[c]['first_result']['median'])}" for c in settings["conditions"]
        )
        lines.append(f"  {kernel:<18} {cells}")
    lines += ["", *(f"- {f}" for f in report["findings"])]
    return "\n".join(lines)


def _repetitions(settings: dict[str, Any]) -> str:
    done, asked = settings.get("repeats_done", settings["repeats"]), settings["repeats"]
    if done >= asked:
        return f"{done} repetitions"
    return (
        f"{done} repetitions (of {asked}: one more would have ended past "
        f"--max-seconds {settings.get('max_seconds')})"
    )


def _load_text(load: dict[str, Any] | None) -> str:
    if not load or not load.get("before") or not load.get("after"):
        return ""
    return f", load average {load['before'][0]:.2f} before / {load['after'][0]:.2f} after"
