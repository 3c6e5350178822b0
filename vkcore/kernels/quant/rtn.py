"""Round-to-nearest (RTN) quantization and dequantization of 2-D weight matrices.

Formulas (identical in :func:`vkcore.reference.quantize`, which tests compare bit for bit):

* integer range: symmetric ``[-(2^(b-1)-1), 2^(b-1)-1]`` stored as int8 (never -128 at
  8 bits); asymmetric ``[0, 2^b-1]`` stored as uint8; ``b`` in 2..8, one value per byte,
  two per byte for ``b <= 4`` (layout: :mod:`vkcore.kernels.quant.qlayout`).
* symmetric scale: ``s = float32(max|W| / (2^(b-1)-1))``, ``z = 0``.
* asymmetric: the range is widened to contain 0 (so 0.0 is exactly representable):
  ``lo = min(W, 0)``, ``hi = max(W, 0)``, ``s = float32((hi - lo) / (2^b-1))``,
  ``z = roundEven(-lo / s)``.
* ``q = clamp(roundEven(W / s) + z, qmin, qmax)``, where ``W / s`` is the exact real
  quotient and ties go to the even integer. The device decides each rounding with exact
  float32 operations only (Vulkan's division is not correctly rounded), so every
  conformant device gives the same integers.
* where scales are computed: on the host from the row (or group) maxima and minima
  (float64, one rounding to float32), except for symmetric per-channel quantization of rows of a
  multiple of 4 floats, where one kernel finds each row's max|W| and its correctly
  rounded ``max|W| / qmax`` with integer arithmetic, then quantizes the row while it is
  still in the cache (``shaders/quantize_rows.comp``; the same bits as the host, tested
  across the float32 range including subnormal scales; ``VKCORE_DEVICE_SCALES=0`` turns
  it off).
* groups: one ``(s, z)`` per output row (``per_channel=True``), one for the tensor, or
  with ``group_size = g`` one per row and group of g consecutive columns (the last group
  of a row may be shorter; its own columns decide its max and min).
* a group of only zeros gets ``s = 1, z = 0``: no NaN, and it dequantizes to exactly 0.
* subnormal weights (``|w| < 2^-126``) count as 0, since Vulkan devices may flush them.
* NaN or infinity anywhere in W is a ValueError naming the first bad ``(row, col)``.
* dequantize: ``W_hat = s * (q - z)``, a single float32 multiply of an exact integer
  (:mod:`vkcore.kernels.quant.dequantize`).

Storage: rows of ``q`` are padded to a multiple of 16 bytes with the zero point of the
row's last group, so the matvec kernel reads whole 16-byte blocks. Weights larger than
one storage-buffer binding are split by rows into several buffers.

Speed: large writable float32 weights are read in place (imported host memory, no staging
copy), through a uniform texel buffer where the device allows; each invocation quantizes
one 16-byte block (16 columns, 32 packed) in ``quant_grid.quant_rows(device)`` rows with
straight-line code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore import spirv
from vkcore.base import config
from vkcore.compute.program import Program
from vkcore.compute.tensor import Tensor, device_for
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer, imports_host_array
from vkcore.device.memory.pools import buffer_pool
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage, variants
from vkcore.kernels.quant import launch as qg
from vkcore.kernels.quant.params import (
    check_options,
    device_params,
    group_params,
    group_range,
    row_range,
    weight_array,
)
from vkcore.kernels.quant.qlayout import BLOCK, Layout, integer_range
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Chunk, row_slices

# Every variant quantize can request, with the device-dependent defines of
# variants.defines (RTE: both promise exact results; SUBGROUP: quantize_rows reduces).
variants.register(
    "quantize.comp",
    [
        {"VEC": v, "TEXEL": t, "GROUPED": g, "PACKED": p}
        for v, t in ((1, 1), (1, 0), (0, 0))
        for g in (0, 1, 2)
        for p in (0, 1)
    ],
    exact=True,
    reduces=False,
)
variants.register(
    "quantize_rows.comp", spirv.define_grid(TEXEL=[0, 1], PACKED=[0, 1]), exact=True, reduces=True
)


# --------------------------------------------------------------------------- quantize
def quantize(
    w: Any,
    *,
    bits: int = 8,
    symmetric: bool = True,
    per_channel: bool = True,
    group_size: int | None = None,
    device: Device | None = None,
) -> QuantizedTensor:
    """Quantize the 2-D float matrix ``w`` (m outputs x n inputs) by round-to-nearest.

    ``group_size=g`` gives each group of g consecutive columns of a row its own scale and
    zero point (shape ``(m, ceil(n / g))``; needs per_channel=True; ``g`` an int from 1 to
    2^31 - 1, a ``g`` of n or more is one group per row). bits <= 4 are stored
    two per byte. Returns a :class:`QuantizedTensor` whose integers live on ``device``.
    Raises TypeError/ValueError for bad arguments, non-finite weights (naming the first
    bad ``(row, col)``) or a row too long for one storage buffer. Formulas: module docstring.
    """
    group_size = check_options(bits, symmetric, per_channel, group_size)
    bits, symmetric, per_channel = int(bits), bool(symmetric), bool(per_channel)
    dev = device_for(w.device if isinstance(w, Tensor) else None, device)
    dev.check()
    arr, w32 = weight_array(w)
    m, n = w32.shape
    layout = Layout(m, n, bits, symmetric, per_channel, group_size)
    q_rows = storage.rows_per_buffer(dev, layout.row_bytes, "one row of w quantized")
    w_rows = min(q_rows, storage.rows_per_buffer(dev, 4 * n, "one row of w as float32"))

    def fill(chunks: list[Chunk]) -> tuple[np.ndarray, np.ndarray]:
        # The scales from the device are read back during the call: not inside a
        # sequence, where the host computes them (the same values) and the codes are
        # recorded.
        recorded = c.recording(dev)
        if symmetric and per_channel and not recorded and _rows_on_device(dev, w32, layout):
            return _quantize_rows(dev, arr, w32, chunks, w_rows, layout)
        if group_size is None:
            hi, lo = row_range(arr, w32)
        else:
            hi, lo = group_range(arr, w32, layout.group_cols)
        s, z = group_params(hi, lo, bits, symmetric, per_channel)
        _run_quantize(dev, w32, chunks, s, z, w_rows, layout)
        return s, z

    # Leased: a released QuantizedTensor's memory (pages already touched) serves the next
    # quantize of that size; fresh pages cost more to fault in than the kernel.
    return QuantizedTensor.build(dev, layout, fill, "one row of w quantized")


@dataclass(frozen=True)
class _QuantizeJob:
    """What every quantize dispatch of one call shares."""

    dev: Device
    layout: Layout
    params: dict[int, np.ndarray]  # per chunk (by first row): its groups' parameters

    def run_slice(self, src: Buffer, offset: int, ch: Chunk, start: int, rows: int) -> None:
        """Quantize ``rows`` rows of ``src`` (starting ``offset`` floats in) into rows
        ``start...`` of chunk ``ch``: whole stored blocks (16 columns, 32 packed) with
        vec4 loads where every row starts 16-byte aligned, the rest column by column."""
        dev, lay = self.dev, self.layout
        own = self.params[ch.row0]
        # The parameters of these rows alone: a chunk's may not fit one binding.
        mine = own[start : start + rows] if lay.per_channel else own
        pool = buffer_pool(dev)
        params = pool.acquire(max(16, mine.nbytes))
        try:
            params.write(mine)
            self._run(src, offset, ch, start, rows, params)
        finally:
            pool.release(params)

    def _run(
        self, src: Buffer, offset: int, ch: Chunk, start: int, rows: int, params: Buffer
    ) -> None:
        """The dispatches of run_slice, with ``params`` holding these rows' parameters."""
        dev, lay = self.dev, self.layout
        n = lay.n
        cols = 2 * BLOCK if lay.packed else BLOCK  # columns per stored block
        blocks = lay.row_bytes // BLOCK
        vec_blocks = n // cols if n % 4 == 0 and offset % 4 == 0 else 0
        parts = ((1, 0, vec_blocks), (0, vec_blocks, blocks - vec_blocks))
        texel = all(
            buf.nbytes >= 16 and c.texel_format(dev, buf, fmt) is not None
            for buf, fmt in ((src, "rgba32f"), (params, "rgba32ui"))
        )
        stride = lay.groups if lay.per_channel else 0
        qmin, qmax = integer_range(lay.bits, lay.symmetric)
        steps = []
        for first, count in row_slices(rows, c.grid_rows(dev)):
            row = first  # in the bound parameters, which start at row ``start``
            head = c.pack_u32(n, blocks, count, offset + first * n, start + first, row, stride)
            head += np.array([qmin, qmax], dtype="<i4").tobytes()
            for vec, block0, count_x in parts:
                if count_x:
                    prog = _quantize_program(dev, vec, texel and bool(vec), lay)
                    groups = qg.grid(dev, count_x, count)
                    push = head + c.pack_u32(block0, lay.group_cols, lay.groups - 1)
                    steps.append(prog.record(src, ch.buffer, params, groups=groups, push=push))
        dev.run(steps)


