"""Batched matrix products: ``Y = W_hat X + b`` for X of shape ``(n, b)``, each weight
block read and unpacked once for a tile of columns (``shaders/matvec_batch.comp``).

Column c of Y is what :func:`vkcore.matvec` gives for column c of X (``v_ij = Q_ij - z_ig``,
scale group g of row i):

* ``"float"``: ``y_ic = sum_g s_ig * (sum_{j in g} v_ij x_jc) + b_i`` in float32 (any
  summation order); within ``(n + G + 1) * 2^-23 * sum_j |s_ig v_ij x_jc| + |b_i| 2^-24``
  of the exact value (what tests hold).
* ``"int8"`` / ``"uint8"``: every column is quantized on its own, on the device, exactly as
  :func:`vkcore.reference.quantize_activations` quantizes a vector: its own ``s_x`` and
  ``z_x``. ``acc_igc = sum_{j in g} v_ij (qx_jc - z_xc)`` in int32 (exact; for uint8 this is
  the integer ``sum v qx - z_x V_ig`` without row sums), ``t_igc = fl(fl(s_ig s_xc) fl(acc))``,
  ``y_ic = fl(fl(...fl(t_i0c + t_i1c) ... + t_i,G-1,c) + b_i)``: bit for bit with
  :func:`vkcore.reference.matvec` for x of shape ``(n, b)``.
* a NaN or infinity in a column of x makes that column of y NaN in the integer modes (its
  ``s_x`` is NaN) and no other column; in the float mode it propagates as float32
  arithmetic makes it (within its own column: columns never mix; and ``x_jc`` enters only
  the terms ``v_ij x_jc`` of its own group, also where groups share a stored block, whose
  other groups' columns the shader masks by select, never by a product with 0).
* b = 1 is the vector kernel (``vkcore.matvec`` on ``x[:, 0]``), so it equals the vector
  call bit for bit in every mode.

Device layout of X: the (n, b) array is bound as given (row-major, numpy or Tensor); a
first dispatch (``quantize_act.comp`` with ``BATCH=1``, one workgroup per column) writes
each column contiguously, padded to the weights' stored row length: the integer modes
one 16-byte header (s_x, z_x) then the codes, the float modes the float bits unchanged.
Contiguous columns let the product read one column's part of a weight block as whole
16-byte texels, and the per-column range reduction reads a column without strides across
other columns' results; the host never transposes, so a Tensor X needs no round trip.

The product's workgroup computes ``ROWS`` rows for all columns, ``COLS`` at a time: each
16-byte weight block of its rows is unpacked once per tile of COLS columns, and after the
first tile the rows' weights come from the cache, not memory (``batch_tile``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.program import Program
from vkcore.compute.tensor import Tensor, asarray, check_on_device
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage, variants
from vkcore.kernels.matvec import activation as act_q
from vkcore.kernels.matvec import program as mp
from vkcore.kernels.matvec import vector as vector_call
from vkcore.kernels.matvec.args import check_call, input_buffer, vector
from vkcore.kernels.matvec.f32matrix import F32Matrix, f32_weights
from vkcore.kernels.quant.qlayout import BLOCK
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.storage import Loans

ROWS = 4  # rows per workgroup
COLS = 8  # columns per tile (registers: ROWS * COLS accumulators per invocation)
MODE_F32 = mp.MODE_F32
# Loop iterations one invocation may run (estimated by _passes, with margin): llvmpipe
# ends every loop of an invocation once 65,535 iterations of all its loops have run
# (LP_MAX_TGSI_LOOP_ITERATIONS; seen here as a wrong last column tile with group size 1),
# so long group loops are split into passes. A split is valid on every device.
LOOP_BUDGET = 16384
LOOPS_PER_SUM = 4  # measured about 3 per workgroup sum on llvmpipe


def _defines(mode: int, signed: bool, asym: bool, packed: bool, texel: bool) -> dict[str, int]:
    return {
        "MODE": mode,
        "WSIGNED": int(signed),
        "ASYM": int(asym),
        "PACKED": int(packed),
        "TEXEL": int(texel),
    }


for _mode in (0, 1, 2):
    variants.register(
        "matvec_batch.comp",
        [
            _defines(_mode, bool(sg), bool(asym), bool(packed), texel)
            for sg, asym in mp.STORAGE
            for packed in (0, 1)
            for texel in (True, False)
        ],
        exact=_mode != 0,
        reduces=True,
    )
variants.register(
    "matvec_batch.comp",
    [_defines(MODE_F32, True, False, False, texel) for texel in (True, False)],
    exact=False,
    reduces=True,
)


def is_batch(x: Any) -> bool:
    """Whether ``x`` is a matrix of columns (shape ``(n, b)``) rather than a vector."""
    if isinstance(x, Tensor):
        return x.ndim == 2
    if isinstance(x, np.ndarray):
        return x.ndim == 2
    if isinstance(x, (list, tuple)):
        return bool(x) and isinstance(x[0], (list, tuple, np.ndarray))
    return False


def batch_tile(device: Device, b: int = COLS) -> tuple[int, int]:
    """(rows per workgroup, columns per tile): specialization constants 1 and 2. A batch
    narrower than COLS gets the next power of two (a tile costs about the same whatever
    share of its columns is used: on lavapipe b = 2 in a tile of 8 cost 4x per column)."""
    cols = 2
    while cols < min(b, COLS):
        cols *= 2
    return ROWS, cols


# --------------------------------------------------------------------------- entry points
def matvec(
    qt: QuantizedTensor,
    x: Any,
    *,
    bias: Any = None,
    activations: str = "float",
    device: Device | None = None,
) -> Any:
    """``Y = W_hat X + b`` for ``x`` of shape ``(n, b)``; see the module docstring.

    numpy in, numpy out (float32 ``(m, b)``); a float32 Tensor in, a Tensor out.
    """
    check_call(qt, activations, device)
    return _batched(qt, x, bias, mp.MODES[activations])


def matvec_f32(w: Any, x: Any, *, bias: Any = None, device: Device | None = None) -> Any:
    """``Y = W X + b`` in float32 for ``x`` of shape ``(n, b)`` (``w``: a 2-D float array or a
    :class:`vkcore.F32Matrix`): the baseline of :func:`matvec`, with the same tiling."""
    with f32_weights(w, device) as mat:
        return _batched(mat, x, bias, MODE_F32)


# --------------------------------------------------------------------------- the call
def _columns(x: Any, n: int, dev: Device) -> np.ndarray | Tensor:
    """x as a C-contiguous float32 (n, b) array, or the Tensor itself; clear errors."""
    data = c.float_input(x, "x")
    if isinstance(data, Tensor):
        check_on_device(data.device, dev, "x", "the weights'")
    if len(data.shape) != 2 or data.shape[0] != n:
        raise ValueError(f"x must have shape ({n},) or ({n}, b), got {tuple(data.shape)}")
    if data.shape[1] == 0:
        raise ValueError(f"x must have at least one column, got shape {tuple(data.shape)}")
    return data if isinstance(data, Tensor) else c.as_float32(data)


def _vector_call(mat: Any, xv: np.ndarray | Tensor, bias: Any, mode: int) -> Any:
    """b = 1: the vector kernel on the one column (bit for bit the vector call)."""
    n = mat.shape[1]
    col = xv.reshape((n,)) if isinstance(xv, Tensor) else xv[:, 0]
    y = vector_call.run(mat, col, bias, mode)
    return y.reshape((mat.shape[0], 1))


def _batched(mat: QuantizedTensor | F32Matrix, x: Any, bias: Any, mode: int) -> Any:
    dev = mat.device
    mat.check_usable()
    m, n = mat.shape
    xv = _columns(x, n, dev)
    if bias is not None:
        bias = vector(bias, m, dev, "bias")
    b = int(xv.shape[1])
    if b == 1:
        return _vector_call(mat, xv, bias, mode)
    layout = _Layout(mat, mode, b)
    layout.check(dev)
    with dev.lock:
        xbuf = input_buffer(mat, xv, "xb")
        act = mat.scratch_buffer("actb", 16 * b * layout.act_stride)
        steps = [_prepare(mat, mode, xbuf, act, layout)]
        whole = 4 * m * b <= storage.binding_limit(dev) and storage.vectors_fit(dev, m)
        if whole:
            return _run_whole(mat, mode, act, bias, layout, steps, isinstance(xv, Tensor))
        out = _run_by_chunks(mat, mode, act, bias, layout, steps)
    return asarray(out, device=dev) if isinstance(xv, Tensor) else out


class _Layout:
    """What a call's dispatches share: stored blocks per row, codes per block, columns."""

    def __init__(self, mat: QuantizedTensor | F32Matrix, mode: int, b: int) -> None:
        self.b = b
        self.n = mat.shape[1]
        if isinstance(mat, F32Matrix):
            self.blocks, self.cols_per_block, self.packed = mat.row_floats // BLOCK, BLOCK, False
            self.groups, self.group_cols = 1, self.n
        else:
            self.packed = bool(getattr(mat, "packed", False))
            self.blocks = mat.row_bytes // BLOCK
            self.cols_per_block = 2 * BLOCK if self.packed else BLOCK
            self.groups = int(getattr(mat, "groups", 1))
            self.group_cols = int(getattr(mat, "group_cols", self.n))
        self.codes = self.blocks * self.cols_per_block  # stored columns per row
        integer = mode in (1, 2)
        # texels per column: a header (s_x, z_x) and the codes (16 a texel), or the floats
        self.act_stride = 1 + self.codes // 16 if integer else self.codes // 4

    def check(self, dev: Device) -> None:
        limit = storage.binding_limit(dev)
        for name, nbytes in (
            ("x", 4 * self.n * self.b),
            ("x prepared", 16 * self.b * self.act_stride),
        ):
            if nbytes > limit:
                raise ValueError(
                    f"x of shape ({self.n}, {self.b}) needs {nbytes} bytes ({name}) in one "
                    f"storage binding, more than this device's maxStorageBufferRange "
                    f"({limit} bytes); pass fewer columns per call"
                )
        if self.b > int(dev.info.max_compute_work_group_count[1]):
            raise ValueError(
                f"x has {self.b} columns, more than this device's maxComputeWorkGroupCount[1] "
                f"({dev.info.max_compute_work_group_count[1]}); pass fewer columns per call"
            )


