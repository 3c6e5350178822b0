"""float32 weights on the device: the baseline that the quantized matvec is measured against."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor, device_for
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.quant.qlayout import BLOCK
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Chunk, ScratchOwner, row_slices


class F32Matrix(ScratchOwner):
    """float32 weights resident on the device, in the same padded row layout as
    :class:`QuantizedTensor` (rows padded to 16 floats, split by rows across buffers)."""

    def __init__(self, w: Any, device: Device | None = None) -> None:
        dev = device_for(w.device if isinstance(w, Tensor) else None, device)
        data = c.float_input(w, "w")
        arr = data.numpy() if isinstance(data, Tensor) else data
        if arr.ndim != 2 or 0 in arr.shape:
            raise ValueError(f"w must be a non-empty 2-D matrix, got shape {arr.shape}")
        m, n = arr.shape
        self.device = dev
        self.shape = (m, n)
        self.row_floats = c.ceil_div(n, BLOCK) * BLOCK
        what = "one row of w (padded float32)"
        per_buffer = storage.rows_per_buffer(dev, 4 * self.row_floats, what)
        self.scratch: dict[str, Buffer] = {}
        self.chunks: list[Chunk] = []
        padded = np.zeros((min(m, per_buffer), self.row_floats), dtype=np.float32)
        try:
            for row0, rows in row_slices(m, per_buffer):
                with np.errstate(over="ignore"):  # float64 beyond float32: infinities
                    padded[:rows, :n] = arr[row0 : row0 + rows]
                buf = Buffer(dev, rows * self.row_floats * 4)
                self.chunks.append(Chunk(row0, rows, buf))
                buf.write(padded[:rows])
        except BaseException:  # no half-uploaded matrix: its memory goes now, not at GC
            self.release()
            raise

    def __repr__(self) -> str:
        return f"vkcore.F32Matrix(shape={self.shape})"


@contextmanager
def f32_weights(w: Any, device: Device | None) -> Iterator[F32Matrix]:
    """The F32Matrix of a ``matvec_f32`` call: ``w`` itself, or ``w`` (a 2-D float array)
    uploaded for the call and released after it."""
    if isinstance(w, QuantizedTensor):
        raise TypeError(
            "matvec_f32 takes float weights (a 2-D float array or a vkcore.F32Matrix), "
            "got a QuantizedTensor; use vkcore.matvec(qt, x) for quantized weights"
        )
    if isinstance(w, F32Matrix):
        device_for(w.device, device, "F32Matrix")
        yield w
        return
    mat = F32Matrix(w, device)
    try:
        yield mat
    finally:
        mat.release()
