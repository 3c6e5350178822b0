"""numpy references of activation quantization and the matvec kernels (vkcore.kernels.matvec)."""

from __future__ import annotations

import numpy as np

from .quant import flush_subnormals, round_quotient

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