def _quantize_program(dev: Device, vec: int, texel: bool, layout: Layout) -> Program:
    """VEC 1: vec4 loads of whole aligned blocks, through a texel buffer where possible;
    VEC 0: column by column; GROUPED: parameters per column, or per block where groups
    are whole blocks (qg.grouped_variant); PACKED: two codes per byte (shaders/quantize.comp)."""
    formats = {0: "rgba32f", 2: "rgba32ui"} if texel else None
    return qg.layout_program(dev, "quantize.comp", vec, formats, layout)


def _run_quantize(
    dev: Device,
    w32: np.ndarray,
    chunks: list[Chunk],
    s: np.ndarray,
    z: np.ndarray,
    w_rows: int,
    layout: Layout,
) -> None:
    """Quantize with the scales and zero points the host computed; each chunk binds the
    parameters of its own rows (all of them may not fit one binding)."""
    params = {}
    for ch in chunks:
        part = slice(ch.row0, ch.row0 + ch.rows)
        own = device_params(s[part], z[part]) if layout.per_channel else device_params(s, z)
        params[ch.row0] = own
    if layout.per_channel:  # a slice's parameters must fit one binding too
        w_rows = min(w_rows, storage.rows_per_buffer(dev, own[:1].nbytes, "one row's parameters"))
    job = _QuantizeJob(dev, layout, params)
    _for_weight_slices(dev, w32, chunks, w_rows, job.run_slice)


