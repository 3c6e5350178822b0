"""The weight-format comparisons: 4-bit groups against float32, groups against per-channel
scales, batched activations against numpy BLAS, and the time per column of a batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.harness import (
    BLAS_BLOCK,
    BLAS_SETTLE,
    Comparison,
    device_side_by_side,
    side_by_side,
)

SHAPE = (4096, 4096)
GROUP = 128
BATCH = 8  # columns of X in the BLAS comparison
BATCH_CURVE = (1, 2, 4, 8, 16, 32, 64)


def _weights(rng: Any, shape: tuple[int, int]) -> np.ndarray:
    return (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)


def _call(qt: Any, x: Any, activations: str = "float") -> Callable[[], Any]:
    return partial(vkcore.matvec, qt, x, activations=activations)


def four_bit_vs_fp32(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """4-bit group-128 weights (weight-only) against the float32 kernel on the same x."""
    m, n = SHAPE
    w = _weights(rng, SHAPE)
    x = rng.standard_normal(n, dtype=np.float32)
    f32 = vkcore.F32Matrix(w, device=dev)
    q4 = vkcore.quantize(w, bits=4, group_size=GROUP, device=dev)
    try:
        f32_call, q4_call = partial(vkcore.matvec_f32, f32, x), _call(q4, x)
        q4_bytes = q4.nbytes + 4 * (n + m)
        base, cand, dev_s = side_by_side(f32_call, q4_call, repeats, device=dev)
        yield Comparison(
            "fp32_vs_q4g128_wall",
            "4-bit group-128 matvec vs fp32 matvec (wall)",
            SHAPE,
            "wall",
            "vkcore fp32 matvec",
            "vkcore 4-bit g128 matvec",
            base,
            cand,
            dev_s,
            q4_bytes,
        )
        f32_dev, q4_dev = device_side_by_side(dev, f32_call, q4_call, repeats)
        yield Comparison(
            "fp32_vs_q4g128_device",
            "4-bit group-128 matvec vs fp32 matvec (device time)",
            SHAPE,
            "device",
            "vkcore fp32 matvec",
            "vkcore 4-bit g128 matvec",
            f32_dev,
            q4_dev,
            q4_dev,
            q4_bytes,
        )
    finally:
        f32.release()
        q4.release()


def group_vs_channel(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """int8 weights with group-128 scales against per-channel scales (device time), in the
    weight-only and the int8-activation modes."""
    w = _weights(rng, SHAPE)
    x = rng.standard_normal(SHAPE[1], dtype=np.float32)
    channel = vkcore.quantize(w, device=dev)
    grouped = vkcore.quantize(w, group_size=GROUP, device=dev)
    try:
        for activations in ("float", "int8"):
            base, cand = device_side_by_side(
                dev, _call(channel, x, activations), _call(grouped, x, activations), repeats
            )
            yield Comparison(
                "int8_group_vs_channel",
                f"int8 group-128 vs per-channel ({activations} activations, device time)",
                SHAPE,
                "device",
                "int8 per channel",
                "int8 group 128",
                base,
                cand,
                cand,
                grouped.nbytes + 4 * sum(SHAPE),
            )
    finally:
        channel.release()
        grouped.release()


def batched_vs_blas(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """numpy BLAS ``W @ X`` (float32) against the batched INT8 matvec (weight-only, as the
    vector INT8-vs-BLAS row), X of BATCH columns, numpy in and out."""
    w = _weights(rng, SHAPE)
    xs = rng.standard_normal((SHAPE[1], BATCH), dtype=np.float32)
    qt = vkcore.quantize(w, device=dev)
    try:
        base, cand, dev_s = side_by_side(
            partial(np.matmul, w, xs),
            _call(qt, xs),
            repeats,
            device=dev,
            block=BLAS_BLOCK,
            settle=BLAS_SETTLE,
        )
        yield Comparison(
            "blas_vs_batched_int8",
            f"batched INT8 matvec vs numpy BLAS W @ X, {BATCH} columns (wall)",
            (*SHAPE, BATCH),
            "wall",
            "numpy float32 W @ X",
            "vkcore int8 matvec, X (n, b)",
            base,
            cand,
            dev_s,
            qt.nbytes + 4 * BATCH * sum(SHAPE),
        )
    finally:
        qt.release()


def batched_per_column(
    dev: Device, repeats: int, rng: Any, batches: tuple[int, ...] = BATCH_CURVE
) -> Iterator[Comparison]:
    """Device time per column of a batch of b columns against one vector call: the ratio
    is how many times cheaper a column gets when b columns share one read of the weights."""
    w = _weights(rng, SHAPE)
    qt = vkcore.quantize(w, device=dev)
    try:
        x1 = rng.standard_normal(SHAPE[1], dtype=np.float32)
        for b in batches:
            xs = rng.standard_normal((SHAPE[1], b), dtype=np.float32)
            vector, batch = device_side_by_side(dev, _call(qt, x1), _call(qt, xs), repeats)
            per_column = [s / b for s in batch]
            yield Comparison(
                "batched_per_column",
                "INT8 matvec: device time per column of a batch vs one vector",
                (*SHAPE, b),
                "device",
                "vector call",
                f"batch of {b}, per column",
                vector,
                per_column,
                per_column,
                (qt.nbytes + 4 * b * sum(SHAPE)) // b,
            )
    finally:
        qt.release()


def dot_vs_bitfield(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """The int8-activation matvec with OpSDot (DOT=1) against bitfieldExtract products on
    the same weights (device time). The dot path runs where the device reports
    shaderIntegerDotProduct; on a device that does not mark it accelerated the row shows
    what choosing it would cost (the kernel itself picks it only where accelerated)."""
    if not dev.info.integer_dot_product:
        return
    w = _weights(rng, SHAPE)
    x = rng.standard_normal(SHAPE[1], dtype=np.float32)
    qt = vkcore.quantize(w, device=dev)
    plain = dataclasses.replace(dev.info, integer_dot_product_8bit_accelerated=False)
    dot = dataclasses.replace(dev.info, integer_dot_product_8bit_accelerated=True)
    original = dev.info

    def with_info(info: Any) -> Callable[[], Any]:
        def call() -> Any:
            dev.info = info
            try:
                return vkcore.matvec(qt, x, activations="int8")
            finally:
                dev.info = original

        return call

    try:
        base, cand = device_side_by_side(dev, with_info(plain), with_info(dot), repeats)
        yield Comparison(
            "dot_vs_bitfield",
            "int8 matvec: OpSDot path vs bitfieldExtract path (device time)",
            SHAPE,
            "device",
            "bitfieldExtract",
            "integer dot product",
            base,
            cand,
            cand,
            qt.nbytes + 4 * sum(SHAPE),
        )
    finally:
        dev.info = original
        qt.release()
