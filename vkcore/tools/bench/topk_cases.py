"""The fused softmax + top-k rows: against numpy, and against vkcore's own two calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.baselines import numpy_softmax
from vkcore.tools.bench.harness import Comparison, side_by_side

SHAPE = (64, 32_000)  # a batch of 64 rows over a 32k vocabulary
K = 40


def numpy_softmax_topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """What a numpy user writes: softmax, argpartition of the k largest, then a sort of
    those k by probability."""
    p = numpy_softmax(x)
    part = np.argpartition(-p, k - 1, axis=-1)[:, :k]
    vals = np.take_along_axis(p, part, axis=-1)
    order = np.argsort(-vals, axis=-1, kind="stable")
    return np.take_along_axis(vals, order, axis=-1), np.take_along_axis(part, order, axis=-1)


def _destroy(*tensors: vkcore.Tensor) -> None:
    for t in tensors:
        if t.buffer is not None:
            t.buffer.destroy()


def softmax_topk_rows(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """numpy in and out against numpy's softmax + argpartition + sort; then Tensors in and
    out: vkcore.softmax followed by vkcore.topk against one softmax_topk."""
    x = rng.standard_normal(SHAPE, dtype=np.float32) * np.float32(3)
    base, cand, dev_s = side_by_side(
        lambda: numpy_softmax_topk(x, K),
        lambda: vkcore.softmax_topk(x, K, device=dev),
        repeats,
        device=dev,
    )
    yield Comparison(
        "softmax_topk_vs_numpy",
        f"softmax + top-k, {SHAPE[0]}x{SHAPE[1]}, k={K} (wall, numpy in/out)",
        SHAPE,
        "wall",
        "numpy softmax + argpartition + sort",
        "vkcore.softmax_topk",
        baseline_s=base,
        candidate_s=cand,
        candidate_device_s=dev_s,
        min_bytes=4 * x.size,
    )
    t = vkcore.asarray(x, device=dev)

    def two_calls() -> None:
        p = vkcore.softmax(t)
        _destroy(p, *vkcore.topk(p, K))

    def fused() -> None:
        _destroy(*vkcore.softmax_topk(t, K))

    base, cand, dev_s = side_by_side(two_calls, fused, repeats, device=dev)
    yield Comparison(
        "softmax_topk_vs_two_calls_resident",
        f"softmax + top-k, {SHAPE[0]}x{SHAPE[1]}, k={K} (wall, Tensor in/out)",
        SHAPE,
        "wall",
        "vkcore.softmax then vkcore.topk",
        "vkcore.softmax_topk",
        baseline_s=base,
        candidate_s=cand,
        candidate_device_s=dev_s,
        min_bytes=4 * x.size,
    )
    _destroy(t)
