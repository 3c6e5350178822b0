"""Matrix-vector products with quantized weights, and the float32 baseline.

``matvec(qt, x, bias=None, activations=...)`` with ``v_ij = Q_ij - z_i`` (``z_i = 0`` for
symmetric weights; asymmetric weights are supported through this correction):

* ``"float"`` (weight-only): ``y_i = s_i * sum_j v_ij x_j + b_i``; float32 sums, the scale
  applied once per output after the sum. Accuracy: float32 summation error against the
  float64 reference, ``|err_i| <= n * 2^-23 * s_i * sum_j |v_ij x_j|`` (what tests hold).
* ``"int8"`` (full integer): x is quantized per tensor, symmetric, on the device
  (:func:`vkcore.reference.quantize_activations`); ``acc_i = sum_j v_ij qx_j`` in int32.
* ``"uint8"``: x quantized asymmetrically with zero point ``z_x``;
  ``acc_i = sum_j v_ij qx_j - z_x V_i`` with ``V_i = sum_j v_ij`` computed once per
  weight tensor on the device and reused by every call.
* integer modes: ``y_i = float32(s_i s_x) * float32(acc_i) + b_i``, each step one float32
  rounding, so y equals :func:`vkcore.reference.matvec` bit for bit and ``acc`` equals
  an int64 reference exactly.
* non-finite activations: in the float mode NaN and infinities propagate as float32
  arithmetic makes them; in the integer modes a NaN or infinity anywhere in x makes every
  output NaN (``s_x = NaN``), never a silent finite answer.

int32 overflow: ``|acc_i| <= vmax * amax * n`` with ``vmax`` = 2^(b-1)-1 (symmetric) or
2^b-1 (asymmetric weights) and ``amax`` = 127 (int8) or 255 (uint8). Calls with
``n > max_exact_n(...)`` raise ValueError rather than risk a wrong answer (8-bit symmetric
weights: n <= 133,144 with int8 activations, n <= 66,311 with uint8).

The kernel reads 16 weights per 32-bit-word quadruple (``uvec4`` loads, bytes unpacked
with ``bitfieldExtract``), so it needs neither 8-bit storage nor int8 arithmetic; a
workgroup is one subgroup computing ``ROWS`` rows (``ROWS_F32`` for the float32 kernel),
reusing each loaded activation block. Weights and activations are read through uniform
texel buffers where the device allows (lavapipe's texture path is vectorized, its
storage-buffer loads are not; ``VKCORE_TEXEL=0`` keeps storage buffers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..buffer import Buffer
from ..commands import Dispatch
from ..device import Device, resolve
from ..pools import buffer_pool
from ..program import Program
from ..tensor import Tensor, asarray
from . import _common as c
from . import matvec_groups as mg
from . import programs, storage, variants
from .qlayout import BLOCK
from .qtensor import QuantizedTensor
from .storage import Chunk, ScratchOwner, row_slices, rows_per_buffer

ACTIVATIONS = ("float", "int8", "uint8")
MODES = {"float": 0, "int8": 1, "uint8": 2}
MODE_F32, MODE_ROWSUM = 3, 4
ROWS = 16  # rows per workgroup: each activation block loaded serves 16 rows
# The float32 kernel is fastest with 8 (measured on lavapipe: 7.3 vs 9.3 ms at 4096x4096),
# the quantized ones with 16; the baseline gets its own best.
ROWS_F32 = 8
ACC_LIMIT = 2**31 - 1
ACT_MAX = {"int8": 127, "uint8": 255}
ACT_INV = {"int8": np.float32(1 / 127), "uint8": np.float32(1 / 255)}
ACT_TINY = np.float32(2.0**-96)
ACT_WORKGROUP = 64
# (WSIGNED, ASYM): int8 storage for symmetric weights, uint8 with zero points otherwise.
_STORAGE = ((1, 0), (0, 1))


def rows_per_workgroup(device: Device, mode: int) -> int:
    """Rows per workgroup (specialization constant 1): the value ``vkcore tune`` stored for
    this device, else ROWS (ROWS_F32 for the float32 kernel), halved until the shader's
    ``sh_acc[ROWS][workgroup]`` fits the device's shared memory (variants.fit_rows)."""
    from .. import tune

    if mode == MODE_F32:
        rows = int(tune.choice(device, "matvec_f32_rows") or ROWS_F32)
    else:
        rows = int(tune.choice(device, "matvec_rows") or ROWS)
    return variants.fit_rows(device.info, workgroup_size(device), rows)


