"""Two sets of bench runs side by side: ``vkcore bench --compare BEFORE AFTER``.

Each side is one or more ``vkcore bench --json`` outputs (comma-separated files, best
taken in alternation: before, after, before, ...). For every target both sides measured,
the table gives each side's median value over its runs and after / before; the targets'
values are ratios measured side by side within each run, so the two sides compare fairly
even when the machine's speed drifted between runs.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


class CompareError(ValueError):
    """A file that is not a bench run's JSON (says which and why)."""


def load_runs(files: str) -> list[dict[str, Any]]:
    """The bench results in the comma-separated ``files``, each checked for its targets."""
    runs = []
    for name in [f for f in files.split(",") if f]:
        try:
            result = json.loads(Path(name).read_text())
        except (OSError, ValueError) as exc:
            raise CompareError(f"{name}: not a readable bench JSON ({exc})") from None
        targets = result.get("targets") if isinstance(result, dict) else None
        if not isinstance(targets, list) or not all(
            isinstance(t, dict) and {"group", "title", "value"} <= t.keys() for t in targets
        ):
            raise CompareError(f"{name}: no 'targets' list (write it with vkcore bench --json)")
        runs.append(result)
    if not runs:
        raise CompareError("no files given")
    return runs


def _values(runs: list[dict[str, Any]]) -> dict[str, tuple[str, list[float]]]:
    by_group: dict[str, tuple[str, list[float]]] = {}
    for result in runs:
        for t in result["targets"]:
            title, values = by_group.setdefault(t["group"], (t["title"], []))
            if isinstance(t["value"], (int, float)):
                values.append(float(t["value"]))
    return by_group


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per target group measured on both sides: medians and after / before."""
    old, new = _values(before), _values(after)
    rows = []
    for group, (title, a) in old.items():
        b = new.get(group, (title, []))[1]
        if not a or not b:
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        rows.append(
            {
                "group": group,
                "title": title,
                "before": a,
                "after": b,
                "before_median": ma,
                "after_median": mb,
                "after_over_before": mb / ma if ma else None,
            }
        )
    return rows


def format_compare(rows: list[dict[str, Any]], before: int, after: int) -> str:
    lines = [
        f"targets' values, medians of {before} run(s) before and {after} after "
        "(ratios within each run; for call/floor rows lower is better)",
        f"{'target':<70} {'before':>8} {'after':>8} {'after/before':>13}",
    ]
    for r in rows:
        change = r["after_over_before"]
        shown = f"{change:13.2f}" if change is not None else f"{'n/a':>13}"
        lines.append(
            f"{r['title'][:70]:<70} {r['before_median']:8.2f} {r['after_median']:8.2f} {shown}"
        )
    return "\n".join(lines)
