"""numpy reference of attention and of the int8 KV cache (vkcore.kernels.attention).

The contract is docs/attention.md; this module computes it in float64 from the values
the device holds (float32 q, k, v and mask, the scale rounded to float32).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkcore.reference.quant import quantize


def attention(
    q: Any,
    k: Any,
    v: Any,
    *,
    scale: float | None = None,
    causal: bool = False,
    mask: Any = None,
) -> np.ndarray:
    """``softmax(q k^T * scale + mask) v`` in float64 with vkcore's semantics.

    ``q`` is ``(..., Hq, Lq, D)``, ``k`` ``(..., Hkv, Lk, D)``, ``v`` ``(..., Hkv, Lk, Dv)``
    with ``Hq`` a multiple of ``Hkv`` (query head ``h`` reads KV head ``h // (Hq // Hkv)``).
    ``causal``: query ``i`` attends keys ``j <= i + Lk - Lq``. ``mask``: boolean (True
    attends) or additive float, broadcastable to ``(..., Hq, Lq, Lk)``. A masked key
    contributes exactly 0, a query with every key masked gives zeros, a NaN or ``+inf``
    score makes that query's output NaN. Inputs are rounded to float32 first.
    """
    q64 = np.asarray(q, np.float32).astype(np.float64)
    k64 = np.asarray(k, np.float32).astype(np.float64)
    v64 = np.asarray(v, np.float32).astype(np.float64)
    hq, lq, d = q64.shape[-3:]
    hkv, lk = k64.shape[-3], k64.shape[-2]
    group = hq // hkv
    k64 = np.repeat(k64, group, axis=-3)
    v64 = np.repeat(v64, group, axis=-3)
    s = float(np.float32(1.0 / math.sqrt(d) if scale is None else scale))
    # The device computes dot products and scores in float32: past its range, infinities.
    with np.errstate(invalid="ignore", over="ignore"):
        scores = float32_range(float32_range(np.matmul(q64, np.swapaxes(k64, -1, -2))) * s)
    add = additive_mask(mask, causal, lq, lk)
    # A masked key is masked whatever its score (a NaN key behind a mask changes nothing).
    with np.errstate(invalid="ignore"):
        scores = np.where(np.isneginf(add), -np.inf, float32_range(scores + add))
    bad = np.isnan(scores).any(axis=-1, keepdims=True)
    bad |= np.isposinf(scores).any(axis=-1, keepdims=True)
    scores = np.where(bad, 0.0, scores)
    masked = np.isneginf(scores)
    m = scores.max(axis=-1, keepdims=True, initial=-np.inf)
    empty = np.isneginf(m)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.where(masked | empty, 0.0, np.exp(scores - np.where(empty, 0.0, m)))
        total = e.sum(axis=-1, keepdims=True)
        # Masked keys' values are never read: their weight is 0 and their value too.
        weighted = np.matmul(e, np.where(np.isfinite(v64), v64, 0.0))
        weighted += _nonfinite_terms(e, v64)
        out = np.where(empty, 0.0, weighted / np.where(total == 0, 1.0, total))
    return np.where(bad, np.nan, out)


def float32_range(x: np.ndarray) -> np.ndarray:
    """``x`` (float64) with the finite values float32 rounds to an infinity made that
    infinity (the rest keep every digit)."""
    with np.errstate(over="ignore", invalid="ignore"):
        beyond = np.isinf(x.astype(np.float32)) & np.isfinite(x)
    return np.where(beyond, np.copysign(np.inf, x), x)


def _nonfinite_terms(e: np.ndarray, v: np.ndarray) -> np.ndarray:
    """What the non-finite values of attended keys add (weight times value), 0 elsewhere."""
    if np.isfinite(v).all():
        return np.zeros(e.shape[:-1] + v.shape[-1:])
    bad_v = np.where(np.isfinite(v), 0.0, v)
    with np.errstate(invalid="ignore"):
        terms = e[..., :, None] * bad_v[..., None, :, :]
        return np.where(e[..., :, None] == 0, 0.0, terms).sum(axis=-2)


def additive_mask(mask: Any, causal: bool, lq: int, lk: int) -> np.ndarray:
    """The mask as float64 additive terms (0 attends, -inf masked, else the float32
    value), with the bottom-right causal rule added."""
    total = np.zeros((lq, lk))
    if causal:
        i = np.arange(lq)[:, None]
        j = np.arange(lk)[None, :]
        total = np.where(j <= i + lk - lq, 0.0, -np.inf)
    if mask is None:
        return total
    m = np.asarray(mask)
    if m.dtype == np.bool_:
        return total + np.where(m, 0.0, -np.inf)
    return total + m.astype(np.float32).astype(np.float64)


def kv_quantize(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """The int8 cache's codes and scales of ``x`` (``(..., D)`` float32): one symmetric
    RTN scale per vector of ``D`` (a token of one head), the rules of
    :func:`vkcore.reference.quantize` (``s = float32(max|x| / 127)``, ``q =
    roundEven(x / s)``, a vector of zeros or subnormals ``s = 1``). A vector holding a NaN
    or an infinity gets codes 0 and a NaN scale (its dequantized values are NaN)."""
    a = np.asarray(x, np.float32)
    rows = a.reshape(-1, a.shape[-1])
    bad = ~np.isfinite(rows).all(axis=1)
    q = np.zeros(rows.shape, np.int8)
    s = np.full(rows.shape[0], np.nan, np.float32)
    if rows.size and not bad.all():
        q[~bad], s[~bad], _ = quantize(rows[~bad])
    return q.reshape(a.shape), s.reshape(a.shape[:-1])


def kv_dequantize(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``s * q``, one float32 multiply per element (what the attention kernel reads)."""
    return (np.asarray(s, np.float32)[..., None] * q.astype(np.float32)).astype(np.float32)
