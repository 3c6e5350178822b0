"""Medians, ranges and warm/cold ratios of the samples, per stage and condition."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from vkcore.tools.coldwarm.stages import STAGES


def stats(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, min, max, max-min spread and count of the values that are not None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "spread": None, "n": 0}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "spread": max(vals) - min(vals),
        "n": len(vals),
    }


def summarize(
    samples: Sequence[dict[str, Any]], conditions: Sequence[str], kernels: Sequence[str]
) -> dict[str, Any]:
    """Per stage and condition: pooled over kernels, and per kernel."""

    def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {s: stats(r["stages"][s] for r in rows) for s in STAGES}

    pooled = {c: table([s for s in samples if s["condition"] == c]) for c in conditions}
    per_kernel = {
        k: {
            c: table([s for s in samples if s["condition"] == c and s["kernel"] == k])
            for c in conditions
        }
        for k in kernels
    }
    return {"pooled": pooled, "per_kernel": per_kernel}


def kernel_ratios(summary: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per kernel, warm condition and stage: median warm / median cold of that kernel."""
    out = {}
    for kernel, tables in summary["per_kernel"].items():
        if "cold" not in tables:
            return {}
        out[kernel] = {
            cond: {
                stage: _quotient(table[stage]["median"], tables["cold"][stage]["median"])
                for stage in STAGES
            }
            for cond, table in tables.items()
            if cond != "cold"
        }
    return out


def ratios(summary: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Warm/cold per warm condition and stage: the median over kernels of each kernel's
    ratio, so kernels of very different cost (one pipeline or three) do not mix."""
    per_kernel = kernel_ratios(summary)
    conditions = [c for c in summary["pooled"] if c != "cold"] if per_kernel else []
    out: dict[str, dict[str, float | None]] = {}
    for cond in conditions:
        out[cond] = {}
        for stage in STAGES:
            values = [
                value
                for by_cond in per_kernel.values()
                if (value := by_cond[cond][stage]) is not None
            ]
            out[cond][stage] = statistics.median(values) if values else None
    return out


def _quotient(warm: float | None, cold: float | None) -> float | None:
    return warm / cold if warm is not None and cold else None
