"""numpy references of top-k, the fused softmax + top-k and sampling (vkcore.kernels.sampling.topk,
vkcore.kernels.sampling.sample): the same rank order, the same random numbers, the same formulas.

Rank order: descending, ties to the lower index, NaN last (after -inf), -0 equal to +0:
exactly ``np.argsort(-x, kind="stable")`` on the float32 values.
"""

from __future__ import annotations

import numpy as np

from vkcore.reference.softmax import softmax as _softmax

_M0, _M1 = 0xD2511F53, 0xCD9E8D57
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = 0xFFFFFFFF


def rank_order(x: np.ndarray) -> np.ndarray:
    """Indices of each row of ``x`` (last axis) in rank order (float32 values)."""
    a = np.asarray(x, dtype=np.float32)
    return np.argsort(-a, axis=-1, kind="stable")


def topk(x: np.ndarray, k: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """The k first values of each row in rank order (float32) and their int64 indices."""
    a = np.moveaxis(np.asarray(x, dtype=np.float32), axis, -1)
    idx = rank_order(a)[..., :k].astype(np.int64)
    values = np.take_along_axis(a, idx, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(idx, -1, axis)


def softmax_topk(x: np.ndarray, k: int, axis: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """The probabilities (softmax over the whole row, float64 then float32) of the k first
    entries in rank order, and their indices. A NaN or +inf in a row makes its
    probabilities NaN (vkcore.softmax's rule); indices follow :func:`topk`."""
    a = np.moveaxis(np.asarray(x, dtype=np.float32), axis, -1)
    idx = rank_order(a)[..., :k].astype(np.int64)
    p = np.take_along_axis(_softmax(a, axis=-1), idx, axis=-1).astype(np.float32)
    return np.moveaxis(p, -1, axis), np.moveaxis(idx, -1, axis)


def philox4x32(counter: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of counters (``(..., 4)`` uint32) with a two-word key: (..., 4) uint32."""
    c = [np.asarray(counter, dtype=np.uint64)[..., j] for j in range(4)]
    k0, k1 = np.uint64(key[0] & _MASK), np.uint64(key[1] & _MASK)
    mask = np.uint64(_MASK)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(_W0)) & mask, (k1 + np.uint64(_W1)) & mask
        p0 = np.uint64(_M0) * c[0]
        p1 = np.uint64(_M1) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return np.stack(c, axis=-1).astype(np.uint32)


def uniforms(seed: int, rows: int, n: int) -> np.ndarray:
    """The uniform draws u[row, i] = ((w >> 9) + 0.5) / 2^23, w the first word of
    philox4x32((i, row, 0, 0), (seed mod 2^32, seed >> 32)); float32 in (0, 1)."""
    i, r = np.meshgrid(np.arange(n, dtype=np.uint64), np.arange(rows, dtype=np.uint64))
    counter = np.stack([i, r, np.zeros_like(i), np.zeros_like(i)], axis=-1)
    w = philox4x32(counter, (seed & _MASK, (seed >> 32) & _MASK))[..., 0]
    return ((w >> 9).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-23)


def gumbel(seed: int, rows: int, n: int) -> np.ndarray:
    """The Gumbel draws -log(-log(u)) of :func:`uniforms`, in float32."""
    u = uniforms(seed, rows, n)
    return -np.log(-np.log(u))


def topk_allowed(
    logits: np.ndarray, temperature: float, top_k: int | None, top_p: float | None
) -> np.ndarray:
    """The tokens of each row that may be drawn (bool, rows x n): the top_k first in rank
    order (of the logits themselves), then of those the nucleus: the fewest first ones
    whose probabilities (softmax of logits / temperature over the top-k set, float64)
    sum to at least top_p."""
    a = np.asarray(logits, dtype=np.float32).reshape(-1, np.shape(logits)[-1])
    rows, n = a.shape
    order = rank_order(a)
    count = n if top_k is None else top_k
    keep = np.zeros((rows, n), dtype=bool)
    for r in range(rows):
        chosen = order[r, :count]
        if top_p is not None and temperature > 0 and top_p < 1:
            z = (a[r, chosen] * np.float32(1.0 / temperature)).astype(np.float64)
            with np.errstate(invalid="ignore"):
                q = np.exp(z - z[0])
            cum = np.cumsum(q)
            reach = np.nonzero(cum >= top_p * cum[-1])[0]
            chosen = chosen[: reach[0] + 1 if reach.size else count]
        keep[r, chosen] = True
    return keep


def sample(
    logits: np.ndarray,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """The tokens vkcore.sample draws with ``seed`` (int64, one per row: shape
    ``logits.shape[:-1]``): argmax over the allowed tokens of logits * float32(1 /
    temperature) + gumbel(seed), ties to the lower index; temperature 0 is the argmax of
    the logits in rank order. Rows with a NaN or +inf, or without a finite logit, are -1."""
    a = np.asarray(logits, dtype=np.float32)
    flat = a.reshape(-1, a.shape[-1])
    rows, n = flat.shape
    keep = topk_allowed(flat, temperature, top_k, top_p)
    if temperature == 0:
        s = flat.copy()
    else:
        s = flat * np.float32(1.0 / temperature) + gumbel(seed, rows, n)
    s = np.where(keep, s, -np.inf)
    s = np.where(np.isnan(s), -np.inf, s)
    tokens = np.argmax(s, axis=-1).astype(np.int64)
    bad = np.isnan(flat).any(axis=-1) | np.isposinf(flat).any(axis=-1)
    bad |= ~np.isfinite(np.where(np.isnan(flat), -np.inf, flat)).any(axis=-1)
    tokens[bad] = -1
    return tokens.reshape(a.shape[:-1])
