"""The vector matvec for weights whose per-row vectors exceed one binding: each piece of
rows binds its own slices of y, bias, scales, zero points and row sums."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor, asarray
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec import program as mp
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.matvec.steps import kernel, push, rowsum_step
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Chunk, Loans, row_slices


def matvec_by_chunks(
    mat: QuantizedTensor | F32Matrix,
    mode: int,
    xbuf: Buffer,
    xv: np.ndarray | Tensor,
    bv: np.ndarray | Tensor | None,
    out_acc: bool,
) -> Any:
    """Rows too many for one binding of their per-row vectors (y, bias, scales, zero
    points, row sums: G values a row with groups): every piece of rows binds its own
    slices, taken from the buffer pool for this call (row sums are recomputed here, so
    nothing is kept between calls). Pieces are the weight chunks, cut further where a
    chunk's rows of G parameters exceed one binding (grouped kernel only)."""
    dev = mat.device
    dummy = c.dummy_buffer(dev)
    bias = bv.numpy() if isinstance(bv, Tensor) else bv
    groups = mg.groups(mat) if isinstance(mat, QuantizedTensor) else 1
    per = groups if out_acc else 1
    flags = (int(bias is not None), int(out_acc))
    with Loans(dev) as loans:
        steps: list[Dispatch] = []
        prog, act, act_vec, blocks = kernel(mat, mode, xbuf, steps)
        params = _param_arrays(mat) if isinstance(mat, QuantizedTensor) else None
        ys = []
        for ch, start, rows in _pieces(mat, groups):
            row0 = ch.row0 + start
            scale = zero = rowsum = bbuf = dummy
            if params is not None:
                scale, zero = (
                    loans.holding(p[row0 : row0 + rows] if p.ndim else p) for p in params
                )
            if isinstance(mat, QuantizedTensor) and mode == mp.MODES["uint8"]:
                rowsum = loans.take(4 * rows * groups)
                steps.append(rowsum_step(mat, ch, scale, zero, rowsum, 0, start, rows, 0))
            if bias is not None:
                bbuf = loans.holding(c.as_float32(bias[row0 : row0 + rows]))
            ys.append((row0, rows, loans.take(4 * rows * per)))
            words = push(mat, blocks, rows, 0, 0, start, flags)
            buffers = (ch.buffer, scale, zero, rowsum, act, act_vec, bbuf, ys[-1][2])
            grid = mp.grid(dev, rows, mp.pipe_mode(mat, mode))
            steps.append(prog.record(*buffers, groups=grid, push=words))
        dev.run(steps)
        out = np.empty(mat.shape[0] * per, dtype=np.float32)
        for row0, rows, ybuf in ys:
            ybuf.read(out[row0 * per : (row0 + rows) * per])
    if isinstance(xv, Tensor):
        return asarray(out, device=dev)
    return out


def _pieces(mat: QuantizedTensor | F32Matrix, groups: int) -> list[tuple[Chunk, int, int]]:
    """``(chunk, first row in it, rows)``: the chunks, cut (grouped kernel only, which can
    start at any row of a chunk) so that rows x G 4-byte values fit one binding."""
    if not (isinstance(mat, QuantizedTensor) and mg.grouped(mat)):
        return [(ch, 0, ch.rows) for ch in mat.chunks]
    step = max(1, storage.binding_limit(mat.device) // (4 * groups))
    return [(ch, s, r) for ch in mat.chunks for s, r in row_slices(ch.rows, step)]


def _param_arrays(qt: QuantizedTensor) -> tuple[np.ndarray, np.ndarray]:
    """Scales (float32) and zero points (int32) as numpy, rows first; per tensor 0-d."""
    return np.asarray(qt.scale, np.float32), np.asarray(qt.zero_point, np.int32)