def _prepare(
    mat: QuantizedTensor | F32Matrix, mode: int, xbuf: Buffer, act: Buffer, layout: _Layout
) -> Dispatch:
    """The dispatch that writes every column of x into ``act`` (quantized or copied)."""
    act_mode = 0 if mode in (0, MODE_F32) else mode
    return act_q.quantize_columns(
        mat.device,
        act_mode,
        xbuf,
        act,
        n=layout.n,
        b=layout.b,
        codes=layout.codes,
        stride=layout.act_stride,
    )


def _program(mat: QuantizedTensor | F32Matrix, mode: int, act: Buffer, layout: _Layout) -> Program:
    dev = mat.device
    integer = mode in (1, 2)
    wfmt = "rgba32f" if mode == MODE_F32 else "rgba32ui"

    def viewable(buf: Buffer, fmt: str) -> bool:
        return buf.nbytes >= 16 and c.texel_format(dev, buf, fmt) is not None

    afmt = "rgba32ui" if integer else "rgba32f"
    texel = viewable(act, afmt) and all(viewable(ch.buffer, wfmt) for ch in mat.chunks)
    signed = True if isinstance(mat, F32Matrix) else mat.symmetric
    rows, cols = batch_tile(dev, layout.b)
    return programs.program(
        dev,
        "matvec_batch.comp",
        {
            **_defines(mode, signed, not signed, layout.packed, texel),
            **variants.defines(dev.info, exact=integer, reduces=True),
        },
        workgroup=mp.workgroup_size(dev),
        spec={"ROWS": rows, "COLS": cols},
        texel={0: wfmt, 3: afmt} if texel else None,
    )


