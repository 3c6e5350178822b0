"""Round-to-nearest (RTN) quantization and dequantization of 2-D weight matrices.

Formulas (identical in :func:`vkcore.reference.quantize`, which tests compare bit for bit):

* integer range: symmetric ``[-(2^(b-1)-1), 2^(b-1)-1]`` stored as int8 (never -128 at
  8 bits); asymmetric ``[0, 2^b-1]`` stored as uint8; ``b`` in 2..8, one value per byte,
  two per byte for ``b <= 4`` (layout: :mod:`vkcore.kernels.qlayout`).
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
* dequantize: ``W_hat = s * (q - z)``, a single float32 multiply of an exact integer.

Storage: rows of ``q`` are padded to a multiple of 16 bytes with the zero point of the
row's last group, so the matvec kernel reads whole 16-byte blocks. Weights larger than
one storage-buffer binding are split by rows into several buffers.

Speed: large writable float32 weights are read in place (imported host memory, no staging
copy), through a uniform texel buffer where the device allows; each invocation quantizes
one 16-byte block (16 columns, 32 packed) in ``quant_rows(device)`` rows with
straight-line code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config, spirv
from ..buffer import Buffer
from ..commands import Dispatch
from ..device import Device, resolve
from ..host_buffer import HOST_SHARING_MIN_BYTES as IMPORT_MIN_BYTES
from ..host_buffer import HostBuffer, can_import_host
from ..pools import buffer_pool, host_pool
from ..tensor import Tensor
from . import _common as c
from . import variants
from .qlayout import BLOCK, Layout, check_bits, check_group_size, integer_range
from .qtensor import (  # noqa: F401  (re-exported: matvec and tests import them from here)
    Chunk,
    QuantizedTensor,
    ScratchOwner,
    free_partial,
    lease_chunks,
    row_slices,
    upload,
)

WORKGROUP = 64
# Rows per quantize/dequantize invocation (fewer workgroups; on lavapipe 4 beats 2 and 8),
# unless `vkcore tune` stored another value for the device: see quant_rows.
QUANT_ROWS = 4
_TINY = np.float32(np.finfo(np.float32).tiny)
_SMALLEST = np.float32(2.0**-149)
# Every variant these kernels can request, with the device-dependent defines of
# variants.defines (RTE: all three promise exact results; SUBGROUP: quantize_rows reduces).
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
variants.register(
    "dequantize.comp",
    spirv.define_grid(VEC=[0, 1], TEXEL=[0, 1], GROUPED=[0, 1, 2], PACKED=[0, 1]),
    exact=True,
    reduces=False,
)
_PARAMS = np.dtype([("s_norm", "<f4"), ("f1", "<f4"), ("f2", "<f4"), ("z", "<i4")])


def binding_limit(device: Device) -> int:
    """Largest buffer one storage binding may cover on ``device`` (tests lower it)."""
    return int(device.info.max_storage_buffer_range)


def vectors_fit(device: Device, m: int) -> bool:
    """Whether one binding holds ``m`` 4-byte values (y, bias, scales, zero points, row
    sums); where it does not, each row chunk binds its own slice."""
    return 4 * m <= binding_limit(device)


def rows_per_buffer(device: Device, row_bytes: int, what: str) -> int:
    """Rows of ``row_bytes`` one binding holds; a row longer than a binding (rows are
    never split by columns) is a ValueError naming ``what`` (the argument's row)."""
    limit = binding_limit(device)
    rows = limit // row_bytes
    if rows == 0:
        raise ValueError(
            f"{what} needs {row_bytes} bytes, more than this device's storage-buffer "
            f"binding limit (maxStorageBufferRange: {limit} bytes); split the matrix by columns"
        )
    return rows


def quant_rows(device: Device) -> int:
    """Rows per quantize/dequantize invocation (specialization constant 1)."""
    from .. import tune

    return int(tune.choice(device, "quant_rows") or QUANT_ROWS)


# --------------------------------------------------------------------------- arguments
def check_options(
    bits: Any, symmetric: Any, per_channel: Any, group_size: Any = None
) -> int | None:
    """Raise for a bad option (bits outside 2..8, a group_size that is not a positive int
    or comes with per_channel=False); returns group_size as an int or None."""
    check_bits(bits)
    for name, value in (("symmetric", symmetric), ("per_channel", per_channel)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    size = check_group_size(group_size)
    if size is not None and not per_channel:
        raise ValueError(
            f"group_size={size} needs per_channel=True (groups are columns of one row); "
            "per_channel=False is one scale for the whole tensor"
        )
    return size


def weight_array(w: Any) -> tuple[np.ndarray, np.ndarray]:
    """The caller's 2-D matrix (as given) and its C-contiguous float32 form, or a clear
    error; finiteness is checked by :func:`row_range` or on the device."""
    data = c.float_input(w, "w")
    arr = data.numpy() if isinstance(data, Tensor) else data
    if arr.ndim != 2:
        raise ValueError(f"w must be a 2-D matrix (outputs x inputs), got shape {arr.shape}")
    if 0 in arr.shape:
        raise ValueError(f"w must not be empty, got shape {arr.shape}")
    with np.errstate(over="ignore"):  # float64 beyond float32 becomes inf, reported later
        w32 = c.as_float32(arr)
    return arr, w32


def row_range(arr: np.ndarray, w32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima and minima of ``w32``, or a ValueError naming its first NaN or infinity.

    They are NaN or infinite exactly when the row holds such a value; group_params needs
    them anyway, so the full element-wise scan runs only on failure.
    """
    row_max, row_min = w32.max(axis=1), w32.min(axis=1)
    if not (np.isfinite(row_max).all() and np.isfinite(row_min).all()):
        row, col = (int(i) for i in np.argwhere(~np.isfinite(w32))[0])
        note = ""
        if np.isfinite(arr[row, col]):
            note = f" (it is {arr[row, col]!r}, beyond the float32 range)"
        raise ValueError(f"w must be finite: w[{row}, {col}] is {w32[row, col]}{note}")
    return row_max, row_min


def group_range(arr: np.ndarray, w32: np.ndarray, group_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Maxima and minima of each row's groups of ``group_size`` columns, shape (m, G);
    a ValueError naming the first NaN or infinity as :func:`row_range` does. The last
    group may be shorter: its own columns only (padding it with zeros would not change
    min(W, 0) and max(W, 0) either)."""
    starts = np.arange(0, w32.shape[1], group_size)
    g_max = np.maximum.reduceat(w32, starts, axis=1)
    g_min = np.minimum.reduceat(w32, starts, axis=1)
    if not (np.isfinite(g_max).all() and np.isfinite(g_min).all()):
        row_range(arr, w32)  # raises, naming the first bad element
    return g_max, g_min


# --------------------------------------------------------------------------- parameters
def group_params(
    row_max: np.ndarray, row_min: np.ndarray, bits: int, symmetric: bool, per_channel: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point per group from the rows' maxima and minima (module docstring)."""
    qmin, qmax = integer_range(bits, symmetric)
    hi = row_max.astype(np.float64) if per_channel else np.float64(row_max.max())
    lo = row_min.astype(np.float64) if per_channel else np.float64(row_min.min())
    lo = np.where(lo > -_TINY, 0.0, lo)  # the range contains 0; subnormals count as 0
    hi = np.where(hi < _TINY, 0.0, hi)
    if symmetric:
        amax = np.maximum(hi, -lo)
        scale64 = amax / qmax
        empty = amax == 0
        lo = np.zeros_like(amax)
    else:
        scale64 = (hi - lo) / (qmax - qmin)
        empty = hi == lo
    s = np.maximum(scale64.astype(np.float32), _SMALLEST)
    s = np.where(empty, np.float32(1), s).astype(np.float32)
    z = np.clip(np.rint(-lo / s.astype(np.float64)), qmin, qmax).astype(np.int32)
    return np.asarray(s, np.float32), np.asarray(z, np.int32)


def device_params(scale: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """Per group: the scale normalized into [1, 2) and two powers of two, each a normal
    float32, whose product 2^e normalizes it (s * 2^e = s_norm); then z."""
    s = np.atleast_1d(scale).astype(np.float32)
    mant, ex = np.frexp(s)
    e = (1 - ex).astype(np.int64)  # in [-126, 149] for positive float32 scales
    e1 = np.clip(e, -126, 127)
    out = np.zeros(s.shape, dtype=_PARAMS)
    out["s_norm"] = np.ldexp(mant, 1).astype(np.float32)
    out["f1"] = np.ldexp(np.float32(1), e1).astype(np.float32)
    out["f2"] = np.ldexp(np.float32(1), e - e1).astype(np.float32)
    out["z"] = np.atleast_1d(zero_point)
    return out


# --------------------------------------------------------------------------- layout
def grid_rows(device: Device) -> int:
    return int(device.info.max_compute_work_group_count[1])


def column_groups(device: Device, count: int) -> int:
    """Workgroups along a row of ``count`` items, or a clear error past the grid limit."""
    groups = c.ceil_div(count, WORKGROUP)
    limit = int(device.info.max_compute_work_group_count[0])
    if groups > limit:
        raise ValueError(
            f"rows of {count} items need {groups} workgroups, more than this device's "
            f"maxComputeWorkGroupCount[0] ({limit}); split the matrix by columns"
        )
    return groups


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
    if isinstance(w, Tensor) and device is not None and w.device is not device:
        raise ValueError("device must be the Tensor's own device (or None)")
    dev = w.device if isinstance(w, Tensor) else resolve(device)
    dev.check()
    arr, w32 = weight_array(w)
    m, n = w32.shape
    layout = Layout(m, n, bits, symmetric, per_channel, group_size)
    q_rows = rows_per_buffer(dev, layout.row_bytes, "one row of w quantized")
    w_rows = min(q_rows, rows_per_buffer(dev, 4 * n, "one row of w as float32"))
    chunks: list[Chunk] = []
    made: list[Tensor] = []  # scale and zero point: freed with the chunks on any failure
    try:
        # Leased: a released QuantizedTensor's memory (pages already touched) serves the
        # next quantize of that size; fresh pages cost more to fault in than the kernel.
        lease_chunks(dev, m, layout.row_bytes, chunks)
        if symmetric and per_channel and _rows_on_device(dev, w32, layout):
            s, z = _quantize_rows(dev, arr, w32, chunks, w_rows, layout)
        else:
            if group_size is None:
                hi, lo = row_range(arr, w32)
            else:
                hi, lo = group_range(arr, w32, layout.group_cols)
            s, z = group_params(hi, lo, bits, symmetric, per_channel)
            _run_quantize(dev, w32, chunks, s, z, w_rows, layout)
        scale_t = upload(s.reshape(layout.param_shape), dev, made)
        zero_t = upload(z.reshape(layout.param_shape), dev, made)
        return QuantizedTensor(
            dev, (m, n), bits, symmetric, per_channel, chunks, scale_t, zero_t,
            group_size=group_size,
        )  # fmt: skip
    except BaseException:
        free_partial(chunks, made)
        raise


@dataclass(frozen=True)
class _QuantizeJob:
    """What every quantize dispatch of one call shares."""

    dev: Device
    layout: Layout
    params: dict[int, Buffer]  # per chunk (by first row): its groups' parameters

    def run_slice(self, src: Buffer, offset: int, ch: Chunk, start: int, rows: int) -> None:
        """Quantize ``rows`` rows of ``src`` (starting ``offset`` floats in) into rows
        ``start...`` of chunk ``ch``: whole stored blocks (16 columns, 32 packed) with
        vec4 loads where every row starts 16-byte aligned, the rest column by column."""
        dev, lay = self.dev, self.layout
        n = lay.n
        cols = 2 * BLOCK if lay.packed else BLOCK  # columns per stored block
        blocks = lay.row_bytes // BLOCK
        vec_blocks = n // cols if n % 4 == 0 and offset % 4 == 0 else 0
        parts = ((1, 0, vec_blocks), (0, vec_blocks, blocks - vec_blocks))
        params = self.params[ch.row0]
        texel = all(
            buf.nbytes >= 16 and c.texel_format(dev, buf, fmt) is not None
            for buf, fmt in ((src, "rgba32f"), (params, "rgba32ui"))
        )
        stride = lay.groups if lay.per_channel else 0
        qmin, qmax = integer_range(lay.bits, lay.symmetric)
        steps = []
        for first, count in row_slices(rows, grid_rows(dev)):
            row = start + first  # in the chunk, as its parameters are
            head = c.pack_u32(n, blocks, count, offset + first * n, start + first, row, stride)
            head += np.array([qmin, qmax], dtype="<i4").tobytes()
            for vec, block0, count_x in parts:
                if count_x:
                    pipe = _quantize_pipeline(dev, vec, texel and bool(vec), lay)
                    groups = (column_groups(dev, count_x), c.ceil_div(count, quant_rows(dev)), 1)
                    push = head + c.pack_u32(block0, lay.group_cols, lay.groups - 1)
                    steps.append(Dispatch(pipe, (src, ch.buffer, params), push, groups))
        dev.submitter.run(steps)


def _device_defines(dev: Device, *, reduces: bool) -> dict[str, int]:
    """RTE (and SUBGROUP for the reducing kernel) as the device allows: variants.defines."""
    return variants.defines(dev.info, exact=True, reduces=reduces)


def _quantize_pipeline(dev: Device, vec: int, texel: bool, layout: Layout) -> Any:
    """VEC 1: vec4 loads of whole aligned blocks, through a texel buffer where possible;
    VEC 0: column by column; GROUPED: parameters per column, or per block where groups
    are whole blocks (grouped_variant); PACKED: two codes per byte (shaders/quantize.comp)."""
    grouped, packed = grouped_variant(layout), int(layout.packed)
    defines = {"VEC": vec, "TEXEL": int(texel), "GROUPED": grouped, "PACKED": packed}
    return dev.pipeline(
        "quantize.comp",
        defines={**defines, **_device_defines(dev, reduces=False)},
        spec={0: WORKGROUP, 1: quant_rows(dev)},
        buffers=3,
        push_size=48,
        texel={0: "rgba32f", 2: "rgba32ui"} if texel else None,
    )


def grouped_variant(layout: Layout) -> int:
    """GROUPED define: 0 without group_size; 2 where each stored block (16 columns, 32
    packed) lies in one group (group_cols a multiple of it); else 1 (per column)."""
    if layout.group_size is None:
        return 0
    cols = 2 * BLOCK if layout.packed else BLOCK
    return 2 if layout.group_cols % cols == 0 else 1


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
    pool = buffer_pool(dev)
    params: dict[int, Buffer] = {}
    try:
        for ch in chunks:
            part = slice(ch.row0, ch.row0 + ch.rows)
            own = device_params(s[part], z[part]) if layout.per_channel else device_params(s, z)
            buf = params[ch.row0] = pool.acquire(max(16, own.nbytes))
            buf.write(own)
        job = _QuantizeJob(dev, layout, params)
        _for_weight_slices(dev, w32, chunks, w_rows, job.run_slice)
    finally:
        for buf in params.values():
            pool.release(buf)


SliceRunner = Callable[[Buffer, int, Chunk, int, int], None]


def _for_weight_slices(
    dev: Device, w32: np.ndarray, chunks: list[Chunk], w_rows: int, run: SliceRunner
) -> None:
    """``run(src, offset, chunk, start, rows)`` over slices of ``w32`` that fit one
    binding: the array's own pages imported where possible, else a reused staging buffer."""
    import_rows = _import_rows(dev, w32, w_rows)
    pool = buffer_pool(dev)  # a reused staging buffer: no fresh pages to fault in
    staging = None
    if not import_rows:
        staging = pool.acquire(min(w32.shape[0], w_rows) * w32.shape[1] * 4)
    try:
        for ch in chunks:
            for start, rows in row_slices(ch.rows, import_rows or w_rows):
                part = w32[ch.row0 + start : ch.row0 + start + rows]
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
            pipe = dev.pipeline(
                "quantize_rows.comp",
                defines={
                    "TEXEL": int(texel),
                    "PACKED": int(layout.packed),
                    **_device_defines(dev, reduces=True),
                },
                spec={0: _row_workgroup(dev)},
                buffers=3,
                push_size=28,
                texel={0: "rgba32f"} if texel else None,
            )
            blocks = layout.row_bytes // BLOCK
            gx = min(rows, int(dev.info.max_compute_work_group_count[0]))
            qmax = integer_range(layout.bits, True)[1]
            push = c.pack_u32(n // 4, rows, blocks, offset // 4, start, start, qmax)
            grid = (gx, c.ceil_div(rows, gx), 1)
            dev.submitter.run([Dispatch(pipe, (src, ch.buffer, infos[ch.row0]), push, grid)])

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

    Small matrices (under IMPORT_MIN_BYTES) and read-only or non-contiguous arrays go
    through the staging buffer instead; each slice, rounded out to whole pages, must fit
    one storage binding.
    """
    if w32.nbytes < IMPORT_MIN_BYTES or not w32.flags.writeable or not can_import_host(dev):
        return 0
    if not w32.flags.c_contiguous or w32.ctypes.data % 4:
        return 0
    slack = 2 * int(dev.info.min_imported_host_pointer_alignment)
    return max(0, min(w_rows, (binding_limit(dev) - slack) // (4 * w32.shape[1])))


# --------------------------------------------------------------------------- dequantize
def dequantize(qt: QuantizedTensor, *, device: Device | None = None) -> np.ndarray:
    """``W_hat = s * (q - z)`` as a float32 ``(m, n)`` numpy array, computed on the device.

    Each value is one float32 multiply of the exact integer ``q - z``: it equals
    :func:`vkcore.reference.dequantize` bit for bit (subnormal results aside, which a
    device may flush to 0).
    """
    if not isinstance(qt, QuantizedTensor):
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}")
    qt.check_usable()
    if device is not None and device is not qt.device:
        raise ValueError("device must be the QuantizedTensor's own device (or None)")
    dev = qt.device
    m, n = qt.shape
    y_rows = rows_per_buffer(dev, 4 * n, "one row of the result of dequantize(qt)")
    pool = buffer_pool(dev)
    # Where the whole result, rounded up to whole pages, fits one binding: the result
    # array's own pages, imported, written in place by the kernel.
    direct = None
    results = host_pool(dev)
    fits = results.slot_bytes(4 * m * n) <= binding_limit(dev)
    if fits and 4 * m * n >= c.POOLED_RESULT_BYTES and can_import_host(dev):
        out, direct = results.empty((m, n), np.float32, imported=True)
    else:
        out = c.result_array(dev, (m, n))
    vec = int(n % 4 == 0)
    texel = all(c.texel_format(dev, ch.buffer, "rgba32ui") for ch in qt.chunks)
    grouped, packed = grouped_variant(qt.layout), int(qt.packed)
    defines = {"VEC": vec, "TEXEL": int(texel), "GROUPED": grouped, "PACKED": packed}
    pipe = dev.pipeline(
        "dequantize.comp",
        defines={**defines, **_device_defines(dev, reduces=False)},
        spec={0: WORKGROUP, 1: quant_rows(dev)},
        buffers=4,
        push_size=40,
        texel={0: "rgba32ui"} if texel else None,
    )
    blocks = qt.row_bytes // BLOCK
    signed, stride = int(qt.symmetric), qt.groups if qt.per_channel else 0
    # Otherwise a reused device buffer (fresh pages would fault inside the kernel) and a copy.
    taken: list[Buffer] = []

    def take(nbytes: int) -> Buffer:
        taken.append(pool.acquire(max(16, nbytes)))
        return taken[-1]

    ybuf = direct if direct is not None else take(min(m, y_rows) * n * 4)
    try:
        per_chunk = qt.group_buffers(take)
        for ch, (scale_buf, zero_buf, group0) in zip(qt.chunks, per_chunk, strict=True):
            for start, rows in row_slices(ch.rows, y_rows):
                steps = []
                for first, count in row_slices(rows, grid_rows(dev) * quant_rows(dev)):
                    row = ch.row0 + start + first
                    y_row = row if direct is not None else first  # row in ybuf
                    push = c.pack_u32(n, blocks, count, start + first, row - group0, y_row)
                    push += c.pack_u32(stride, signed, qt.group_cols, qt.groups - 1)
                    groups = (column_groups(dev, blocks), c.ceil_div(count, quant_rows(dev)), 1)
                    steps.append(
                        Dispatch(pipe, (ch.buffer, scale_buf, zero_buf, ybuf), push, groups)
                    )
                dev.submitter.run(steps)
                if direct is None:
                    ybuf.read(out[ch.row0 + start : ch.row0 + start + rows])
    finally:
        for buf in taken:
            pool.release(buf)
    return out
