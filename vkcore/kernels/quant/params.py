"""The host side of quantize: option checks, the weights' ranges, and each group's scale
and zero point (formulas: :mod:`vkcore.kernels.quant.rtn`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.kernels import common as c
from vkcore.kernels.quant.qlayout import check_bits, check_group_size, integer_range

_TINY = np.float32(np.finfo(np.float32).tiny)
_SMALLEST = np.float32(2.0**-149)
# What quantize.comp reads per group (device_params).
_PARAMS = np.dtype([("s_norm", "<f4"), ("f1", "<f4"), ("f2", "<f4"), ("z", "<i4")])


# --------------------------------------------------------------------------- arguments
def check_options(
    bits: Any, symmetric: Any, per_channel: Any, group_size: Any = None
) -> int | None:
    """Raise for a bad option (bits outside 2..8, a group_size that is not a positive int
    or comes with per_channel=False); returns group_size as an int or None."""
    check_bits(bits)
    for name, value in (("symmetric", symmetric), ("per_channel", per_channel)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    size = check_group_size(group_size)
    if size is not None and not per_channel:
        raise ValueError(
            f"group_size={size} needs per_channel=True (groups are columns of one row); "
            "per_channel=False is one scale for the whole tensor"
        )
    return size


def weight_array(w: Any) -> tuple[np.ndarray, np.ndarray]:
    """The caller's 2-D matrix (as given) and its C-contiguous float32 form, or a clear
    error; finiteness is checked by :func:`row_range` or on the device."""
    data = c.float_input(w, "w")
    arr = data.numpy() if isinstance(data, Tensor) else data
    if arr.ndim != 2:
        raise ValueError(f"w must be a 2-D matrix (outputs x inputs), got shape {arr.shape}")
    if 0 in arr.shape:
        raise ValueError(f"w must not be empty, got shape {arr.shape}")
    with np.errstate(over="ignore"):  # float64 beyond float32 becomes inf, reported later
        w32 = c.as_float32(arr)
    return arr, w32


def row_range(arr: np.ndarray, w32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima and minima of ``w32``, or a ValueError naming its first NaN or infinity.

    They are NaN or infinite exactly when the row holds such a value; group_params needs
    them anyway, so the full element-wise scan runs only on failure.
    """
    row_max, row_min = w32.max(axis=1), w32.min(axis=1)
    if not (np.isfinite(row_max).all() and np.isfinite(row_min).all()):
        row, col = (int(i) for i in np.argwhere(~np.isfinite(w32))[0])
        note = ""
        if np.isfinite(arr[row, col]):
            note = f" (it is {arr[row, col]!r}, beyond the float32 range)"
        raise ValueError(f"w must be finite: w[{row}, {col}] is {w32[row, col]}{note}")
    return row_max, row_min


def group_range(arr: np.ndarray, w32: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Maxima and minima of each row's groups of ``group_size`` columns, shape (m, G);
    a ValueError naming the first NaN or infinity as :func:`row_range` does. The last
    group may be shorter: its own columns only (padding it with zeros would not change
    min(W, 0) and max(W, 0) either)."""
    starts = np.arange(0, w32.shape[1], group_size)
    g_max = np.maximum.reduceat(w32, starts, axis=1)
    g_min = np.minimum.reduceat(w32, starts, axis=1)
    if not (np.isfinite(g_max).all() and np.isfinite(g_min).all()):
        row_range(arr, w32)  # raises, naming the first bad element
    return g_max, g_min


# --------------------------------------------------------------------------- parameters
def group_params(
    row_max: np.ndarray, row_min: np.ndarray, bits: int, symmetric: bool, per_channel: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point per group from the rows' maxima and minima (module docstring)."""
    qmin, qmax = integer_range(bits, symmetric)
    hi = row_max.astype(np.float64) if per_channel else np.float64(row_max.max())
    lo = row_min.astype(np.float64) if per_channel else np.float64(row_min.min())
    lo = np.where(lo > -_TINY, 0.0, lo)  # the range contains 0; subnormals count as 0
    hi = np.where(hi < _TINY, 0.0, hi)
    if symmetric:
        amax = np.maximum(hi, -lo)
        scale64 = amax / qmax
        empty = amax == 0
        lo = np.zeros_like(amax)
    else:
        scale64 = (hi - lo) / (qmax - qmin)
        empty = hi == lo
    s = np.maximum(scale64.astype(np.float32), _SMALLEST)
    s = np.where(empty, np.float32(1), s).astype(np.float32)
    z = np.clip(np.rint(-lo / s.astype(np.float64)), qmin, qmax).astype(np.int32)
    return np.asarray(s, np.float32), np.asarray(z, np.int32)


def device_params(scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """Per group: the scale normalized into [1, 2) and two powers of two, each a normal
    float32, whose product 2^e normalizes it (s * 2^e = s_norm); then z."""
    s = np.atleast_1d(scale).astype(np.float32)
    mant, ex = np.frexp(s)
    e = (1 - ex).astype(np.int64)  # in [-126, 149] for positive float32 scales
    e1 = np.clip(e, -126, 127)
    out = np.zeros(s.shape, dtype=_PARAMS)
    out["s_norm"] = np.ldexp(mant, 1).astype(np.float32)
    out["f1"] = np.ldexp(np.float32(1), e1).astype(np.float32)
    out["f2"] = np.ldexp(np.float32(1), e - e1).astype(np.float32)
    out["z"] = np.atleast_1d(zero_point)
    return out
