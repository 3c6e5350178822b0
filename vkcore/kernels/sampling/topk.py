"""Top-k and the fused softmax + top-k on the device.

Semantics, shared with :mod:`vkcore.reference.topk`:

* rank order: descending, ties to the lower index, ``-inf`` after every finite value,
  NaN last (after ``-inf``), ``-0.0`` equal to ``+0.0``: numpy's
  ``np.argsort(-x, kind="stable")`` on float32 values;
* computed in float32: float16/float64 and integer input is converted first (integers
  beyond 2^24 in magnitude round, and float64 values that round to the same float32 tie);
* ``values`` are float32, ``indices`` int64, both of ``x``'s shape with ``axis`` of
  length k; numpy in, numpy out; a :class:`Tensor` in (top-k over its last axis), Tensors
  out (the indices Tensor has dtype int64);
* :func:`softmax_topk` gives the probabilities softmax(x) of those k entries, normalized
  over the whole row (``vkcore.softmax``'s rules: a NaN or +inf in a row makes its
  probabilities NaN, ``-inf`` entries have probability 0), within 1e-6 of a float64
  reference.

For k up to :func:`topk_steps.select_k_max` (512 on a CPU device, 128 on a GPU) one
kernel keeps running top-k lists (and, fused, the running maximum and sum) per
invocation, merged per workgroup and across the workgroups of a split row. On a GPU it
reads each element once; on a CPU device it reads each chunk twice
(``topk_steps.uses_floor_pass``): a first pass takes the statistics and a key floor that
at least k elements reach, the second, from cache, lists only the elements at or above
it (for k up to 16 per invocation). Larger k sort each row (bitonic, on the device); the
fused form then reads the row once more for its statistics.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from vkcore.compute.repeat import SMALL_CALL_BYTES, Repeat, Repeats
from vkcore.compute.tensor import Tensor, device_for
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.sampling import topk_steps


def topk(x: Any, k: int, axis: int = -1, *, device: Device | None = None) -> tuple[Any, Any]:
    """The k largest entries of ``x`` along ``axis`` in rank order and their indices:
    ``(values, indices)``. See the module docstring for the rules."""
    return _topk(x, k, axis, device, fused=False)


def softmax_topk(
    x: Any, k: int, axis: int = -1, *, device: Device | None = None
) -> tuple[Any, Any]:
    """``(probs, indices)``: the softmax probabilities (over the whole row) of the k
    largest logits along ``axis`` and their indices, reading the logits once."""
    return _topk(x, k, axis, device, fused=True)


# ------------------------------------------------------------------ argument checks
def check_count(value: Any, name: str, n: int) -> int:
    """``value`` as an int in 1..n (bools are not ints)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if n == 0:
        raise ValueError(f"{name}={shown(value)} needs a non-empty axis, but its length is 0")
    if not 1 <= value <= n:
        raise ValueError(f"{name} must be in 1..{n} (the axis length), got {shown(value)}")
    return int(value)


def check_axis(axis: Any, ndim: int) -> int:
    """``axis`` as a non-negative int below ``ndim``."""
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimensions")
    return operator.index(axis) % ndim


# ------------------------------------------------------------------ calls
# Small numpy calls kept for an exact repeat (vkcore.compute.repeat), by signature.
_repeats = Repeats()


