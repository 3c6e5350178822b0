"""Dequantization on the device: ``W_hat = s * (q - z)``, one float32 multiply of an exact
integer per weight (``shaders/dequantize.comp``; formulas: :mod:`vkcore.kernels.quant.rtn`).

The result array's own pages are written in place where they can be imported and fit one
binding; otherwise rows come back through a reused device buffer a binding at a time.
"""

from __future__ import annotations

import numpy as np

from vkcore import spirv
from vkcore.compute.tensor import device_for
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import can_import_host
from vkcore.device.memory.pools import host_pool
from vkcore.kernels import common as c
from vkcore.kernels import storage, variants
from vkcore.kernels.quant import launch as qg
from vkcore.kernels.quant.qlayout import BLOCK
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Loans, row_slices

# Every variant dequantize can request, with the device-dependent defines of
# variants.defines (RTE: the result is exact).
variants.register(
    "dequantize.comp",
    spirv.define_grid(VEC=[0, 1], TEXEL=[0, 1], GROUPED=[0, 1, 2], PACKED=[0, 1]),
    exact=True,
    reduces=False,
)


def dequantize(qt: QuantizedTensor, *, device: Device | None = None) -> np.ndarray:
    """``W_hat = s * (q - z)`` as a float32 ``(m, n)`` numpy array, computed on the device.

    Each value is one float32 multiply of the exact integer ``q - z``: it equals
    :func:`vkcore.reference.dequantize` bit for bit (subnormal results aside, which a
    device may flush to 0).
    """
    if not isinstance(qt, QuantizedTensor):
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}")
    qt.check_usable()
    dev = device_for(qt.device, device, "QuantizedTensor")
    c.not_recorded(dev, "vkcore.dequantize", "it returns a numpy array computed during the call")
    m, n = qt.shape
    y_rows = storage.rows_per_buffer(dev, 4 * n, "one row of the result of dequantize(qt)")
    out, direct = _result(dev, m, n)
    texel = all(c.texel_format(dev, ch.buffer, "rgba32ui") for ch in qt.chunks)
    formats = {0: "rgba32ui"} if texel else None
    prog = qg.layout_program(dev, "dequantize.comp", int(n % 4 == 0), formats, qt.layout)
    blocks = qt.row_bytes // BLOCK
    signed, stride = int(qt.symmetric), qt.groups if qt.per_channel else 0
    # Not in place: a reused device buffer (fresh pages would fault inside the kernel).
    with Loans(dev) as loans:
        ybuf = direct if direct is not None else loans.take(min(m, y_rows) * n * 4)
        per_chunk = qt.group_buffers(loans.take)
        for ch, (scale_buf, zero_buf, group0) in zip(qt.chunks, per_chunk, strict=True):
            for start, rows in row_slices(ch.rows, y_rows):
                steps = []
                for first, count in row_slices(rows, c.grid_rows(dev) * qg.quant_rows(dev)):
                    row = ch.row0 + start + first
                    y_row = row if direct is not None else first  # row in ybuf
                    push = c.pack_u32(n, blocks, count, start + first, row - group0, y_row)
                    push += c.pack_u32(stride, signed, qt.group_cols, qt.groups - 1)
                    groups = qg.grid(dev, blocks, count)
                    buffers = (ch.buffer, scale_buf, zero_buf, ybuf)
                    steps.append(prog.record(*buffers, groups=groups, push=push))
                dev.run(steps)
                if direct is None:
                    ybuf.read(out[ch.row0 + start : ch.row0 + start + rows])
    return out


def _result(dev: Device, m: int, n: int) -> tuple[np.ndarray, Buffer | None]:
    """The ``(m, n)`` float32 result, and the imported buffer of its own pages where the
    kernel can write it in place: the whole result, rounded up to whole pages, fits one
    binding (else None: rows come back through a device buffer and a copy)."""
    results = host_pool(dev)
    fits = results.slot_bytes(4 * m * n) <= storage.binding_limit(dev)
    if fits and 4 * m * n >= c.POOLED_RESULT_BYTES and can_import_host(dev):
        return results.empty((m, n), np.float32, imported=True)
    return c.result_array(dev, (m, n)), None