def _defines(
    mode: int,
    signed: bool,
    asym: bool,
    texel: bool,
    grouped: int = 0,
    packed: int = 0,
    dot: int = 0,
) -> dict[str, int]:
    """The kernel's defines; GROUPED, PACKED and DOT only when set (the per-channel
    variants keep their names)."""
    out = {"MODE": mode, "WSIGNED": int(signed), "ASYM": int(asym), "TEXEL": int(texel)}
    out.update({k: 1 for k, v in (("GROUPED", grouped), ("PACKED", packed), ("DOT", dot)) if v})
    return out


def _exact(mode: int) -> bool:
    """The integer-activation modes promise y bit for bit: their shaders request RTE."""
    return mode in (MODES["int8"], MODES["uint8"])


def _reduces(mode: int, grouped: int = 0) -> bool:
    """Whether a matvec variant reduces with subgroup arithmetic (workgroup_sum): every
    per-channel mode, and the grouped kernel's float mode; the grouped integer modes and
    row sums exchange their per-group sums through shared memory only."""
    return not grouped or mode == MODES["float"]


# Every shader variant the functions below can request (precompiled into the wheel), with
# the device-dependent defines of variants.defines (see _reduces: which variants use
# subgroup arithmetic and so get a SUBGROUP=0 twin).
for _mode in (0, 1, 2, MODE_ROWSUM, MODE_F32):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel)
            for sg, asym in (((1, 0),) if _mode == MODE_F32 else _STORAGE)
            for texel in (True, False)
        ],
        exact=_exact(_mode),
        reduces=True,
    )
# The grouped / packed kernel (matvec_groups.glsl) in every mode but the float32 one, and
# the integer dot product on 8-bit storage (per-channel and grouped kernels).
for _mode in (0, 1, 2, MODE_ROWSUM):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel, grouped=1, packed=packed)
            for sg, asym in _STORAGE
            for texel in (True, False)
            for packed in (0, 1)
        ],
        exact=_exact(_mode),
        reduces=_reduces(_mode, grouped=1),
    )
for _mode, _grouped in ((1, 0), (2, 0), (1, 1), (2, 1)):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel, grouped=grouped, dot=1)
            for sg, asym in _STORAGE
            for texel in (True, False)
            for grouped in (0, 1)
            if grouped == _grouped
        ],
        exact=True,
        reduces=_reduces(_mode, grouped=_grouped),
    )
variants.register("quantize_act.comp", [{"ACT": 1}, {"ACT": 2}], exact=True, reduces=True)


def max_exact_n(bits: int, symmetric: bool, activations: str) -> int:
    """Largest row length whose int32 accumulator provably cannot overflow:
    ``ACC_LIMIT // (vmax * amax)`` (see the module docstring)."""
    vmax = 2 ** (bits - 1) - 1 if symmetric else 2**bits - 1
    return ACC_LIMIT // (vmax * ACT_MAX[activations])


def workgroup_size(device: Device) -> int:
    """One subgroup per workgroup where the device reports a size (8 on lavapipe)."""
    size = int(device.info.subgroup_size or 0)
    return size if 4 <= size <= 128 else 32


