"""Measurements of the batched matvec (vkcore.kernels.matvec_batch) for ``vkcore bench``.

``batched_rows()`` returns dict rows: numpy BLAS ``W @ X`` (float32) against batched INT8
on a 4096x4096 layer with X of 8 columns (medians of ``repeats`` wall times, the ratio
numpy / vkcore, target >= 1), then the batched INT8 time per column for b = 1..64.
Run: ``python -m vkcore.bench_batch``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from .device import Device, resolve

CURVE = (1, 2, 4, 8, 16, 32, 64)


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # first call: pipelines, JIT, buffers
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def batched_rows(
    device: Device | None = None, *, size: int = 4096, repeats: int = 7
) -> list[dict[str, Any]]:
    """The batched-matvec bench rows (module docstring); wall milliseconds."""
    from . import kernels  # noqa: F401 - registers the kernels
    from .kernels import matvec_batch
    from .kernels.quant import quantize

    dev = resolve(device)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((size, size)).astype(np.float32)
    qt = quantize(w, device=dev)
    rows: list[dict[str, Any]] = []
    try:
        x8 = rng.standard_normal((size, 8)).astype(np.float32)
        blas = _median_ms(lambda: w @ x8, repeats)
        ours = _median_ms(lambda: matvec_batch.matvec(qt, x8, activations="int8"), repeats)
        rows.append(
            {
                "case": f"{size}x{size}, X of 8 columns: numpy W @ X vs batched int8",
                "numpy_ms": round(blas, 3),
                "vkcore_ms": round(ours, 3),
                "ratio": round(blas / ours, 3),
                "target": ">= 1",
            }
        )
        for b in CURVE:
            x = rng.standard_normal((size, b)).astype(np.float32)
            ms = _median_ms(partial(matvec_batch.matvec, qt, x, activations="int8"), repeats)
            rows.append(
                {
                    "case": f"batched int8 b={b}",
                    "ms": round(ms, 3),
                    "ms_per_column": round(ms / b, 3),
                }
            )
    finally:
        qt.release()
    return rows


if __name__ == "__main__":
    for row in batched_rows():
        print(json.dumps(row))
