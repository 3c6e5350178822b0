"""numpy attention larger than one storage binding: one query head at a time, its rows
and keys cut into pieces that fit, each (rows, keys) piece's partial states computed by
the kernel and merged on the host in key order (float64):
``R = max r``, ``L = sum l e^(r - R)``, ``out = sum acc e^(r - R) / L``; a piece that
attended nothing adds nothing, a NaN or +inf score anywhere makes the row NaN. The
causal rule becomes each piece's additive mask, with its global positions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkcore.kernels.attention.operands import Shapes

Partials = Callable[
    [np.ndarray, np.ndarray, np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]
]


def beyond_binding(limit: int, s: Shapes, mask: Any) -> bool:
    """Whether any array of the call (q, k, v, the output, a full mask) exceeds ``limit``."""
    sizes = [
        s.batch * s.hq * s.lq * s.d,
        s.batch * s.hkv * s.lk * s.d,
        s.batch * s.hkv * s.lk * s.dv,
        s.batch * s.hq * s.lq * s.dv,
    ]
    if mask is not None:
        sizes.append(int(np.size(mask)))
    return max(sizes) * 4 > limit


def piece_sizes(limit: int, s: Shapes) -> tuple[int, int]:
    """(query rows, keys) per piece: every buffer of a piece within ``limit`` bytes
    (q, k, v, the piece's mask, its partial states of 4 + Dv floats per row)."""
    width = max(s.d, s.dv, 1)
    keys = max(1, min(limit // (4 * width), s.lk))
    rows = max(1, min(limit // (4 * (width + 4)), limit // (4 * keys), s.lq))
    if 4 * keys * width > limit or 4 * rows * (width + 4) > limit:
        raise ValueError(
            f"one row of q, k or v ({4 * width} bytes) does not fit this device's storage "
            f"binding ({limit} bytes)"
        )
    return rows, keys


def attend(
    partials: Partials,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    s: Shapes,
    causal: bool,
    mask: tuple[np.ndarray, tuple[int, int, int, int]] | None,
    limit: int,
    out: np.ndarray,
) -> None:
    """Fill ``out`` (float32 of ``s.out_shape``) piece by piece."""
    q4 = q.reshape(s.batch, s.hq, s.lq, s.d)
    k4 = k.reshape(s.batch, s.hkv, s.lk, s.d)
    v4 = v.reshape(s.batch, s.hkv, s.lk, s.dv)
    o4 = out.reshape(s.batch, s.hq, s.lq, s.dv)
    rows, keys = piece_sizes(limit, s)
    full = None
    if mask is not None:
        terms, strides = mask
        full = np.lib.stride_tricks.as_strided(
            terms, (s.batch, s.hq, s.lq, s.lk), tuple(4 * st for st in strides), writeable=False
        )
    for b in range(s.batch):
        for h in range(s.hq):
            kh, vh = k4[b, h // s.group], v4[b, h // s.group]
            for i0 in range(0, s.lq, rows):
                i1 = min(i0 + rows, s.lq)
                states = []
                for j0 in range(0, s.lk, keys):
                    j1 = min(j0 + keys, s.lk)
                    add = _piece_mask(full, b, h, i0, i1, j0, j1, causal, s)
                    states.append(partials(q4[b, h, i0:i1], kh[j0:j1], vh[j0:j1], add))
                o4[b, h, i0:i1] = merge(states)


def _piece_mask(
    full: np.ndarray | None,
    b: int,
    h: int,
    i0: int,
    i1: int,
    j0: int,
    j1: int,
    causal: bool,
    s: Shapes,
) -> np.ndarray | None:
    """The additive mask of one piece (float32), with the causal rule at its positions."""
    if full is None and not causal:
        return None
    add = np.zeros((i1 - i0, j1 - j0), np.float32)
    if full is not None:
        add += full[b, h, i0:i1, j0:j1]
    if causal:
        i = np.arange(i0, i1)[:, None]
        j = np.arange(j0, j1)[None, :]
        add[j > i + s.lk - s.lq] = -np.inf
    return add


def merge(states: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """The rows of the partial states ``((r, l, bad) (rows, 3), acc (rows, Dv))`` of the
    pieces of their keys, in key order, normalized (float32)."""
    r = np.stack([st[:, 0] for st, _ in states]).astype(np.float64)
    top = r.max(axis=0)
    empty = np.isneginf(top)
    with np.errstate(invalid="ignore", over="ignore"):
        w = np.where(np.isneginf(r), 0.0, np.exp(r - np.where(empty, 0.0, top)))
    total = sum(wi * st[:, 1] for wi, (st, _) in zip(w, states, strict=True))
    acc = sum(wi[:, None] * a for wi, (_, a) in zip(w, states, strict=True))
    bad = np.any([st[:, 2] != 0 for st, _ in states], axis=0)
    out = np.where(empty[:, None], 0.0, acc / np.where(empty, 1.0, total)[:, None])
    return np.where(bad[:, None], np.nan, out).astype(np.float32)