# --------------------------------------------------------------------------- the fp32 baseline
class F32Matrix(ScratchOwner):
    """float32 weights resident on the device, in the same padded row layout as
    :class:`QuantizedTensor` (rows padded to 16 floats, split by rows across buffers)."""

    def __init__(self, w: Any, device: Device | None = None) -> None:
        if isinstance(w, Tensor) and device is not None and w.device is not device:
            raise ValueError("device must be the Tensor's own device (or None)")
        dev = w.device if isinstance(w, Tensor) else resolve(device)
        data = c.float_input(w, "w")
        arr = data.numpy() if isinstance(data, Tensor) else data
        if arr.ndim != 2 or 0 in arr.shape:
            raise ValueError(f"w must be a non-empty 2-D matrix, got shape {arr.shape}")
        m, n = arr.shape
        self.device = dev
        self.shape = (m, n)
        self.row_floats = c.ceil_div(n, BLOCK) * BLOCK
        per_buffer = rows_per_buffer(dev, 4 * self.row_floats, "one row of w (padded float32)")
        self.scratch: dict[str, Buffer] = {}
        self.chunks: list[Chunk] = []
        padded = np.zeros((min(m, per_buffer), self.row_floats), dtype=np.float32)
        try:
            for row0, rows in row_slices(m, per_buffer):
                padded[:rows, :n] = arr[row0 : row0 + rows]
                buf = Buffer(dev, rows * self.row_floats * 4)
                self.chunks.append(Chunk(row0, rows, buf))
                buf.write(padded[:rows])
        except BaseException:  # no half-uploaded matrix: its memory goes now, not at GC
            self.release()
            raise

    def __repr__(self) -> str:
        return f"vkcore.F32Matrix(shape={self.shape})"


def matvec_f32(w: Any, x: Any, *, bias: Any = None, device: Device | None = None) -> Any:
    """``y = W x + b`` in float32 on the device: the honest baseline for :func:`matvec`.

    ``w`` is a 2-D float array (uploaded for this call) or an :class:`F32Matrix` (already
    resident). ``x``: numpy vector or Tensor of length n; numpy in, numpy out.
    """
    if isinstance(w, QuantizedTensor):
        raise TypeError(
            "matvec_f32 takes float weights (a 2-D float array or a vkcore.F32Matrix), "
            "got a QuantizedTensor; use vkcore.matvec(qt, x) for quantized weights"
        )
    from . import matvec_batch  # x of shape (n, b): all b columns in one call

    if matvec_batch.is_batch(x):
        return matvec_batch.matvec_f32(w, x, bias=bias, device=device)
    if isinstance(w, F32Matrix):
        if device is not None and device is not w.device:
            raise ValueError("device must be the F32Matrix's own device (or None)")
        return _matvec(w, x, bias, MODE_F32, "float")
    mat = F32Matrix(w, device)
    try:
        return _matvec(mat, x, bias, MODE_F32, "float")
    finally:
        mat.release()


# --------------------------------------------------------------------------- quantized
def matvec(
    qt: QuantizedTensor,
    x: Any,
    *,
    bias: Any = None,
    activations: str = "float",
    device: Device | None = None,
) -> Any:
    """``y = W_hat x + b`` with quantized weights ``qt``; see the module docstring.

    ``x``: a float vector of length n (numpy or a float32 Tensor on qt's device); numpy
    in, numpy out, Tensor in, Tensor out. ``bias``: None or a float vector of length m.
    ``activations``: "float", "int8" or "uint8".
    """
    from . import matvec_batch  # x of shape (n, b): all b columns in one call

    if matvec_batch.is_batch(x):
        return matvec_batch.matvec(qt, x, bias=bias, activations=activations, device=device)
    _check_call(qt, activations, device)
    return _matvec(qt, x, bias, MODES[activations], activations)


