"""Quantization error against the bounds of RTN quantization (seed, section 7).

Per row ``i`` with scale ``s_i``, for ``W_hat = s (Q - z)`` evaluated exactly in float64:

* worst case ``max_j |W_hat_ij - W_ij| <= s_i / 2`` (round to nearest; the asymmetric
  range's clipped ends stay within it too, up to ``2^-15 s_i`` from the float32 scale);
* the RMS error is typically ``s_i / sqrt(12)`` (uniform rounding noise: an estimate,
  not a bound; it never exceeds ``s_i / 2``);
* with an input ``x``: ``|dy_i| = |(W_hat x - W x)_i| <= s_i / 2 * ||x||_1`` (worst case)
  and typically ``s_i / sqrt(12) * ||x||_2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .kernels.quant import QuantizedTensor

# The float32 scale is the real (hi - lo) / (2^b - 1) within 2^-24 relatively; over 255
# steps that moves an asymmetric range's end by at most 255 * 2^-24 s < 2^-15 s.
SLACK = 2.0**-15


@dataclass
class QuantError:
    """Per-row errors (float64 arrays of shape (m,)) and the bounds they are held to."""

    scale: np.ndarray
    max_err: np.ndarray
    bound_max: np.ndarray  # s / 2
    rms_err: np.ndarray
    typical_rms: np.ndarray  # s / sqrt(12)
    out_err: np.ndarray | None = None  # |W_hat x - W x|
    bound_out: np.ndarray | None = None  # s / 2 * ||x||_1
    typical_out: np.ndarray | None = None  # s / sqrt(12) * ||x||_2

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


def quant_error(w: Any, qt: QuantizedTensor, x: Any = None) -> QuantError:
    """Measure ``qt`` (quantized from ``w``) against the RTN error bounds, per row."""
    if not isinstance(qt, QuantizedTensor):
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}")
    w64 = np.asarray(w, dtype=np.float32).astype(np.float64)
    if w64.shape != qt.shape:
        raise ValueError(f"w must have the quantized shape {qt.shape}, got {w64.shape}")
    m, n = qt.shape
    s = np.broadcast_to(qt.scale.astype(np.float64), (m,)).copy()
    z = np.broadcast_to(qt.zero_point.astype(np.float64), (m,))
    w_hat = s[:, None] * (qt.q.astype(np.float64) - z[:, None])
    err = w_hat - w64
    result = QuantError(
        scale=s,
        max_err=np.abs(err).max(axis=1),
        bound_max=s / 2,
        rms_err=np.sqrt((err**2).mean(axis=1)),
        typical_rms=s / np.sqrt(12),
    )
    if x is not None:
        xv = np.asarray(x, dtype=np.float32).astype(np.float64)
        if xv.shape != (n,):
            raise ValueError(f"x must have shape ({n},), got {xv.shape}")
        result.out_err = np.abs(err @ xv)
        result.bound_out = s / 2 * np.abs(xv).sum()
        result.typical_out = s / np.sqrt(12) * np.sqrt((xv**2).sum())
    return result


def format_report(label: str, e: QuantError) -> str:
    """One line: worst ratios to the bounds, mean ratios to the typical values."""
    parts = [
        f"{label:<24}",
        f"max|err|/(s/2) {np.max(e.max_err / e.bound_max):.3f}",
        f"rms/(s/sqrt12) {np.mean(e.rms_err / e.typical_rms):.3f}",
        f"mean rms {np.mean(e.rms_err):.2e}",
    ]
    if e.out_err is not None and e.bound_out is not None and e.typical_out is not None:
        parts.append(f"|dy|/(s/2|x|1) {np.max(e.out_err / e.bound_out):.4f}")
        parts.append(
            f"|dy|/(s/sqrt12|x|2) {np.sqrt(np.mean((e.out_err / e.typical_out) ** 2)):.2f}"
        )
    parts.append("ok" if e.holds() else "BOUND VIOLATED")
    return "  ".join(parts)
