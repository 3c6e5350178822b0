"""One token per row drawn on the device: :func:`sample`.

The draw is the Gumbel-max trick: token = argmax over the allowed tokens i of
``z_i + G_i`` with ``z = logits * float32(1 / temperature)`` and ``G_i = -log(-log(u_i))``,
which is distributed exactly as softmax(z) restricted to the allowed tokens (up to the
23-bit resolution of u). ``u_i`` comes from a counter-based generator, Philox4x32-10
(``shaders/philox.glsl``): the first word w of philox4x32((i, row, 0, 0), (seed mod
2^32, seed >> 32)) gives u = ((w >> 9) + 0.5) / 2^23. :func:`vkcore.reference.sample`
computes the same draws in numpy.

Allowed tokens: all of them; with ``top_k`` the first k in top-k's rank order of the logits
(ties to the lower index); with ``top_p`` then the nucleus of those: the fewest first ones
whose probabilities (softmax of z over the top-k set) sum to at least top_p. Temperature
0, or top_k=1, is the argmax (the lowest index among equal maxima).

A row with a NaN or +inf logit, or without any finite logit, has no distribution: a
ValueError naming the row. ``seed=None`` takes a fresh seed from ``os.urandom`` per call.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore import spirv
from vkcore.compute.tensor import Tensor, device_for
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.device.submit.commands import Dispatch
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage
from vkcore.kernels.sampling import topk

spirv.register_variants(
    "sample.comp",
    [*spirv.define_grid(ROW=[1], STAGE=[0, 1, 2]), {"ROW": 0, "STAGE": 0}],
)

# Elements one invocation draws for in one pass (llvmpipe's 65,535 loop steps in all).
MAX_STEPS_PER_PASS = 16384
MIN_CHUNK_ELEMENTS = 8192
GPU_WORKGROUP = 256
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_CODES = {1: "has a NaN or +inf logit", 2: "has no finite logit (every logit is -inf)"}


def sample(
    logits: Any,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    device: Device | None = None,
) -> Any:
    """One token per row of ``logits`` (last axis: the vocabulary), int64 of shape
    ``logits.shape[:-1]`` (a numpy int64 scalar for 1-D logits; numpy also for a Tensor,
    whose draws stay on the device until the tokens are read). See the module docstring."""
    data = c.numeric_input(logits, "logits")
    if len(data.shape) == 0:
        raise ValueError("logits must have at least one dimension, got a 0-d array")
    n = data.shape[-1]
    if n == 0:
        raise ValueError("logits must have at least one token on its last axis, got 0")
    inv_t, greedy = _check_temperature(temperature)
    k = None if top_k is None else topk.check_count(top_k, "top_k", n)
    p = _check_top_p(top_p)
    draw_seed = _check_seed(seed)
    rows = math.prod(data.shape[:-1])
    out_shape = data.shape[:-1]
    if rows == 0:
        return np.empty(out_shape, dtype=np.int64)
    greedy = greedy or k == 1
    use_top_p = p is not None and p < 1.0 and not greedy
    count = k if k is not None and k < n else (n if use_top_p else None)
    push = _Push(draw_seed, inv_t, greedy, use_top_p, p or 1.0)
    dev = device_for(data.device if isinstance(data, Tensor) else None, device)
    if c.recording(dev):  # inside vkcore.sequence: the draws stay on the device
        return _recorded(c.as_recorded(data, dev), rows, n, count, push, out_shape)
    if isinstance(data, Tensor):
        storage.check_binding_size(data.device, data.nbytes, "logits")
        assert data.buffer is not None
        tokens = _draw(data.device, data.buffer, rows, n, count, push)
    else:
        dev = resolve(device)
        flat = c.as_float32(data).reshape(rows, n)
        storage.check_binding_size(dev, flat.nbytes, "logits")
        pool = buffer_pool(dev)
        x = pool.acquire(flat.nbytes)
        try:
            x.write(flat)
            tokens = _draw(dev, x, rows, n, count, push)
        finally:
            pool.release(x)
    return _checked(tokens, out_shape)


# ------------------------------------------------------------------ argument checks
def _real(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _check_temperature(temperature: Any) -> tuple[float, bool]:
    """float32(1 / temperature) and whether it is 0 (greedy)."""
    t = _real(temperature, "temperature")
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {t}")
    if t == 0:
        return 0.0, True
    if 1.0 / t > _FLOAT32_MAX:
        raise ValueError(
            f"temperature must be 0 or at least {1 / _FLOAT32_MAX:.3g} (1 / temperature is "
            f"a float32), got {t}"
        )
    return float(np.float32(1.0 / t)), False


def _check_top_p(top_p: Any) -> float | None:
    if top_p is None:
        return None
    p = _real(top_p, "top_p")
    if not 0.0 < p <= 1.0:  # NaN fails too
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    return p


def _check_seed(seed: Any) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(8), "little")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    if not 0 <= seed < 1 << 64:
        raise ValueError(f"seed must be in [0, 2**64), got {shown(seed)}")
    return int(seed)


# ------------------------------------------------------------------ device steps
@dataclass(frozen=True)
class _Push:
    """The push constants that do not depend on the layout."""

    seed: int
    inv_t: float
    greedy: bool
    use_top_p: bool
    p: float

    def pack(self, n: int, row_offset: int, chunk: int = 0, nchunks: int = 1) -> bytes:
        seed_lo, seed_hi = self.seed & 0xFFFFFFFF, self.seed >> 32
        words = (n, row_offset, chunk, nchunks, seed_lo, seed_hi, self.greedy, self.use_top_p)
        return struct.pack("<8I2f", *(int(w) for w in words), self.inv_t, self.p)


def _workgroup(device: Device) -> int:
    info = device.info
    if info.is_cpu:
        return max(1, info.subgroup_size or 8)
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    return max(1, min(GPU_WORKGROUP, limit))


class Tokens:
    """Tokens drawn inside a :func:`vkcore.sequence`: ``numpy()`` after the sequence ran
    reads them (int64 of ``shape``), and a row without a distribution is a ValueError
    then, as it is at once outside a sequence."""

    def __init__(self, draws: Tensor, shape: tuple[int, ...]) -> None:
        self.draws = draws  # (rows, 2) uint32: each row's token and code
        self.shape = shape

    def numpy(self) -> Any:
        return _checked(self.draws.numpy(), self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self.numpy())
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"vkcore.kernels.sampling.sample.Tokens(shape={self.shape})"


def _recorded(
    data: Tensor, rows: int, n: int, count: int | None, push: _Push, shape: tuple[int, ...]
) -> Tokens:
    storage.check_binding_size(data.device, data.nbytes, "logits")
    assert data.buffer is not None
    draws = Tensor.empty((rows, 2), np.uint32, data.device)
    assert draws.buffer is not None
    _run_draw(data.device, data.buffer, rows, n, count, push, draws.buffer)
    return Tokens(draws, shape)


def _draw(dev: Device, x: Buffer, rows: int, n: int, count: int | None, push: _Push) -> np.ndarray:
    """(rows, 2) uint32: each row's token and code; over the first ``count`` candidates
    in rank order, or over the whole rows when ``count`` is None."""
    pool = buffer_pool(dev)
    tokens = pool.acquire(rows * 8)
    try:
        _run_draw(dev, x, rows, n, count, push, tokens)
        out = np.empty((rows, 2), dtype=np.uint32)
        tokens.read(out)
        return out
    finally:
        pool.release(tokens)


def _run_draw(
    dev: Device, x: Buffer, rows: int, n: int, count: int | None, push: _Push, tokens: Buffer
) -> None:
    """Submit (or, inside a sequence, record) the draws into ``tokens``."""
    pool = buffer_pool(dev)
    borrowed: list[Buffer] = []
    try:
        if count is None:
            steps = _row_steps(dev, x, rows, n, tokens, push, pool, borrowed)
        else:
            steps = _candidate_steps(dev, x, rows, n, count, tokens, push, pool, borrowed)
        dev.run(steps)
    finally:
        for buf in borrowed:
            pool.release(buf)


def _by_rows(dev: Device, rows: int) -> list[tuple[int, int]]:
    per = int(dev.info.max_compute_work_group_count[1])
    return [(first, min(per, rows - first)) for first in range(0, rows, per)]


def _row_steps(
    dev: Device,
    x: Buffer,
    rows: int,
    n: int,
    tokens: Buffer,
    push: _Push,
    pool: Any,
    borrowed: list[Buffer],
) -> list[Dispatch]:
    """Gumbel-max over whole rows: one workgroup per row, or chunks merged per row."""
    wg = _workgroup(dev)
    chunk, nchunks = c.row_chunks(dev, rows, n, wg, MIN_CHUNK_ELEMENTS, MAX_STEPS_PER_PASS)
    parts = c.dummy_buffer(dev)
    if nchunks > 1:
        parts = pool.acquire(rows * nchunks * 16)
        borrowed.append(parts)
    dummy = c.dummy_buffer(dev)
    steps = []
    for stage in [0] if nchunks == 1 else [1, 2]:
        prog = programs.program(dev, "sample.comp", {"ROW": 1, "STAGE": stage}, workgroup=wg)
        gx = nchunks if stage == 1 else 1
        for first, count in _by_rows(dev, rows):
            data = push.pack(n, first, chunk, nchunks)
            steps.append(
                prog.record(x, dummy, dummy, parts, tokens, groups=(gx, count, 1), push=data)
            )
    return steps


def _candidate_steps(
    dev: Device,
    x: Buffer,
    rows: int,
    n: int,
    count: int,
    tokens: Buffer,
    push: _Push,
    pool: Any,
    borrowed: list[Buffer],
) -> list[Dispatch]:
    """The first ``count`` candidates of each row in rank order (topk, run now), then the
    draw over them (returned as the step to submit)."""
    storage.check_binding_size(dev, rows * count * 8, "the top-k candidates of logits")
    values, indices = pool.acquire(rows * count * 4), pool.acquire(rows * count * 8)
    status = pool.acquire(rows * 16)
    borrowed += [values, indices, status]
    topk.run(dev, x, rows, n, count, values, indices, status, fused=False)
    # Each invocation sums, scans and draws over count / wg candidates: within llvmpipe's
    # loop budget for any count up to a binding.
    info = dev.info
    wg = _workgroup(dev)
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    while wg < limit and 3 * c.ceil_div(count, wg) + wg > 3 * MAX_STEPS_PER_PASS:
        wg *= 2
    wg = min(wg, limit)
    prog = programs.program(dev, "sample.comp", {"ROW": 0, "STAGE": 0}, workgroup=wg)
    dummy = c.dummy_buffer(dev)
    return [
        prog.record(
            values,
            indices,
            status,
            dummy,
            tokens,
            groups=(1, rows_n, 1),
            push=push.pack(count, first),
        )
        for first, rows_n in _by_rows(dev, rows)
    ]


def _checked(tokens: np.ndarray, shape: tuple[int, ...]) -> Any:
    """The tokens as int64 of ``shape``; a ValueError for the first row without a draw."""
    codes = tokens[:, 1]
    bad = np.flatnonzero(codes)
    if bad.size:
        row = int(bad[0])
        name = "logits"  # 1-D logits: one row
        if len(shape) == 1:
            name = f"logits row {row}"
        elif shape:
            name = f"logits row {tuple(int(i) for i in np.unravel_index(row, shape))}"
        reason = _CODES.get(int(codes[row]), "has no draw")
        raise ValueError(f"{name} {reason}: no distribution to sample")
    out = tokens[:, 0].astype(np.int64).reshape(shape)
    return out[()] if not shape else out
