"""One bench run: the shapes, the steps, the environment record."""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench import (
    attention_cases,
    format_cases,
    lm_head_cases,
    program_cases,
    sequence_cases,
    topk_cases,
)
from vkcore.tools.bench.baselines import copy_bandwidth, kernel_copy_bandwidth
from vkcore.tools.bench.harness import Comparison, Progress
from vkcore.tools.bench.quant_cases import matvec_comparisons, quantize_comparison
from vkcore.tools.bench.softmax_cases import softmax_online_vs_safe, softmax_vs_numpy, tiny_overhead
from vkcore.tools.bench.targets import verdicts

SOFTMAX_SHAPES_FULL = [
    (1, 256),
    (64, 256),
    (4096, 256),
    (1, 4096),
    (64, 4096),
    (4096, 4096),
    (1, 1 << 16),
    (64, 1 << 16),
    (1, 1 << 20),
    (8, 1 << 20),
    (1, 1 << 22),
    (4, 1 << 22),
]


SOFTMAX_SHAPES_QUICK = [(1, 256), (4096, 256), (4096, 4096), (1, 1 << 20), (8, 1 << 20)]


MATVEC_SHAPES_FULL = [(4096, 4096), (11008, 4096)]


MATVEC_SHAPES_QUICK = [(4096, 4096)]


def environment(dev: Device) -> dict[str, Any]:
    """Who ran it where: date, CPU, thread settings, device and driver."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "vkcore": vkcore.__version__,
        "device": dev.info.name,
        "driver": f"{dev.info.driver_name} {dev.info.driver_info}".strip(),
        "device_info": dev.info.to_dict(),
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def has_quant_kernels() -> bool:
    return all(hasattr(vkcore, name) for name in ("quantize", "matvec", "matvec_f32", "F32Matrix"))


def _format_steps(
    dev: Device, reps: int, rng: Any, quick: bool
) -> list[tuple[str, Callable[[], Iterator[Comparison]]]]:
    """The weight-format comparisons (vkcore.tools.bench.format_cases)."""
    curve = (1, 8, 64) if quick else format_cases.BATCH_CURVE
    return [
        ("4-bit g128 vs fp32", lambda: format_cases.four_bit_vs_fp32(dev, reps, rng)),
        ("int8 g128 vs per channel", lambda: format_cases.group_vs_channel(dev, reps, rng)),
        ("batched int8 vs BLAS", lambda: format_cases.batched_vs_blas(dev, reps, rng)),
        (
            "batched per column",
            lambda: format_cases.batched_per_column(dev, reps, rng, curve),
        ),
        ("dot vs bitfield", lambda: format_cases.dot_vs_bitfield(dev, reps, rng)),
    ]


def run_bench(
    dev: Device,
    *,
    quick: bool = False,
    repeats: int | None = None,
    progress: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Run every comparison on ``dev``; a JSON-ready dict with all samples and the verdicts."""
    reps = repeats or (5 if quick else 11)
    rng = np.random.default_rng(seed)
    soft_shapes = SOFTMAX_SHAPES_QUICK if quick else SOFTMAX_SHAPES_FULL
    mv_shapes = MATVEC_SHAPES_QUICK if quick else MATVEC_SHAPES_FULL
    quant = has_quant_kernels()
    steps: list[tuple[str, Callable[[], Iterator[Comparison]]]] = [
        (f"online vs safe {r}x{n}", partial(softmax_online_vs_safe, dev, [(r, n)], reps, rng))
        for r, n in soft_shapes
    ]
    steps.append(
        ("softmax vs numpy 4096x4096", lambda: softmax_vs_numpy(dev, (4096, 4096), reps, rng))
    )
    steps.append(("softmax + top-k 64x32000", lambda: topk_cases.softmax_topk_rows(dev, reps, rng)))
    steps.append(("attention", lambda: attention_cases.attention_rows(dev, reps, rng, quick=quick)))
    steps.append(("tiny softmax overhead", lambda: tiny_overhead(dev, 50 if quick else 200, rng)))
    steps.append(("sequences", lambda: sequence_cases.sequence_rows(dev, reps * 3, rng)))
    steps.append(
        (
            "call path",
            lambda: program_cases.call_path_rows(dev, 50 if quick else 200, rng),
        )
    )
    if quant:
        steps += [
            (f"matvec {m}x{n}", partial(matvec_comparisons, dev, [(m, n)], reps, rng))
            for m, n in mv_shapes
        ]
        steps.append(
            ("quantize 4096x4096", lambda: quantize_comparison(dev, (4096, 4096), reps, rng))
        )
        steps.append(
            ("LM-head step", lambda: lm_head_cases.lm_head_rows(dev, reps, rng, quick=quick))
        )
        steps += _format_steps(dev, reps, rng, quick)
    bar = Progress(len(steps) + 1, enabled=progress)
    copies = copy_bandwidth(reps)
    kernel_copies = kernel_copy_bandwidth(dev, reps)
    bar.step("copy bandwidth")
    comparisons: list[Comparison] = []
    started = time.perf_counter()
    errors: list[dict[str, str]] = []
    for label, make in steps:
        try:
            comparisons.extend(make())
        except Exception as exc:  # noqa: BLE001 - one broken kernel must not hide the others
            first_line = (str(exc).strip().splitlines() or [""])[0]
            errors.append({"step": label, "error": f"{type(exc).__name__}: {first_line}"})
        bar.step(label)
    return {
        "environment": environment(dev),
        "quick": quick,
        "repeats": reps,
        "seconds": time.perf_counter() - started,
        "copy_bandwidth_bytes_per_s": copies,
        "copy_bandwidth_median": statistics.median(copies),
        "kernel_copy_bandwidth_bytes_per_s": kernel_copies,
        "kernel_copy_bandwidth_median": (
            statistics.median(kernel_copies) if kernel_copies else None
        ),
        "quant_kernels": quant,
        "comparisons": [c.summary() for c in comparisons],
        "targets": verdicts(comparisons),
        "errors": errors,
    }
