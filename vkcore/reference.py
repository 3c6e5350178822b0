"""numpy references: the same formulas and documented edge-case answers as the kernels.

Tests and the demo compare every kernel with these functions.
"""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax in float64 with vkcore's semantics (see :mod:`vkcore.kernels.softmax`).

    The input is first rounded to float32, as the kernel sees it.
    """
    a = np.moveaxis(np.asarray(x, dtype=np.float32).astype(np.float64), axis, -1)
    bad = np.isnan(a).any(axis=-1, keepdims=True) | np.isposinf(a).any(axis=-1, keepdims=True)
    finite_or_neg = np.where(bad, 0.0, a)
    m = finite_or_neg.max(axis=-1, keepdims=True, initial=-np.inf)
    all_masked = np.isneginf(m)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(
            np.isneginf(finite_or_neg) | all_masked,
            0.0,
            np.exp(finite_or_neg - np.where(all_masked, 0, m)),
        )
        s = e.sum(axis=-1, keepdims=True)
        p = np.where(all_masked, 0.0, e / np.where(s == 0, 1.0, s))
    p = np.where(bad, np.nan, p)
    return np.moveaxis(p, -1, axis)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``x - m - log(sum(exp(x - m)))`` in float64 with the softmax semantics: ``-inf``
    entries (and every entry of an all ``-inf`` row, whose softmax is 0) give ``-inf``; a
    NaN or ``+inf`` in a row makes the whole row NaN. The input is rounded to float32 first.
    """
    a = np.moveaxis(np.asarray(x, dtype=np.float32).astype(np.float64), axis, -1)
    bad = np.isnan(a).any(axis=-1, keepdims=True) | np.isposinf(a).any(axis=-1, keepdims=True)
    finite_or_neg = np.where(bad, 0.0, a)
    m = finite_or_neg.max(axis=-1, keepdims=True, initial=-np.inf)
    all_masked = np.isneginf(m)
    shift = np.where(all_masked, 0.0, m)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s = np.exp(finite_or_neg - shift).sum(axis=-1, keepdims=True)
        out = np.where(all_masked, -np.inf, finite_or_neg - shift - np.log(s))
    out = np.where(bad, np.nan, out)
    return np.moveaxis(out, -1, axis)


# --------------------------------------------------------------------------- quantization
# The same formulas as vkcore.kernels.quant and vkcore.kernels.matvec, written
# independently in float64 numpy where a value must be exact.

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


ACT_INV = {"int8": np.float32(1 / 127), "uint8": np.float32(1 / 255)}
ACT_TINY = np.float32(2.0**-96)  # activations whose range is below this quantize to 0


def quantize_activations(x: np.ndarray, mode: str) -> tuple[np.ndarray, np.float32, int]:
    """Per-tensor activation quantization as the matvec kernel does it on the device.

    int8 (symmetric):  s_x = max|x| * float32(1/127), q = clamp(roundEven(x / s_x), -127, 127).
    uint8 (asymmetric, range widened to contain 0): s_x = hi * c - lo * c with
    c = float32(1/255), z_x = roundEven(-lo / s_x), q = clamp(roundEven(x / s_x) + z_x, 0, 255).
    Only float32 multiplies and subtractions make s_x, so every device gets the same
    bits. Subnormal x count as 0; when the range is below 2^-96 (or all zero), s_x = 1,
    z_x = 0 and q = 0. A NaN or infinity anywhere in x gives s_x = NaN, z_x = 0 and q = 0,
    so every output of an integer-mode matvec is NaN.
    """
    x = flush_subnormals(x)
    if not np.isfinite(x).all():
        return np.zeros(x.shape, np.int8 if mode == "int8" else np.uint8), np.float32(np.nan), 0
    c = ACT_INV[mode]
    if mode == "int8":
        amax = np.abs(x).max(initial=np.float32(0))
        s = np.float32(amax * c)
        if amax < ACT_TINY:
            return np.zeros(x.shape, np.int8), np.float32(1), 0
        q = np.clip(round_quotient(x, s), -127, 127).astype(np.int8)
        return q, s, 0
    lo = np.float32(min(x.min(initial=np.float32(0)), np.float32(0)))
    hi = np.float32(max(x.max(initial=np.float32(0)), np.float32(0)))
    if max(hi, -lo) < ACT_TINY:
        return np.zeros(x.shape, np.uint8), np.float32(1), 0
    s = np.float32(np.float32(hi * c) - np.float32(lo * c))
    z = int(np.clip(round_quotient(-lo, s), 0, 255))
    q = np.clip(round_quotient(x, s) + z, 0, 255).astype(np.uint8)
    return q, s, z


def matvec_accumulators(
    q: np.ndarray, zero_point: np.ndarray, qx: np.ndarray, zx: int
) -> np.ndarray:
    """Exact int64 ``acc_i = sum_j (Q_ij - z_i) (qx_j - z_x)``."""
    v = q.astype(np.int64) - np.asarray(zero_point, np.int64).reshape(-1, 1)
    return v @ (qx.astype(np.int64) - int(zx))


def matvec(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    x: np.ndarray,
    bias: np.ndarray | None = None,
    activations: str = "float",
) -> np.ndarray:
    """y as the matvec kernel defines it.

    float: y_i = s_i * sum_j (Q_ij - z_i) x_j + b_i, here summed in float64 (the kernel
    sums in float32, so compare within a tolerance).
    int8/uint8: y_i = float32(s_i * s_x) * float32(acc_i) + b_i, each step one float32
    rounding, acc_i exact (see matvec_accumulators): the kernel matches bit for bit.
    """
    m = q.shape[0]
    s = np.broadcast_to(np.asarray(scale, np.float32), (m,))
    z = np.broadcast_to(np.asarray(zero_point, np.int32), (m,))
    b = np.zeros(m, np.float32) if bias is None else np.asarray(bias, np.float32)
    if activations == "float":
        v = q.astype(np.float64) - z[:, None]
        acc = v @ flush_subnormals(x).astype(np.float64)
        return (s.astype(np.float64) * acc + b).astype(np.float32)
    qx, sx, zx = quantize_activations(x, activations)
    acc = matvec_accumulators(q, z, qx, zx)
    scale_xy = (s * sx).astype(np.float32)
    return (scale_xy * acc.astype(np.float32) + b).astype(np.float32)
