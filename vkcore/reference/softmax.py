"""numpy references of softmax and log_softmax (vkcore.kernels.softmax.softmax)."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax in float64 with vkcore's semantics (see :mod:`vkcore.kernels.softmax.softmax`).

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
