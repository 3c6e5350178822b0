"""The baselines a numpy user would write, and this machine's copy roofs."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import numpy as np

import vkcore
from vkcore.device.device import Device


def copy_bandwidth(repeats: int, nbytes: int = 256 << 20) -> list[float]:
    """Bytes per second of a numpy copy (read + write counted) of an ``nbytes`` array."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        out.append(2 * nbytes / (time.perf_counter() - start))
    return out


def kernel_copy_bandwidth(dev: Device, repeats: int, elements: int = 1 << 24) -> list[float]:
    """Bytes per second (read + write, device time) of a copy kernel that loads and stores
    like the softmax kernels do: the device's own roof for them."""
    from vkcore.kernels.softmax.stages import roofline_copy

    x = vkcore.asarray(np.ones(elements, dtype=np.float32), device=dev)
    y = vkcore.Tensor.empty((elements,), np.float32, dev)
    try:
        roofline_copy(x, y)
        seconds = [roofline_copy(x, y) for _ in range(repeats)]
        return [2 * x.nbytes / s for s in seconds if s]
    finally:
        for t in (x, y):
            assert t.buffer is not None
            t.buffer.destroy()


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """The baseline a numpy user writes: exp(x - max) / sum, float32 throughout."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def numpy_log_softmax() -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    """scipy.special.log_softmax where scipy is installed, else what a numpy user writes:
    ``x - m - log(sum(exp(x - m)))``, float32 throughout."""
    try:
        from scipy.special import log_softmax as scipy_log_softmax
    except ImportError:

        def log_softmax(x: np.ndarray) -> np.ndarray:
            shifted = x - x.max(axis=-1, keepdims=True)
            return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))

        return "numpy x - m - log(sum(exp))", log_softmax
    return "scipy.special.log_softmax", partial(scipy_log_softmax, axis=-1)


def numpy_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 RTN in numpy: s = max|w| / 127, q = roundEven(w / s)."""
    s = np.abs(w).max(axis=1) / np.float32(127)
    s = np.where(s == 0, np.float32(1), s).astype(np.float32)
    q = np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8)
    return q, s
