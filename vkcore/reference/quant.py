"""numpy references of RTN quantization and dequantization (vkcore.kernels.quant).

The same formulas, written independently in float64 numpy where a value must be exact.
"""

from __future__ import annotations

import numpy as np

_TINY32 = np.finfo(np.float32).tiny  # 2**-126: smaller magnitudes count as zero


def flush_subnormals(a: np.ndarray) -> np.ndarray:
    """float32 copy with subnormal values replaced by 0 (Vulkan devices may flush them)."""
    a = np.asarray(a, dtype=np.float32)
    return np.where(np.abs(a) < _TINY32, np.float32(0), a).astype(np.float32)


def integer_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """``(qmin, qmax)``: ``[-(2^(b-1)-1), 2^(b-1)-1]`` symmetric, ``[0, 2^b-1]`` asymmetric."""
    if symmetric:
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def round_quotient(w: np.ndarray | np.floating, s: np.ndarray | np.floating) -> np.ndarray:
    """roundEven of the exact real quotient w / s for float32 w and s (as float64 integers).

    The float64 quotient of two float32 values is never rounded onto or across a
    half-integer (their distance is at least 2^-25 relative), so np.rint decides exactly.
    """
    return np.rint(np.asarray(w, np.float64) / np.asarray(s, np.float64))


def quant_params(
    w: np.ndarray, bits: int = 8, symmetric: bool = True, per_channel: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (int32), shape ``(m,)`` per channel or ``()``.

    symmetric:  s = float32(max|W| / (2^(b-1) - 1)), z = 0;
    asymmetric: lo = min(W, 0), hi = max(W, 0) (the range always contains 0),
                s = float32((hi - lo) / (2^b - 1)), z = roundEven(-lo / s).
    Both quotients are evaluated in float64 and rounded once to float32. A group of only
    zeros gets s = 1, z = 0. A scale that would round to 0 is the smallest subnormal.
    """
    w = flush_subnormals(w).astype(np.float64)
    axis = 1 if per_channel else None
    qmin, qmax = integer_range(bits, symmetric)
    if symmetric:
        amax = np.abs(w).max(axis=axis)
        s = (amax / qmax).astype(np.float32)
        empty = amax == 0
    else:
        lo = np.minimum(w.min(axis=axis), 0.0)
        hi = np.maximum(w.max(axis=axis), 0.0)
        s = ((hi - lo) / (qmax - qmin)).astype(np.float32)
        empty = hi == lo
    s = np.where(empty, np.float32(1), np.maximum(s, np.float32(2.0**-149))).astype(np.float32)
    if symmetric:
        z = np.zeros(np.shape(s), dtype=np.int32)
    else:
        z = np.clip(round_quotient(-lo, s), qmin, qmax).astype(np.int32)
    return np.asarray(s, np.float32), np.asarray(z, np.int32)


def quantize(
    w: np.ndarray, bits: int = 8, symmetric: bool = True, per_channel: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, scale, zero_point)``: q = clamp(roundEven(W / s) + z, qmin, qmax).

    q is int8 when symmetric, uint8 otherwise; W / s is the exact quotient.
    """
    w = flush_subnormals(w)
    s, z = quant_params(w, bits, symmetric, per_channel)
    qmin, qmax = integer_range(bits, symmetric)
    sc = s[:, None] if per_channel else s
    zc = z[:, None] if per_channel else z
    q = np.clip(round_quotient(w, sc) + zc, qmin, qmax)
    return q.astype(np.int8 if symmetric else np.uint8), s, z


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """W_hat = s * (q - z): one float32 multiply of the exact integer q - z."""
    s = np.asarray(scale, np.float32)
    z = np.asarray(zero_point, np.int64)
    if s.ndim == 1:
        s, z = s[:, None], z[:, None]
    return (s * (q.astype(np.int64) - z).astype(np.float32)).astype(np.float32)