SliceRunner = Callable[[Buffer, int, Chunk, int, int], None]


def _for_weight_slices(
    dev: Device, w32: np.ndarray, chunks: list[Chunk], w_rows: int, run: SliceRunner
) -> None:
    """``run(src, offset, chunk, start, rows)`` over slices of ``w32`` that fit one
    binding: the array's own pages imported where possible, else a reused staging buffer.
    Inside a sequence each slice is uploaded to a buffer of its own when recorded (the
    steps run later: no staging reused for the next slice, no pages the caller may
    change before the submission)."""
    recorded = c.recording(dev)
    import_rows = 0 if recorded else _import_rows(dev, w32, w_rows)
    pool = buffer_pool(dev)  # a reused staging buffer: no fresh pages to fault in
    staging = None
    if not import_rows and not recorded:
        staging = pool.acquire(min(w32.shape[0], w_rows) * w32.shape[1] * 4)
    try:
        for ch in chunks:
            for start, rows in row_slices(ch.rows, import_rows or w_rows):
                part = w32[ch.row0 + start : ch.row0 + start + rows]
                if recorded:
                    src = pool.acquire(part.nbytes)
                    try:
                        src.write(part)
                        run(src, 0, ch, start, rows)
                    finally:
                        pool.release(src)  # held by the sequence until it is released
                    continue
                if staging is not None:
                    staging.write(part)
                    run(staging, 0, ch, start, rows)
                    continue
                imported = HostBuffer(dev, part)  # the array's own pages: no host copy
                try:
                    run(imported, imported.offset // 4, ch, start, rows)
                finally:
                    imported.destroy()
    finally:
        if staging is not None:
            pool.release(staging)


# ------------------------------------------------- symmetric per channel: scales on device
def _rows_on_device(dev: Device, w32: np.ndarray, layout: Layout) -> bool:
    """Whether quantize_rows.comp applies: one scale per row stored one byte per code
    (no groups), rows of whole vec4s, 16-byte aligned, and
    ``VKCORE_DEVICE_SCALES`` not 0 (the host path computes the same values)."""
    if layout.group_size is not None:
        return False
    if not config.env_flag("VKCORE_DEVICE_SCALES", True):
        return False
    return w32.shape[1] % 4 == 0 and w32.ctypes.data % 16 == 0


def _row_workgroup(dev: Device) -> int:
    """One subgroup per row on a CPU device (no barrier); a GPU-sized workgroup elsewhere."""
    if dev.info.is_cpu:
        return max(1, dev.info.subgroup_size or 8)
    info = dev.info
    return min(256, info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)


def _quantize_rows(
    dev: Device, arr: np.ndarray, w32: np.ndarray, chunks: list[Chunk], w_rows: int, layout: Layout
) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel quantize with each row's max|w| and scale found on the device
    (quantize_rows.comp), in the same pass over the weights; returns (s, z)."""
    m, n = w32.shape
    pool = buffer_pool(dev)
    infos: dict[int, Buffer] = {}  # per chunk: (scale bits, non-finite flag) of its rows
    try:
        for ch in chunks:
            infos[ch.row0] = pool.acquire(max(16, 8 * ch.rows))

        def run(src: Buffer, offset: int, ch: Chunk, start: int, rows: int) -> None:
            texel = c.texel_format(dev, src, "rgba32f") is not None and src.nbytes >= 16
            prog = programs.program(
                dev,
                "quantize_rows.comp",
                {
                    "TEXEL": int(texel),
                    "PACKED": int(layout.packed),
                    **variants.defines(dev.info, exact=True, reduces=True),
                },
                workgroup=_row_workgroup(dev),
                texel={0: "rgba32f"} if texel else None,
            )
            blocks = layout.row_bytes // BLOCK
            gx = min(rows, int(dev.info.max_compute_work_group_count[0]))
            qmax = integer_range(layout.bits, True)[1]
            push = c.pack_u32(n // 4, rows, blocks, offset // 4, start, start, qmax)
            grid = (gx, c.ceil_div(rows, gx), 1)
            dev.run([prog.record(src, ch.buffer, infos[ch.row0], groups=grid, push=push)])

        _for_weight_slices(dev, w32, chunks, w_rows, run)
        rowinfo = np.empty((m, 2), dtype=np.uint32)
        for ch in chunks:
            infos[ch.row0].read(rowinfo[ch.row0 : ch.row0 + ch.rows])
    finally:
        for buf in infos.values():
            pool.release(buf)
    if rowinfo[:, 1].any():
        row_range(arr, w32)  # raises the error that names the first NaN or infinity
        rows = np.flatnonzero(rowinfo[:, 1])[:5].tolist()
        raise RuntimeError(f"the device reported a NaN or infinity in rows {rows} of w, numpy none")
    return rowinfo[:, 0].copy().view(np.float32), np.zeros(m, dtype=np.int32)


def _import_rows(dev: Device, w32: np.ndarray, w_rows: int) -> int:
    """Rows per imported slice of ``w32`` when its pages can be read in place, else 0.

    Small matrices (under HOST_SHARING_MIN_BYTES), read-only or non-contiguous arrays go
    through the staging buffer instead; each slice, rounded out to whole pages, must fit
    one storage binding.
    """
    if not imports_host_array(dev, w32):
        return 0
    if not w32.flags.c_contiguous or w32.ctypes.data % 4:
        return 0
    slack = 2 * int(dev.info.min_imported_host_pointer_alignment)
    return max(0, min(w_rows, (storage.binding_limit(dev) - slack) // (4 * w32.shape[1])))