def integer_accumulators(qt: QuantizedTensor, x: Any, activations: str = "int8") -> np.ndarray:
    """The int32 accumulators of an integer-mode matvec, as numpy int32: ``acc_i`` shape
    ``(m,)`` with one group per row, ``acc_ig`` shape ``(m, G)`` with groups.

    For checks and tests: they equal :func:`vkcore.reference.matvec_accumulators`.
    """
    if activations not in ("int8", "uint8"):
        raise ValueError(f"activations must be 'int8' or 'uint8', got {activations!r}")
    _check_call(qt, activations, None)
    y = _matvec(qt, x, None, MODES[activations], activations, out_acc=True)
    arr = (y.numpy() if isinstance(y, Tensor) else y).view(np.int32)
    return arr.reshape(qt.shape[0], -1) if mg.groups(qt) > 1 else arr


def _check_call(qt: Any, activations: Any, device: Device | None) -> None:
    if not isinstance(qt, QuantizedTensor):
        hint = ""
        if isinstance(qt, F32Matrix):
            hint = "; use vkcore.matvec_f32 for float32 weights"
        elif isinstance(qt, (np.ndarray, Tensor)):
            hint = "; quantize the weights first with vkcore.quantize"
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}{hint}")
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
    if device is not None and device is not qt.device:
        raise ValueError("device must be the QuantizedTensor's own device (or None)")
    if activations != "float":
        limit = max_exact_n(qt.bits, qt.symmetric, activations)
        cols = min(mg.group_cols(qt), qt.shape[1])  # columns summed into one int32
        if cols > limit:
            kind = "symmetric" if qt.symmetric else "asymmetric"
            what, bound = f"n = {qt.shape[1]} inputs", f"n = {limit}"
            if mg.groups(qt) > 1:
                what, bound = f"groups of {cols} columns", f"{limit} columns per group"
            raise ValueError(
                f"{what} could overflow the int32 accumulator with {activations} "
                f"activations and {qt.bits}-bit {kind} weights (exact up to {bound}); "
                "use activations='float', a smaller group_size or split the layer"
            )


def _vector(x: Any, n: int, dev: Device, name: str) -> np.ndarray | Tensor:
    data = c.float_input(x, name)
    if isinstance(data, Tensor):
        if data.device is not dev:
            raise ValueError(f"{name} must be on the weights' device")
        if data.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},), got {data.shape}")
        return data
    if data.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {data.shape}")
    return c.as_float32(data)


def _matvec(
    mat: QuantizedTensor | F32Matrix,
    x: Any,
    bias: Any,
    mode: int,
    activations: str,
    out_acc: bool = False,
) -> Any:
    dev = mat.device
    mat.check_usable()  # the device is open and mat not released (says which)
    m, n = mat.shape
    xv = _vector(x, n, dev, "x")
    bv = None if bias is None else _vector(bias, m, dev, "bias")
    _check_binding(dev, 4 * n, "x")
    groups = 1 if isinstance(mat, F32Matrix) else mg.groups(mat)
    count = m * groups if out_acc else m  # y, or the accumulators of every group
    with dev.lock:
        xbuf = input_buffer(mat, xv, "x")
        if not storage.vectors_fit(dev, m * groups):
            return _matvec_by_chunks(mat, mode, xbuf, xv, bv, out_acc)
        bbuf = c.dummy_buffer(dev) if bv is None else input_buffer(mat, bv, "bias")
        y_tensor = Tensor.empty((count,), np.float32, dev) if isinstance(xv, Tensor) else None
        ybuf = y_tensor.buffer if y_tensor is not None else mat.scratch_buffer("y", 4 * count)
        assert ybuf is not None
        made: dict[str, Buffer] = {}  # derived state, kept only once the steps have run
        try:
            steps = _steps(mat, mode, xbuf, bbuf, ybuf, bv is not None, out_acc, made)
            dev.submitter.run(steps)
        except BaseException:
            for buf in made.values():
                buf.destroy()
            raise
        if "rowsum" in made and isinstance(mat, QuantizedTensor):
            mat.rowsum = made["rowsum"]
        if y_tensor is not None:
            return y_tensor
        out = np.empty(count, dtype=np.float32)
        ybuf.read(out)
        return out


