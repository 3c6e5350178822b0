"""The dispatches every matvec path records: the product's program with its activation
bindings (after the dispatch that quantizes x, in the integer modes), and the row sums
``V_ig`` the uint8 mode subtracts."""

from __future__ import annotations

from vkcore.compute.program import Program
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels.matvec import activation as act
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec import program as mp
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.quant.qlayout import BLOCK
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Chunk


def kernel(
    mat: QuantizedTensor | F32Matrix, mode: int, xbuf: Buffer, steps: list[Dispatch]
) -> tuple[Program, Buffer, Buffer, int]:
    """The matvec program, its two activation bindings and the blocks per stored row;
    the integer modes append the step that quantizes x."""
    if isinstance(mat, F32Matrix):
        prog = mp.program(mat.device, mp.MODE_F32, True, False, mp.texel(mat, mp.MODE_F32, xbuf))
        return prog, xbuf, xbuf, mat.row_floats // BLOCK
    qx, qx_vec = xbuf, xbuf
    if mode in (mp.MODES["int8"], mp.MODES["uint8"]):
        qx = act.quantize_vector(mat, xbuf, mode, steps)
        qx_vec = c.dummy_buffer(mat.device)
    texel = mp.texel(mat, mode, qx)
    layout = mp.variant_layout(mat, mode)
    prog = mp.program(mat.device, mode, mat.symmetric, not mat.symmetric, texel, layout)
    return prog, qx, qx_vec, mat.row_bytes // BLOCK


def push(
    mat: QuantizedTensor | F32Matrix,
    blocks: int,
    rows: int,
    row0: int,
    prow0: int,
    start: int,
    flags: tuple[int, int],
) -> bytes:
    """Push constants of the product (and of the row sums: flags (0, 0)) over ``rows`` rows
    of a chunk from its row ``start`` (the grouped kernel only; the per-channel one takes
    whole chunks): y from row ``row0``, parameters from row ``prow0``; flags (bias, acc)."""
    if isinstance(mat, QuantizedTensor) and mg.grouped(mat):
        wg = mp.workgroup_size(mat.device)
        return c.pack_u32(*mg.push_words(mat, wg, rows, row0, prow0, start, flags))
    per_channel = int(getattr(mat, "per_channel", False))
    return c.pack_u32(blocks, mat.shape[1], rows, row0, per_channel, *flags)


def rowsum_step(
    qt: QuantizedTensor,
    ch: Chunk,
    scale: Buffer,
    zero: Buffer,
    out: Buffer,
    row0: int,
    start: int,
    rows: int,
    prow0: int,
) -> Dispatch:
    """The dispatch that writes the row sums of ``rows`` rows of chunk ``ch`` from its row
    ``start`` into ``out`` from row ``row0``, their parameters from row ``prow0`` of the
    bound buffers (the per-channel kernel: start = 0, rows = the chunk, prow0 = row0)."""
    dev = qt.device
    layout = (int(mg.grouped(qt)), int(getattr(qt, "packed", False)), 0)
    texel = mp.texel(qt, mp.MODE_ROWSUM, None)
    prog = mp.program(dev, mp.MODE_ROWSUM, qt.symmetric, not qt.symmetric, texel, layout)
    words = push(qt, qt.row_bytes // BLOCK, rows, row0, prow0, start, (0, 0))
    dummy = c.dummy_buffer(dev)
    buffers = (ch.buffer, scale, zero, out, dummy, dummy, dummy, dummy)
    grid = mp.grid(dev, rows, mp.MODE_ROWSUM)
    return prog.record(*buffers, groups=grid, push=words)
