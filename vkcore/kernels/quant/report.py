"""Quantization error against the bounds of RTN quantization (seed, section 7).

Per parameter group ``(i, g)`` (a row ``i`` without group_size, where ``g`` is the whole
row; the columns ``j`` in group ``g`` with it) with scale ``s_ig``, for
``W_hat = s (Q - z)`` evaluated exactly in float64. The bounds use ``|s_ig|`` (a tensor
from :meth:`~vkcore.QuantizedTensor.from_arrays` may hold ggml's negative or zero scales;
quantize makes positive ones); a zero scale bounds its group's error by 0, i.e. the
group must be reproduced exactly, and its ratio to the bound (:func:`ratio`) is 0 when
it is, infinite when not:

* worst case ``max_{j in g} |W_hat_ij - W_ij| <= s_ig / 2`` (round to nearest; the
  asymmetric range's clipped ends stay within it too, up to ``2^-15 s_ig`` from the
  float32 scale);
* the RMS error over the group is typically ``s_ig / sqrt(12)`` (uniform rounding noise:
  an estimate, not a bound; it never exceeds ``s_ig / 2``);
* with an input ``x``: ``|dy_i| = |(W_hat x - W x)_i| <= sum_g s_ig / 2 * ||x_g||_1``
  (worst case; ``x_g`` the entries of x in group g) and typically
  ``sqrt(sum_g s_ig^2 / 12 * ||x_g||_2^2)``. Without groups these are
  ``s_i / 2 * ||x||_1`` and ``s_i / sqrt(12) * ||x||_2``.

(``s`` stands for ``|s|`` throughout.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore.kernels.quant.qtensor import QuantizedTensor

# The float32 scale is the real (hi - lo) / (2^b - 1) within 2^-24 relatively; over 255
# steps that moves an asymmetric range's end by at most 255 * 2^-24 s < 2^-15 s.
SLACK = 2.0**-15


@dataclass
class QuantError:
    """Errors and the bounds they are held to, float64: per group, shape ``(m, G)``, when
    the tensor has a group_size, else per row, shape ``(m,)``; the output errors are per
    row, shape ``(m,)``."""

    scale: np.ndarray  # the tensor's own (signed) scales
    max_err: np.ndarray
    bound_max: np.ndarray  # |s| / 2
    rms_err: np.ndarray
    typical_rms: np.ndarray  # s / sqrt(12)
    out_err: np.ndarray | None = None  # |W_hat x - W x|
    bound_out: np.ndarray | None = None  # s / 2 * ||x||_1
    typical_out: np.ndarray | None = None  # s / sqrt(12) * ||x||_2
    group_size: int | None = None  # as the tensor's: the per-group fields are (m, G)

    def holds(self) -> bool:
        """True when every worst-case bound holds (the typical values are not bounds)."""
        ok = bool(np.all(self.max_err <= self.bound_max * (1 + SLACK)))
        ok &= bool(np.all(self.rms_err <= self.bound_max * (1 + SLACK)))
        if self.out_err is not None and self.bound_out is not None:
            # float64 evaluation of both products adds a relative 1e-12 at most.
            ok &= bool(
                np.all(self.out_err <= self.bound_out * (1 + SLACK) + 1e-12 * self.bound_out.max())
            )
        return ok


def ratio(err: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``err / bound`` elementwise, with ``0 / 0 = 0`` and ``err / 0 = inf`` for err > 0
    (a zero bound is met only exactly), without numpy warnings."""
    err, bound = np.asarray(err, np.float64), np.asarray(bound, np.float64)
    out = np.where(err > 0, np.inf, 0.0)
    np.divide(err, bound, out=out, where=bound > 0)
    return out


def quant_error(w: Any, qt: QuantizedTensor, x: Any = None) -> QuantError:
    """Measure ``qt`` (quantized from ``w``) against the RTN error bounds, per group
    (per row without group_size); module docstring for the bounds. ``w`` and ``x`` are
    taken as float32 (float64 beyond its range: infinities, whose statistics are then
    infinite or NaN, without numpy warnings)."""
    if not isinstance(qt, QuantizedTensor):
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}")
    with np.errstate(over="ignore"):  # float64 beyond float32: inf, as quantize converts it
        w64 = np.asarray(w, dtype=np.float32).astype(np.float64)
    if w64.shape != qt.shape:
        raise ValueError(f"w must have the quantized shape {qt.shape}, got {w64.shape}")
    m, n = qt.shape
    starts = np.arange(0, n, qt.group_cols)  # first column of each group
    counts = np.diff(np.append(starts, n))
    g = len(starts)  # () and (m,) parameters reshape to (1, 1) and (m, 1)
    signed = np.broadcast_to(qt.scale.astype(np.float64).reshape(-1, g), (m, g))
    z = np.broadcast_to(qt.zero_point.astype(np.float64).reshape(-1, g), (m, g))
    codes = qt.q.astype(np.float64) - np.repeat(z, counts, axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        err = np.repeat(signed, counts, axis=1) * codes - w64
    s = np.abs(signed)  # the bounds' step size

    def per(a: np.ndarray) -> np.ndarray:  # (m, G) with groups, else (m,) per row
        return np.array(a) if qt.group_size is not None else np.array(a[:, 0])

    result = QuantError(
        scale=per(signed),
        max_err=per(np.maximum.reduceat(np.abs(err), starts, axis=1)),
        bound_max=per(s / 2),
        rms_err=per(np.sqrt(np.add.reduceat(err**2, starts, axis=1) / counts)),
        typical_rms=per(s / np.sqrt(12)),
        group_size=qt.group_size,
    )
    if x is not None:
        with np.errstate(over="ignore"):
            xv = np.asarray(x, dtype=np.float32).astype(np.float64)
        if xv.shape != (n,):
            raise ValueError(f"x must have shape ({n},), got {xv.shape}")
        with np.errstate(over="ignore", invalid="ignore"):  # infinite x: non-finite results
            result.out_err = np.abs(err @ xv)
            result.bound_out = (s / 2 * np.add.reduceat(np.abs(xv), starts)).sum(axis=1)
            result.typical_out = np.sqrt((s**2 / 12 * np.add.reduceat(xv**2, starts)).sum(axis=1))
    return result


def format_report(label: str, e: QuantError) -> str:
    """One line: worst ratios to the bounds, mean ratios to the typical values."""
    parts = [
        f"{label:<24}",
        f"max|err|/(s/2) {np.max(ratio(e.max_err, e.bound_max)):.3f}",
        f"rms/(s/sqrt12) {np.mean(ratio(e.rms_err, e.typical_rms)):.3f}",
        f"mean rms {np.mean(e.rms_err):.2e}",
    ]
    if e.out_err is not None and e.bound_out is not None and e.typical_out is not None:
        parts.append(f"|dy|/(s/2|x|1) {np.max(ratio(e.out_err, e.bound_out)):.4f}")
        typical = np.sqrt(np.mean(ratio(e.out_err, e.typical_out) ** 2))
        parts.append(f"|dy|/(s/sqrt12|x|2) {typical:.2f}")
    parts.append("ok" if e.holds() else "BOUND VIOLATED")
    return "  ".join(parts)
