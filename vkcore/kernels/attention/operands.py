"""The arguments of :func:`vkcore.attention` checked and brought into the kernel's
layout: shapes, the scale, and the mask as float32 additive terms with element strides
(0 where it broadcasts)."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.errors import shown


@dataclass(frozen=True)
class Shapes:
    """``q (*lead, Hq, Lq, D)``, keys ``(*lead, Hkv, Lk, D)``, values ``(..., Dv)``."""

    lead: tuple[int, ...]
    hq: int
    hkv: int
    lq: int
    lk: int
    d: int
    dv: int

    @property
    def batch(self) -> int:
        return math.prod(self.lead)

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.lead, self.hq, self.lq, self.dv)

    @property
    def rows(self) -> int:
        """Query rows of one KV head (every query head of its group)."""
        return self.group * self.lq


def shapes(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...], kname: str) -> Shapes:
    """The call's sizes; ValueErrors name the argument whose shape is wrong."""
    if len(q) < 3:
        raise ValueError(f"q must have shape (..., Hq, Lq, D), got {q}")
    if len(k) != len(q) or len(v) != len(q):
        raise ValueError(
            f"{kname} and v must have as many axes as q ({len(q)}), got {len(k)} and {len(v)}"
        )
    lead, (hq, lq, d) = q[:-3], q[-3:]
    hkv, lk, dk = k[-3:]
    if k[:-3] != lead or v[:-3] != lead:
        raise ValueError(f"{kname} and v must have q's leading axes {lead}, got {k[:-3]}, {v[:-3]}")
    if dk != d:
        raise ValueError(f"{kname}'s last axis must be q's D ({d}), got {dk}")
    if v[-3:-1] != (hkv, lk):
        raise ValueError(f"v must have {kname}'s heads and length {(hkv, lk)}, got {v[-3:-1]}")
    if d < 1:
        raise ValueError("q's last axis (D) must be at least 1, got 0")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q's heads ({hq}) must be a multiple of {kname}'s heads ({hkv})")
    return Shapes(lead, hq, hkv, lq, lk, d, v[-1])


def scale_of(scale: Any, d: int) -> float:
    """The score scale: ``1 / sqrt(D)`` by default, else a finite real number."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__}")
    # Finite once rounded to float32 (the kernel's value): 1e39 or 10**400 would be inf.
    try:
        value = float(scale)
    except OverflowError:
        value = math.inf
    with np.errstate(over="ignore"):
        rounded = np.float32(value)
    if not math.isfinite(rounded):
        raise ValueError(f"scale must be finite in float32, got {shown(scale)}")
    return float(rounded)


def check_causal(causal: Any) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    return bool(causal)


def mask_terms(mask: Any, s: Shapes) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """``mask`` as C-contiguous float32 additive terms (a boolean mask: 0 where True,
    -inf where False) holding each distinct value once, and its element strides over
    ``(batch, Hq, Lq, Lk)``, 0 along the axes it broadcasts."""
    if isinstance(mask, Tensor):
        raise TypeError("mask must be a numpy array (boolean or float), got a vkcore.Tensor")
    try:
        m = np.asarray(mask)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"mask must be array-like of bools or floats: {exc}") from None
    if m.dtype == np.bool_:
        terms = np.where(m, np.float32(0), np.float32(-np.inf))
    elif m.dtype.kind == "f":
        with np.errstate(over="ignore"):
            terms = m.astype(np.float32)
    else:
        raise TypeError(f"mask must have a bool or float dtype, got {m.dtype}")
    full = (*s.lead, s.hq, s.lq, s.lk)
    try:
        view = np.broadcast_to(terms, full)
    except ValueError:
        raise ValueError(f"mask of shape {m.shape} does not broadcast to {full}") from None
    four = view.reshape(s.batch, s.hq, s.lq, s.lk)  # a copy only where lead axes mix
    distinct = tuple(slice(0, 1) if st == 0 else slice(None) for st in four.strides)
    compact = np.ascontiguousarray(four[distinct])
    strides = tuple(
        0 if full_n != n else st // 4
        for full_n, n, st in zip(four.shape, compact.shape, compact.strides, strict=True)
    )
    return compact, (strides[0], strides[1], strides[2], strides[3])
