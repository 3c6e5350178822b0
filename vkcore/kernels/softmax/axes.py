"""Which elements form one row: ``axis`` as an int, a tuple of ints or None, for numpy input.

The softmax family normalizes over a set of axes. The kernels see a C-contiguous array of
rows (the normalized axes last, flattened); this module maps any numpy layout onto that
and back, with no copy where the axes already are the last ones and the array is
C-contiguous, and checks ``out=`` arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from vkcore.errors import shown


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int, a tuple of distinct ints, or None for every axis) as sorted
    non-negative axes of an ``ndim``-dimensional array."""
    if type(axis) is int and axis == -1 and ndim:  # the default, on every call: no checks needed
        return (ndim - 1,)
    if axis is None:
        return tuple(range(ndim))
    items = axis if isinstance(axis, tuple) else (axis,)
    out = []
    for a in items:
        if not isinstance(a, (int, np.integer)) or isinstance(a, (bool, np.bool_)):
            raise TypeError(
                f"axis must be an int, a tuple of ints or None, got {type(a).__name__}"
                + (" inside the tuple" if isinstance(axis, tuple) else "")
            )
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for an array of {ndim} dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axis must not repeat an axis, got {shown(axis)}")
    return tuple(sorted(out))


def is_trailing(axes: tuple[int, ...], ndim: int) -> bool:
    """True when ``axes`` are exactly the last ``len(axes)`` axes."""
    return axes == tuple(range(ndim - len(axes), ndim))


def as_rows(
    arr: np.ndarray, axes: tuple[int, ...]
) -> tuple[np.ndarray, tuple[int, ...], Callable[[np.ndarray], np.ndarray]]:
    """``arr`` with ``axes`` moved last and flattened into rows of shape ``(rows, n)``
    (C-contiguous float32; a copy only when the layout or dtype needs one), the shape of
    ``arr`` with those axes moved last, and a function that turns a result of that shape
    back into ``arr``'s axis order (the result itself when nothing moved, else a view)."""
    ndim = arr.ndim
    if is_trailing(axes, ndim):  # the common case: no transpose, often no copy
        split = ndim - len(axes)
        flat = _float32(arr)
        rows, n = math.prod(arr.shape[:split]), math.prod(arr.shape[split:])
        return flat.reshape(rows, n), arr.shape, _unchanged
    others = tuple(a for a in range(ndim) if a not in axes)
    perm = others + axes
    identity = perm == tuple(range(ndim))
    moved = arr if identity else arr.transpose(perm)
    n = math.prod(arr.shape[a] for a in axes)
    rows = math.prod(arr.shape[a] for a in others)
    flat = _float32(moved).reshape(rows, n)
    inverse = tuple(int(i) for i in np.argsort(perm))

    def restore(result: np.ndarray) -> np.ndarray:
        return result if identity else result.transpose(inverse)

    return flat, moved.shape, restore


def _unchanged(result: np.ndarray) -> np.ndarray:
    return result


def check_out(out: Any, shape: tuple[int, ...], name: str = "out") -> np.ndarray:
    """``out`` if it is a writable, C-contiguous float32 numpy array of ``shape``."""
    if not isinstance(out, np.ndarray):
        raise TypeError(
            f"{name} must be a numpy array or a vkcore.Tensor, got {type(out).__name__}"
        )
    if out.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {out.shape}")
    if not out.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    if not out.flags.writeable:
        raise ValueError(f"{name} must be writable")
    return out


def _float32(arr: np.ndarray) -> np.ndarray:
    """C-contiguous float32; beyond its range infinities, without numpy's overflow warning
    (the documented conversion of float64 input)."""
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float32)