def _grid(dev: Device, rows: int) -> tuple[int, int, int]:
    return c.row_grid(dev, rows, batch_tile(dev)[0])


def _passes(dev: Device, layout: _Layout) -> list[tuple[int, int, int, int]]:
    """(g_begin, g_end, c_begin, c_end) of each pass, in order: the columns cut into
    slices and the groups into ranges so that one invocation's loops stay within
    LOOP_BUDGET; a range continues the sum the one before stored in y."""
    rows, cols = batch_tile(dev, layout.b)
    spanned = c.ceil_div(layout.group_cols, layout.cols_per_block) + 1  # blocks of a group
    per_group = rows * cols * LOOPS_PER_SUM + c.ceil_div(spanned, mp.workgroup_size(dev)) + 4
    tiles_per_slice = max(1, LOOP_BUDGET // per_group)
    slice_cols = tiles_per_slice * cols
    out = []
    for c_begin in range(0, layout.b, slice_cols):
        c_end = min(layout.b, c_begin + slice_cols)
        tiles = c.ceil_div(c_end - c_begin, cols)
        step = max(1, LOOP_BUDGET // (tiles * per_group))
        for g_begin in range(0, layout.groups, step):
            out.append((g_begin, min(layout.groups, g_begin + step), c_begin, c_end))
    return out


def _push(
    mat: Any,
    layout: _Layout,
    rows: int,
    vec_row0: int,
    par_row0: int,
    bias: bool,
    part: tuple[int, int, int, int],
) -> bytes:
    per_channel = int(getattr(mat, "per_channel", False))
    return c.pack_u32(
        layout.blocks,
        rows,
        vec_row0,
        par_row0,
        layout.b,
        layout.act_stride,
        layout.groups,
        layout.group_cols,
        per_channel,
        int(bias),
        *part,
    )


def _run_whole(
    mat: QuantizedTensor | F32Matrix,
    mode: int,
    act: Buffer,
    bias: np.ndarray | Tensor | None,
    layout: _Layout,
    steps: list[Dispatch],
    tensor_out: bool,
) -> Any:
    """y, bias, scales and zero points each bound whole (they fit one binding)."""
    dev = mat.device
    m, b = mat.shape[0], layout.b
    y_tensor = c.result_tensor(dev, (m, b)) if tensor_out else None
    ybuf = y_tensor.buffer if y_tensor is not None else mat.scratch_buffer("yb", 4 * m * b)
    assert ybuf is not None
    bbuf = c.dummy_buffer(dev) if bias is None else input_buffer(mat, bias, "biasb")
    scale, zero = mp.param_buffers(mat)
    prog = _program(mat, mode, act, layout)
    for part in _passes(dev, layout):
        for ch in mat.chunks:
            push = _push(mat, layout, ch.rows, ch.row0, ch.row0, bias is not None, part)
            buffers = (ch.buffer, scale, zero, act, bbuf, ybuf)
            steps.append(prog.record(*buffers, groups=_grid(dev, ch.rows), push=push))
    dev.run(steps)
    if y_tensor is not None:
        return y_tensor
    out = c.result_array(dev, (m, b))
    ybuf.read(out)
    return out


def _run_by_chunks(
    mat: QuantizedTensor | F32Matrix,
    mode: int,
    act: Buffer,
    bias: np.ndarray | Tensor | None,
    layout: _Layout,
    steps: list[Dispatch],
) -> np.ndarray:
    """Per-row vectors too large for one binding: each weight chunk binds its own slices
    (y, bias, parameters), taken from the buffer pool for this call."""
    dev = mat.device
    host_bias = bias.numpy() if isinstance(bias, Tensor) else bias
    with Loans(dev) as loans:
        prog = _program(mat, mode, act, layout)
        if isinstance(mat, QuantizedTensor):
            params = mat.group_buffers(loans.take)
        else:
            params = [(*mp.param_buffers(mat), 0)] * len(mat.chunks)
        ys = []
        for ch, (scale, zero, group0) in zip(mat.chunks, params, strict=True):
            bbuf = c.dummy_buffer(dev)
            if host_bias is not None:
                bbuf = loans.holding(c.as_float32(host_bias[ch.row0 : ch.row0 + ch.rows]))
            ys.append(loans.take(4 * ch.rows * layout.b))
            for part in _passes(dev, layout):
                push = _push(mat, layout, ch.rows, 0, ch.row0 - group0, host_bias is not None, part)
                buffers = (ch.buffer, scale, zero, act, bbuf, ys[-1])
                steps.append(prog.record(*buffers, groups=_grid(dev, ch.rows), push=push))
        dev.run(steps)
        out = c.result_array(dev, (mat.shape[0], layout.b))
        for ch, ybuf in zip(mat.chunks, ys, strict=True):
            ybuf.read(out[ch.row0 : ch.row0 + ch.rows])
    return out
