"""numpy references of activation quantization and the matvec kernels
(vkcore.kernels.matvec.matvec).

Parameters follow the QuantizedTensor layouts: ``scale`` / ``zero_point`` of shape ``()``
(per tensor), ``(m,)`` (per channel) or ``(m, G)`` with ``group_size = g`` (row ``i``,
column ``j`` uses element ``(i, j // g)``; ``G = ceil(n / g)``, the last group may be
shorter). ``x`` is a vector ``(n,)`` or a batch ``(n, b)`` whose columns are independent
activation vectors (each quantized on its own in the integer modes); ``y`` has shape
``(m,)`` or ``(m, b)`` accordingly.
"""

from __future__ import annotations

import numpy as np

from vkcore.reference.quant import flush_subnormals, round_quotient

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


def quantize_activation_columns(
    x: np.ndarray, mode: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each column of ``x`` (shape ``(n, b)``) quantized on its own by
    :func:`quantize_activations`: codes ``(n, b)``, ``s_x`` float32 ``(b,)``, ``z_x``
    int64 ``(b,)``."""
    x = np.asarray(x, np.float32)
    cols = [quantize_activations(x[:, k], mode) for k in range(x.shape[1])]
    dtype = np.int8 if mode == "int8" else np.uint8
    q = np.stack([c[0] for c in cols], axis=1) if cols else np.zeros(x.shape, dtype)
    s = np.array([c[1] for c in cols], np.float32)
    z = np.array([c[2] for c in cols], np.int64)
    return q.astype(dtype), s, z


def group_cols(n: int, params: np.ndarray, group_size: int | None) -> int:
    """Columns per parameter group: ``group_size``, or n for per-tensor / per-channel
    parameters. A ``(m, G)`` array with G > 1 needs ``group_size`` (G alone does not fix it)."""
    params = np.asarray(params)
    if group_size is not None:
        if isinstance(group_size, bool) or int(group_size) < 1:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        g = int(group_size)
        want = -(-n // g)
        if params.ndim != 2 or params.shape[1] != want:
            raise ValueError(
                f"with group_size={g} and n={n} the parameters must have shape (m, {want}), "
                f"got {params.shape}"
            )
        return g
    if params.ndim == 2 and params.shape[1] != 1:
        raise ValueError(f"parameters of shape {params.shape} need group_size (columns per group)")
    return n


def group_params(params: np.ndarray, m: int, n: int, g: int, dtype: type) -> np.ndarray:
    """Parameters as an ``(m, G)`` array, ``G = ceil(n / g)`` (broadcast from () or (m,))."""
    groups = -(-n // g)
    p: np.ndarray = np.asarray(params, dtype)
    if p.ndim == 1:
        p = p[:, None]
    return np.broadcast_to(p, (m, groups))


def weights_minus_zero(q: np.ndarray, zero_point: np.ndarray, g: int) -> np.ndarray:
    """``v_ij = Q_ij - z_{i, j // g}`` as int64, shape ``(m, n)``."""
    m, n = q.shape
    z = group_params(zero_point, m, n, g, np.int64)
    return q.astype(np.int64) - np.repeat(z, g, axis=1)[:, :n]


def group_rowsums(
    q: np.ndarray, zero_point: np.ndarray, group_size: int | None = None
) -> np.ndarray:
    """``V_ig = sum_{j in g} (Q_ij - z_ig)`` as int64, shape ``(m, G)`` (G = 1 per channel
    or per tensor): the correction of the uint8-activation mode."""
    m, n = q.shape
    g = group_cols(n, zero_point, group_size)
    return _group_sum(weights_minus_zero(q, zero_point, g), g)


def _group_sum(a: np.ndarray, g: int) -> np.ndarray:
    """Sum over each group of g columns of an int64 ``(m, n, ...)`` array: ``(m, G, ...)``."""
    n = a.shape[1]
    starts = np.arange(0, n, g)
    return np.add.reduceat(a, starts, axis=1)


def matvec_accumulators(
    q: np.ndarray,
    zero_point: np.ndarray,
    qx: np.ndarray,
    zx: int | np.ndarray,
    group_size: int | None = None,
) -> np.ndarray:
    """Exact int64 ``acc_ig = sum_{j in g} (Q_ij - z_ig) (qx_j - z_x)``.

    For one activation vector ``qx`` ``(n,)``: shape ``(m,)`` without ``group_size``
    (one group of n columns), ``(m, G)`` with it. For a batch ``qx`` ``(n, b)`` with
    ``zx`` of shape ``(b,)`` (or a scalar): ``(m, b)`` / ``(m, G, b)``.
    """
    m, n = q.shape
    g = group_cols(n, zero_point, group_size)
    v = weights_minus_zero(q, zero_point, g)
    qxc = qx.astype(np.int64) - np.asarray(zx, np.int64)
    if group_size is None:
        return v @ qxc
    groups = -(-n // g)
    pad = groups * g - n  # zero columns: they add nothing to the last group
    vg = np.pad(v, ((0, 0), (0, pad))).reshape(m, groups, g)
    cols = qxc if qxc.ndim == 2 else qxc[:, None]
    xg = np.pad(cols, ((0, pad), (0, 0))).reshape(groups, g, cols.shape[1])
    acc = np.einsum("mgk,gkb->mgb", vg, xg)  # int64: exact
    return acc if qxc.ndim == 2 else acc[:, :, 0]


def sequential_sum(t: np.ndarray) -> np.ndarray:
    """``fl(...fl(fl(t_0 + t_1) + t_2)... + t_{G-1})`` along axis 1 in float32 (increasing g)."""
    y = t[:, 0].astype(np.float32)
    for gi in range(1, t.shape[1]):
        y = (y + t[:, gi]).astype(np.float32)
    return y


def matvec(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    x: np.ndarray,
    bias: np.ndarray | None = None,
    activations: str = "float",
    group_size: int | None = None,
) -> np.ndarray:
    """y as the matvec kernel defines it, ``v_ij = Q_ij - z_ig``.

    float: ``y_i = sum_g s_ig * (sum_{j in g} v_ij x_j) + b_i``, here summed in float64
    and rounded once (the kernel sums in float32: compare within a tolerance).
    int8/uint8: x quantized per vector (per column of a batch) by
    :func:`quantize_activations`; ``acc_ig`` exact (:func:`matvec_accumulators`);
    ``t_ig = fl(fl(s_ig * s_x) * fl(acc_ig))``; ``y_i = fl(sequential_sum_g(t_ig) + b_i)``,
    the group terms added in increasing g starting from ``t_i0``. With one group this is
    ``fl(fl(fl(s_i s_x) fl(acc_i)) + b_i)``. The kernel matches it bit for bit.
    """
    x = np.asarray(x)
    if x.ndim == 2:
        return _batched(q, scale, zero_point, x, bias, activations, group_size)
    m, n = q.shape
    g = group_cols(n, scale, group_size)
    s = group_params(scale, m, n, g, np.float32)
    b = np.zeros(m, np.float32) if bias is None else np.asarray(bias, np.float32)
    if activations == "float":
        v = weights_minus_zero(q, zero_point, g).astype(np.float64)
        sx = np.repeat(s.astype(np.float64), g, axis=1)[:, :n]
        acc = (sx * v) @ flush_subnormals(x).astype(np.float64)
        return (acc + b).astype(np.float32)
    qx, sxa, zx = quantize_activations(x, activations)
    acc = matvec_accumulators(q, zero_point, qx, zx, g if group_size is not None else None)
    acc = acc.reshape(m, -1)
    t = (s * sxa).astype(np.float32) * acc.astype(np.float32)
    return (sequential_sum(t.astype(np.float32)) + b).astype(np.float32)


def _batched(
    q: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    x: np.ndarray,
    bias: np.ndarray | None,
    activations: str,
    group_size: int | None,
) -> np.ndarray:
    """Column k of the result is :func:`matvec` of column k of ``x`` (its own ``s_x``)."""
    m = q.shape[0]
    cols = [
        matvec(q, scale, zero_point, x[:, k], bias, activations, group_size)
        for k in range(x.shape[1])
    ]
    return np.stack(cols, axis=1) if cols else np.zeros((m, 0), np.float32)
