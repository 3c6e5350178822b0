"""The quantized-weight comparisons: INT8 matvec vs fp32 and BLAS, quantize vs numpy."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.baselines import numpy_quantize
from vkcore.tools.bench.harness import (
    BLAS_BLOCK,
    BLAS_SETTLE,
    Comparison,
    device_side_by_side,
    side_by_side,
)


def matvec_comparisons(
    dev: Device, shapes: list[tuple[int, int]], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """INT8 weight-only matvec against vkcore's fp32 matvec and numpy's BLAS W @ x."""
    for m, n in shapes:
        w = (rng.standard_normal((m, n), dtype=np.float32) * 0.05).astype(np.float32)
        x = rng.standard_normal(n, dtype=np.float32)
        qt = vkcore.quantize(w, device=dev)
        f32 = vkcore.F32Matrix(w, device=dev)
        try:

            def int8_call(qt: Any = qt, x: np.ndarray = x) -> Any:
                return vkcore.matvec(qt, x, activations="float")

            def f32_call(f32: Any = f32, x: np.ndarray = x) -> Any:
                return vkcore.matvec_f32(f32, x)

            f32_dev, int8_dev = device_side_by_side(dev, f32_call, int8_call, repeats)
            yield Comparison(
                "int8_vs_fp32",
                "INT8 weight-only matvec vs fp32 matvec (device time)",
                (m, n),
                "device",
                "vkcore fp32 matvec",
                "vkcore int8 matvec",
                f32_dev,
                int8_dev,
                int8_dev,
                m * n + 4 * (n + m),
            )
            base, cand, dev_s = side_by_side(
                partial(np.matmul, w, x),
                int8_call,
                repeats,
                device=dev,
                block=BLAS_BLOCK,
                settle=BLAS_SETTLE,
            )
            yield Comparison(
                "int8_vs_blas",
                "INT8 matvec vs numpy BLAS W @ x (wall)",
                (m, n),
                "wall",
                "numpy float32 W @ x",
                "vkcore int8 matvec",
                base,
                cand,
                dev_s,
                m * n + 4 * (n + m),
            )
        finally:
            qt.release()
            f32.release()


def quantize_comparison(
    dev: Device, shape: tuple[int, int], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """Per-channel symmetric int8 quantize (numpy in, weights left on the device) vs numpy."""
    w = rng.standard_normal(shape, dtype=np.float32)

    def vk_call() -> None:
        vkcore.quantize(w, device=dev).release()

    base, cand, dev_s = side_by_side(lambda: numpy_quantize(w), vk_call, repeats, device=dev)
    yield Comparison(
        "quantize_vs_numpy",
        "quantize per-channel symmetric vs numpy (wall)",
        shape,
        "wall",
        "numpy RTN",
        "vkcore.quantize",
        base,
        cand,
        dev_s,
        5 * w.size,
    )
