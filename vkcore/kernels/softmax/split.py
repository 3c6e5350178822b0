"""Softmax of inputs larger than one storage-buffer binding: rows in groups that fit one,
and a longer row cut into pieces whose partial (m, l) states are merged before each piece
is written (:func:`softmax_split`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.softmax.stages import cached_plan, dispatches, split_stages


def _pieces(device: Device, n: int) -> list[tuple[int, int]]:
    """[start, end) element ranges of a row of ``n``: equal pieces of at most one binding,
    whole vec4s when the row is (so every piece keeps the vec4 loads)."""
    most = max(1, storage.binding_limit(device) // 4)
    if n % 4 == 0 and most >= 4:
        most -= most % 4
    size = c.ceil_div(n, c.ceil_div(n, most))
    if n % 4 == 0 and most >= 4:
        size = c.ceil_div(size, 4) * 4
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def softmax_split(
    device: Device, rows: int, n: int, algorithm: str, load: Any, store: Any, log: bool
) -> None:
    """Softmax of ``rows`` rows of ``n`` floats too large for one binding, a binding's worth
    at a time: ``load(buf, a, b)`` puts flat elements [a, b) of x into ``buf``,
    ``store(buf, a, b)`` takes them from ``buf`` into the result.

    Rows that fit go in groups through the ordinary plan. A longer row is cut into pieces:
    every piece writes its partial (m, l) states into one array of the row's parts, then
    each piece is loaded again and written after merging all of them (the same merge as a
    row split across workgroups; the safe algorithm makes one more pass for its sums).
    """
    limit = storage.binding_limit(device)
    pool = buffer_pool(device)
    if n * 4 <= limit:
        per = max(1, limit // (n * 4))
        # The group's partial (m, l) states (16 bytes per workgroup of every row) are one
        # binding too: many short rows need fewer rows per group than their data allows.
        while per > 1 and per * cached_plan(device, per, n).nchunks * 16 > limit:
            per = max(1, per // 2)
        for r0 in range(0, rows, per):
            count = min(per, rows - r0)
            span = [(r0 * n, (r0 + count) * n)]
            _run_pieces(device, algorithm, span, count, load, store, pool, log)
        return
    pieces = _pieces(device, n)
    for row in range(rows):
        base = row * n
        spans = [(base + a, base + b) for a, b in pieces]
        _run_pieces(device, algorithm, spans, 1, load, store, pool, log)


def _run_pieces(
    device: Device,
    algorithm: str,
    spans: list[tuple[int, int]],
    rows: int,
    load: Any,
    store: Any,
    pool: Any,
    log: bool,
) -> None:
    """One group of ``rows`` whole rows (one span) or the pieces of one row (many spans)."""
    most = max(b - a for a, b in spans) * 4
    plans = [cached_plan(device, rows, (b - a) // rows) for a, b in spans]
    # One span: all stages in one submission. Pieces: each stage over every piece in turn.
    stage_lists: list[list[int] | None] = [None]
    if len(spans) > 1:
        stage_lists = [[s] for s in split_stages(algorithm)]
    nparts = sum(p.nchunks for p in plans)
    borrowed: list[Buffer] = []
    try:
        x = pool.acquire(most)
        borrowed.append(x)
        y = pool.acquire(most)
        borrowed.append(y)
        parts = pool.acquire(rows * nparts * 16)
        borrowed.append(parts)
        for k, stages in enumerate(stage_lists):
            last = k == len(stage_lists) - 1
            part0 = 0
            for (a, b), p in zip(spans, plans, strict=True):
                load(x, a, b)
                steps = dispatches(
                    device,
                    p,
                    algorithm,
                    x,
                    y,
                    parts,
                    stages=stages,
                    nparts=nparts,
                    part0=part0,
                    log=log,
                )
                device.run(steps)
                if last:
                    store(y, a, b)
                part0 += p.nchunks
    finally:
        for buf in borrowed:
            pool.release(buf)


def numpy_split(dev: Device, arr: np.ndarray, out: np.ndarray, algorithm: str, log: bool) -> None:
    """The rows ``arr`` (larger than one binding) into ``out``, a binding at a time."""
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)

    def load(buf: Buffer, a: int, b: int) -> None:
        buf.write(flat_in[a:b])

    def store(buf: Buffer, a: int, b: int) -> None:
        buf.read(flat_out[a:b])

    softmax_split(dev, arr.shape[0], arr.shape[1], algorithm, load, store, log)


def tensor_split(
    x: Tensor, rows: int, n: int, algorithm: str, log: bool, out: Tensor | None
) -> Tensor:
    """Tensor in, Tensor out for a Tensor larger than one binding: pieces are copied on the
    device into buffers of at most one binding and the results copied back (into ``out``,
    which may be ``x``: each piece is loaded for the last time before its result is stored)."""
    dev = x.device
    if c.recording(dev):  # its pieces are copied as it goes: they cannot wait for a submission
        raise ValueError(
            "x: a Tensor larger than one storage binding cannot be recorded in a sequence; "
            "call softmax on it outside the with block"
        )
    y = out if out is not None else Tensor.empty(x.shape, np.float32, dev)
    assert x.buffer is not None and y.buffer is not None
    src, dst = x.buffer, y.buffer

    def load(buf: Buffer, a: int, b: int) -> None:
        with dev.lock:
            dev.copy(src, a * 4, buf, 0, (b - a) * 4)

    def store(buf: Buffer, a: int, b: int) -> None:
        with dev.lock:
            dev.copy(buf, 0, dst, a * 4, (b - a) * 4)

    softmax_split(dev, rows, n, algorithm, load, store, log)
    return y