def _check_binding(dev: Device, nbytes: int, name: str) -> None:
    """x is bound whole (the kernels split rows, not columns): refuse one too long."""
    limit = storage.binding_limit(dev)
    if nbytes > limit:
        raise ValueError(
            f"{name} needs {nbytes} bytes in one storage binding, more than this device's "
            f"maxStorageBufferRange ({limit} bytes); split the layer by columns "
            "(sum the products of column blocks)"
        )


def _matvec_by_chunks(
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
    pool = buffer_pool(dev)
    bias = bv.numpy() if isinstance(bv, Tensor) else bv
    is_qt = isinstance(mat, QuantizedTensor)
    groups = mg.groups(mat) if is_qt else 1
    per = groups if out_acc else 1
    taken: list[Buffer] = []

    def take(arr: np.ndarray | None, nbytes: int = 0) -> Buffer:
        taken.append(pool.acquire(max(16, nbytes if arr is None else arr.nbytes)))
        if arr is not None:
            taken[-1].write(np.ascontiguousarray(arr))
        return taken[-1]

    try:
        steps: list[Dispatch] = []
        prog, act, act_vec, blocks = _kernel(mat, mode, xbuf, steps)
        params = _param_arrays(mat) if isinstance(mat, QuantizedTensor) else None
        ys = []
        for ch, start, rows in _pieces(mat, groups):
            row0 = ch.row0 + start
            scale = zero = rowsum = bbuf = dummy
            if params is not None:
                scale, zero = (take(p[row0 : row0 + rows]) if p.ndim else take(p) for p in params)
            if isinstance(mat, QuantizedTensor) and mode == MODES["uint8"]:
                rowsum = take(None, 4 * rows * groups)
                steps.append(_rowsum_step(mat, ch, scale, zero, rowsum, 0, start, rows, 0))
            if bias is not None:
                bbuf = take(c.as_float32(bias[row0 : row0 + rows]))
            ys.append((row0, rows, take(None, 4 * rows * per)))
            if isinstance(mat, QuantizedTensor) and mg.grouped(mat):
                words = mg.push_words(
                    mat, workgroup_size(dev), rows, 0, 0, start, (int(bias is not None), out_acc)
                )
            else:
                per_channel = int(getattr(mat, "per_channel", False))
                words = (blocks, mat.shape[1], rows, 0, per_channel, int(bias is not None))
                words += (int(out_acc),)
            buffers = (ch.buffer, scale, zero, rowsum, act, act_vec, bbuf, ys[-1][2])
            grid = _grid(dev, rows, _pipe_mode(mat, mode))
            steps.append(prog.record(*buffers, groups=grid, push=c.pack_u32(*words)))
        dev.submitter.run(steps)
        out = np.empty(mat.shape[0] * per, dtype=np.float32)
        for row0, rows, ybuf in ys:
            ybuf.read(out[row0 * per : (row0 + rows) * per])
    finally:
        for buf in taken:
            pool.release(buf)
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


def input_buffer(mat: QuantizedTensor | F32Matrix, v: np.ndarray | Tensor, name: str) -> Buffer:
    """A Tensor's own buffer, or the array written into ``mat``'s scratch buffer ``name``."""
    if isinstance(v, Tensor):
        assert v.buffer is not None
        return v.buffer
    buf = mat.scratch_buffer(name, v.nbytes)
    buf.write(v)
    return buf


def _steps(
    mat: QuantizedTensor | F32Matrix,
    mode: int,
    xbuf: Buffer,
    bbuf: Buffer,
    ybuf: Buffer,
    has_bias: bool,
    out_acc: bool,
    made: dict[str, Buffer],
) -> list[Dispatch]:
    dev = mat.device
    dummy = c.dummy_buffer(dev)
    steps: list[Dispatch] = []
    scale = zero = rowsum = dummy
    per_channel = 0
    if isinstance(mat, QuantizedTensor):
        scale, zero = _whole_groups(mat)  # they fit one binding (else _matvec_by_chunks)
        per_channel = int(mat.per_channel)
        rowsum = _rowsum(mat, steps, made) if mode == MODES["uint8"] else dummy
    prog, act, act_vec, blocks = _kernel(mat, mode, xbuf, steps)
    n = mat.shape[1]
    for ch in mat.chunks:
        if isinstance(mat, QuantizedTensor) and mg.grouped(mat):
            flags = (int(has_bias), int(out_acc))
            words = mg.push_words(mat, workgroup_size(dev), ch.rows, ch.row0, ch.row0, 0, flags)
            push = c.pack_u32(*words)
        else:
            push = c.pack_u32(blocks, n, ch.rows, ch.row0, per_channel, int(has_bias), int(out_acc))
        buffers = (ch.buffer, scale, zero, rowsum, act, act_vec, bbuf, ybuf)
        grid = _grid(dev, ch.rows, _pipe_mode(mat, mode))
        steps.append(prog.record(*buffers, groups=grid, push=push))
    return steps


def _whole_groups(qt: QuantizedTensor) -> tuple[Buffer, Buffer]:
    scale, zero = qt.scale_tensor.buffer, qt.zero_point_tensor.buffer
    assert scale is not None and zero is not None
    return scale, zero


def _pipe_mode(mat: QuantizedTensor | F32Matrix, mode: int) -> int:
    return MODE_F32 if isinstance(mat, F32Matrix) else mode


def _kernel(
    mat: QuantizedTensor | F32Matrix, mode: int, xbuf: Buffer, steps: list[Dispatch]
) -> tuple[Program, Buffer, Buffer, int]:
    """The matvec program, its two activation bindings and the blocks per stored row;
    the integer modes append the step that quantizes x."""
    if isinstance(mat, F32Matrix):
        prog = _program(mat.device, MODE_F32, True, False, _texel(mat, MODE_F32, xbuf))
        return prog, xbuf, xbuf, mat.row_floats // BLOCK
    act, act_vec = xbuf, xbuf
    if mode in (MODES["int8"], MODES["uint8"]):
        act = _quantize_activations(mat, xbuf, mode, steps)
        act_vec = c.dummy_buffer(mat.device)
    texel = _texel(mat, mode, act)
    prog = _program(mat.device, mode, mat.symmetric, not mat.symmetric, texel, _layout(mat, mode))
    return prog, act, act_vec, mat.row_bytes // BLOCK


def _layout(qt: QuantizedTensor, mode: int) -> tuple[int, int, int]:
    """(GROUPED, PACKED, DOT) of the kernel variant for ``qt`` in ``mode``."""
    activations = next((a for a, v in MODES.items() if v == mode), "")
    dot = mg.use_dot(qt.device, qt, activations)
    return int(mg.grouped(qt)), int(getattr(qt, "packed", False)), int(dot)


def _grid(dev: Device, rows: int, mode: int) -> tuple[int, int, int]:
    groups = c.ceil_div(rows, rows_per_workgroup(dev, mode))
    gx = min(groups, int(dev.info.max_compute_work_group_count[0]))
    gy = c.ceil_div(groups, gx)
    if gy > c.grid_rows(dev):
        raise ValueError(
            f"{rows} rows need more workgroups than this device allows; split the matrix"
        )
    return gx, gy, 1


def _texel(mat: QuantizedTensor | F32Matrix, mode: int, act: Buffer | None) -> bool:
    """Whether the weights and the activations (float x, or the quantized x of the integer
    modes) can be read as texel buffers: the faster load path on lavapipe."""
    dev = mat.device

    def viewable(buf: Buffer, fmt: str) -> bool:  # a view holds at least one texel
        return buf.nbytes >= 16 and c.texel_format(dev, buf, fmt) is not None

    fmt = "rgba32f" if mode == MODE_F32 else "rgba32ui"
    if not all(viewable(ch.buffer, fmt) for ch in mat.chunks):
        return False
    if isinstance(mat, QuantizedTensor) and mg.grouped(mat):  # parameters as texels too
        scale, zero = _whole_groups(mat)
        if not (c.texel_format(dev, scale, "r32f") and c.texel_format(dev, zero, "r32ui")):
            return False
    if mode in (MODES["float"], MODE_F32):
        return act is not None and viewable(act, "rgba32f")
    if mode in (MODES["int8"], MODES["uint8"]):
        return act is not None and viewable(act, "rgba32ui")
    return True


def _program(
    dev: Device,
    mode: int,
    signed: bool,
    asym: bool,
    texel: bool,
    layout: tuple[int, int, int] = (0, 0, 0),
) -> Program:
    formats: dict[int, str] = {}
    if texel:
        formats[0] = "rgba32f" if mode == MODE_F32 else "rgba32ui"
        if mode in (MODES["float"], MODE_F32):
            formats[5] = "rgba32f"
        elif mode in (MODES["int8"], MODES["uint8"]):
            formats[4] = "rgba32ui"
    grouped, packed, dot = layout
    if texel and grouped:
        formats.update({1: "r32f", 2: "r32ui"})
    return programs.program(
        dev,
        "matvec.comp",
        {
            **_defines(mode, signed, asym, texel, grouped, packed, dot),
            **variants.defines(dev.info, exact=_exact(mode), reduces=_reduces(mode, grouped)),
        },
        workgroup=workgroup_size(dev),
        spec={"ROWS": rows_per_workgroup(dev, mode)},
        texel=formats or None,
    )


def _rowsum(qt: QuantizedTensor, steps: list[Dispatch], made: dict[str, Buffer]) -> Buffer:
    """V_ig = sum_{j in g} (Q_ij - z_ig) (G = 1: one per row), computed on the device once
    per weight tensor.

    A new buffer goes into ``made`` with the dispatches that fill it appended to ``steps``;
    the caller keeps it as ``qt.rowsum`` only once those have run (an interrupted first
    call must not leave row sums that were never computed)."""
    if qt.rowsum is not None and qt.rowsum.alive:
        return qt.rowsum
    rowsum = made["rowsum"] = Buffer(qt.device, 4 * qt.shape[0] * mg.groups(qt))
    scale, zero = _whole_groups(qt)
    for ch in qt.chunks:
        steps.append(_rowsum_step(qt, ch, scale, zero, rowsum, ch.row0, 0, ch.rows, ch.row0))
    return rowsum


def _rowsum_step(
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
    texel = _texel(qt, MODE_ROWSUM, None)
    prog = _program(dev, MODE_ROWSUM, qt.symmetric, not qt.symmetric, texel, layout)
    if layout[0]:
        words = mg.push_words(qt, workgroup_size(dev), rows, row0, prow0, start, (0, 0))
    else:
        words = (qt.row_bytes // BLOCK, qt.shape[1], rows, row0, int(qt.per_channel), 0, 0)
    dummy = c.dummy_buffer(dev)
    buffers = (ch.buffer, scale, zero, out, dummy, dummy, dummy, dummy)
    return prog.record(*buffers, groups=_grid(dev, rows, MODE_ROWSUM), push=c.pack_u32(*words))


def _quantize_activations(
    qt: QuantizedTensor, xbuf: Buffer, mode: int, steps: list[Dispatch]
) -> Buffer:
    """Append the dispatch that quantizes x on the device; returns its output buffer."""
    dev = qt.device
    n = qt.shape[1]
    words = mg.stored_columns(qt) // 4  # packed rows span twice their bytes in columns
    out = qt.scratch_buffer("qx", 16 + 4 * words)
    activations = "int8" if mode == 1 else "uint8"
    prog = programs.program(
        dev,
        "quantize_act.comp",
        {"ACT": mode, **variants.defines(dev.info, exact=True, reduces=True)},
        workgroup=ACT_WORKGROUP,
    )
    push = c.pack_u32(n, words) + np.array([ACT_INV[activations], ACT_TINY], dtype="<f4").tobytes()
    steps.append(prog.record(xbuf, out, push=push))
    return out