def _repeated(
    x: Any, k: Any, axis: Any, device: Device | None, fused: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """The result of a numpy call that repeats a kept one (the full call's), else None:
    a C-contiguous float32 ``x`` of a kept call's shape, the same int ``k`` and ``axis``
    (the last), under the same per-call context."""
    if not c.plain_f32(x) or type(k) is not int or type(axis) is not int:
        return None
    repeat = c.found(_repeats.get(resolve(device), (x.shape, k, axis, fused)))
    if repeat is None:
        return None
    shape = (*x.shape[:-1], k)
    values = np.empty(shape, np.float32)
    indices = np.empty(shape, np.int64)
    return (values, indices) if repeat.run((x, values, indices)) else None


def _topk(x: Any, k: Any, axis: Any, device: Device | None, *, fused: bool) -> tuple[Any, Any]:
    repeated = _repeated(x, k, axis, device, fused)
    if repeated is not None:
        return repeated
    data = c.row_input(x, "x", device)  # inside a sequence: a Tensor
    ndim = len(data.shape)
    ax = check_axis(axis, ndim)
    n = data.shape[ax]
    kk = check_count(k, "k", n)
    if isinstance(data, Tensor):
        device_for(data.device, device)
        if ax != ndim - 1:
            raise ValueError(f"a Tensor's top-k is over its last axis (axis=-1), got axis={axis}")
        return _topk_tensor(data, kk, fused)
    dev = resolve(device)
    rows = c.as_float32(np.moveaxis(data, ax, -1))
    shape = (*rows.shape[:-1], kk)
    flat = rows.reshape(-1, n)
    values = np.empty((flat.shape[0], kk), dtype=np.float32)
    indices = np.empty((flat.shape[0], kk), dtype=np.int64)
    # Kept for a repeat when the rows are the array itself (no conversion, no move).
    plain = c.plain_f32(x) and ax == ndim - 1 and type(k) is int
    keep = (x.shape, k, axis, fused) if plain else None
    if flat.shape[0]:
        _topk_numpy(dev, flat, kk, fused, values, indices, keep)
    out_v = np.moveaxis(values.reshape(shape), -1, ax)
    out_i = np.moveaxis(indices.reshape(shape), -1, ax)
    return np.ascontiguousarray(out_v), np.ascontiguousarray(out_i)


def _topk_numpy(
    dev: Device,
    flat: np.ndarray,
    k: int,
    fused: bool,
    values: np.ndarray,
    indices: np.ndarray,
    keep: Any = None,
) -> None:
    """Rows of ``flat`` a binding's worth at a time (results into values, indices); a
    small call of one part, made in one submission, is kept under ``keep`` (a signature)
    for an exact repeat, with the buffers it used."""
    rows, n = flat.shape
    limit = storage.binding_limit(dev)
    if n * 8 * max(1, k // n) > limit or n * 4 > limit:
        raise ValueError(f"a row of {n} floats is larger than one storage buffer binding")
    per = max(1, limit // (n * 8))  # x, and the int64 indices of up to n results
    pool = buffer_pool(dev)
    for r0 in range(0, rows, per):
        part = flat[r0 : r0 + per]
        count = part.shape[0]
        borrowed = [pool.acquire(part.nbytes), pool.acquire(count * k * 4)]
        borrowed.append(pool.acquire(count * k * 8))
        kept: list[Any] | None = [] if keep is not None and count == rows else None
        try:
            x, v, i = borrowed
            x.write(part)
            run(dev, x, count, n, k, v, i, None, fused=fused, kept=kept)
            v.read(values[r0 : r0 + count])
            i.read(indices[r0 : r0 + count])
            if kept and flat.nbytes <= SMALL_CALL_BYTES:
                recorded, scratch = kept
                owned = [*borrowed, *scratch]
                outs = [(1, v), (2, i)]
                repeat = Repeat(dev, recorded, [(0, x)], outs, owned=owned)
                borrowed = []  # the repeat's now, given back with it
                _repeats.put(dev, keep, c.stamped(repeat))
            elif kept:
                borrowed += kept[1]
        finally:
            for buf in borrowed:
                pool.release(buf)


def _topk_tensor(x: Tensor, k: int, fused: bool) -> tuple[Tensor, Tensor]:
    dev = x.device
    n = x.shape[-1]
    rows = x.size // n
    shape = (*x.shape[:-1], k)
    pool = buffer_pool(dev)
    if rows == 0:
        return Tensor(None, shape, np.dtype(np.float32), dev), Tensor(
            None, shape, np.dtype(np.int64), dev
        )
    storage.check_binding_size(dev, x.nbytes, "x")
    storage.check_binding_size(dev, rows * k * 8, "the indices of x")
    values = Tensor(pool.lease(rows * k * 4), shape, np.dtype(np.float32), dev)
    indices = Tensor(pool.lease(rows * k * 8), shape, np.dtype(np.int64), dev)
    assert x.buffer is not None and values.buffer is not None and indices.buffer is not None
    run(dev, x.buffer, rows, n, k, values.buffer, indices.buffer, None, fused=fused)
    return values, indices


def run(
    dev: Device,
    x: Buffer,
    rows: int,
    n: int,
    k: int,
    values: Buffer,
    indices: Buffer,
    status: Buffer | None,
    *,
    fused: bool,
    kept: list[Any] | None = None,
) -> None:
    """Top-k of ``rows`` rows of ``n`` floats in ``x`` into ``values`` and ``indices``
    (device buffers); with ``status`` (rows x 4 words) each row's NaN/+inf flag too.

    With ``kept`` (a list), a call made in one submission whose recording the device kept
    appends that recording and the scratch buffers it binds, which the caller then owns."""
    pool = buffer_pool(dev)
    plan = topk_steps.select_plan(dev, rows, n, k)
    borrowed: list[Buffer] = []
    try:
        if plan is not None:
            parts = _scratch(dev, pool, plan.part_words * 4, borrowed)
            state = status if status is not None else c.dummy_buffer(dev)
            steps = topk_steps.select_steps(
                dev,
                plan,
                x,
                values,
                indices,
                parts,
                state,
                fused=fused,
                want_status=status is not None,
            )
            recorded = dev.run(steps)
            if kept is not None and recorded is not None:
                kept += [recorded, borrowed]
                borrowed = []
            return
        stats = status
        if fused and stats is None:  # the row statistics the fused output reads
            stats = _scratch(dev, pool, rows * 16, borrowed)
        if fused:
            assert stats is not None
            _row_statistics(dev, pool, x, rows, n, stats, borrowed)
        _sort(dev, pool, x, rows, n, k, values, indices, stats, fused, borrowed)
    finally:
        for buf in borrowed:
            pool.release(buf)


def _scratch(dev: Device, pool: Any, nbytes: int, borrowed: list[Buffer]) -> Buffer:
    """A pool buffer of ``nbytes`` (the dummy buffer for none), given back after the call."""
    if nbytes == 0:
        return c.dummy_buffer(dev)
    buf = pool.acquire(nbytes)
    borrowed.append(buf)
    return buf


def _row_statistics(
    dev: Device, pool: Any, x: Buffer, rows: int, n: int, status: Buffer, borrowed: list[Buffer]
) -> None:
    """Each row's softmax (bad, maximum, sum) into ``status``: the fused select kernel
    with k = 1 (its single result is thrown away)."""
    plan = topk_steps.select_plan(dev, rows, n, 1)
    assert plan is not None
    parts = _scratch(dev, pool, plan.part_words * 4, borrowed)
    top_v = _scratch(dev, pool, rows * 4, borrowed)
    top_i = _scratch(dev, pool, rows * 8, borrowed)
    steps = topk_steps.select_steps(
        dev, plan, x, top_v, top_i, parts, status, fused=True, want_status=True
    )
    dev.run(steps)


def _sort(
    dev: Device,
    pool: Any,
    x: Buffer,
    rows: int,
    n: int,
    k: int,
    values: Buffer,
    indices: Buffer,
    status: Buffer | None,
    fused: bool,
    borrowed: list[Buffer],
) -> None:
    """The sort path, a group of rows (as many as one binding of pairs holds) at a time."""
    plan = topk_steps.sort_plan(dev, rows, n, k)
    pairs = _scratch(dev, pool, plan.pair_bytes(plan.rows_per_group), borrowed)
    state = status if status is not None else c.dummy_buffer(dev)
    for first in range(0, rows, plan.rows_per_group):
        count = min(plan.rows_per_group, rows - first)
        steps = topk_steps.sort_steps(
            dev,
            plan,
            first,
            count,
            x,
            values,
            indices,
            pairs,
            state,
            fused=fused,
            want_status=status is not None and not fused,
        )
        dev.run(steps)
