"""Softmax and log-softmax over a set of axes: online (two passes over the data) or safe
(three passes).

Semantics, identical for both algorithms and for :mod:`vkcore.reference`:

* computed in float32; float16/float64 and integer input is converted, the result is
  float32 (integers beyond 2^24 in magnitude round in that conversion);
* ``axis`` is an int, a tuple of ints or None (see :mod:`vkcore.kernels.axes`); the
  kernels see rows, the chosen axes flattened last;
* ``-inf`` entries give exactly 0 (log: ``-inf``); a row of only ``-inf`` gives all zeros
  (log: all ``-inf``);
* a NaN or ``+inf`` anywhere in a row makes that whole row NaN, and no other row;
* zero rows or a zero-length axis give an empty float32 result without a dispatch.

log_softmax is within 1e-6 + 1e-6 |y| of a float64 reference. Softmax accuracy against a
float64 reference: max abs error <= 1e-6, rows sum to 1 within 1e-5,
for both algorithms and any order of the input (tests/test_softmax_accuracy.py). The online
kernel does not rescale its sum each time the maximum grows (each rescale adds one exp's
error, and an ascending row grows it at every step): it sums exp(x - r) against a reference
r moved only when a value exceeds it by more than MARGIN (shaders/softmax_online.comp), so
rescales are rare and each shrinks the older sum, and its errors, by e^-MARGIN or more.

Any workgroup size the device allows works (shaders/workgroup_reduce.glsl). Inputs larger
than one storage-buffer binding (``device.info.max_storage_buffer_range``) are split by
rows, and a row longer than a binding into pieces whose partial (m, l) states are merged
before each piece is written (:func:`_softmax_split`).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import spirv
from ..buffer import Buffer
from ..commands import Dispatch
from ..device import Device, resolve
from ..host_buffer import HOST_SHARING_MIN_BYTES as IMPORT_MIN_BYTES
from ..host_buffer import HostBuffer, can_import_host
from ..pools import buffer_pool, host_pool
from ..program import Program
from ..tensor import Tensor
from . import _common as c
from . import axes, programs, variants

ALGORITHMS = ("online", "safe")
# Every shader variant _dispatches can request (precompiled into the wheel).
# Stages that write the output also come as LOG=1 (log_softmax); the others only as LOG=0.
_STAGES = {"online": [0, 1, 2], "safe": [0, 1, 2, 3]}
_WRITE_STAGES = {"online": [0, 2], "safe": [0, 3]}
# Stages that reduce over the workgroup (the others only merge stored partial states):
# only these get a shared-memory variant (SUBGROUP=0, see variants.defines).
_REDUCING_STAGES = {"softmax_online.comp": (0, 1), "softmax_safe.comp": (0, 1, 2)}
for _alg in ALGORITHMS:
    for _log, _stages in ((0, _STAGES[_alg]), (1, _WRITE_STAGES[_alg])):
        for _stage in _stages:
            _shader = f"softmax_{_alg}.comp"
            variants.register(
                _shader,
                spirv.define_grid(STAGE=[_stage], VEC4=[0, 1], TEXEL=[0, 1], LOG=[_log]),
                exact=False,
                reduces=_stage in _REDUCING_STAGES[_shader],
            )
spirv.register_variants("softmax_roofline.comp", spirv.define_grid(TEXEL=[0, 1]))
# A workgroup's share of a row is at least this many elements when a row is split.
MIN_CHUNK_ELEMENTS = 8192
# Loop steps one invocation may take per pass. llvmpipe ends any shader loop after 65,535
# iterations in total (a guard against hangs), and a workgroup makes up to three passes
# over its chunk, so longer chunks are split across workgroups instead.
MAX_STEPS_PER_PASS = 16384
# Workgroup size on GPUs; on a CPU device it is the subgroup size (see workgroup_size).
GPU_WORKGROUP = 256


def workgroup_size(device: Device) -> int:
    """Invocations per workgroup: the value ``vkcore tune`` stored for this device, else
    one subgroup on a CPU device and GPU_WORKGROUP elsewhere.

    lavapipe runs a workgroup of one subgroup (8 lanes of a 256-bit vector) without
    shared memory or barrier switches; measured 3-4x faster per pass there than 64.
    """
    from .. import tune

    tuned = tune.choice(device, "softmax_workgroup")
    if tuned is not None:
        return int(tuned)
    if device.info.is_cpu:
        return max(1, device.info.subgroup_size or 8)
    info = device.info
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    return min(GPU_WORKGROUP, limit)


@dataclass(frozen=True)
class Plan:
    """How one softmax call is laid out on the device."""

    rows: int
    n: int  # row length in elements
    vec4: bool
    units: int  # row length in load units (vec4 or float)
    chunk: int  # units per workgroup
    nchunks: int  # workgroups per row
    workgroup: int


def plan(device: Device, rows: int, n: int, workgroup: int | None = None) -> Plan:
    """Split rows across workgroups when there are too few rows to fill the device, and
    whenever a row is longer than MAX_STEPS_PER_PASS steps of one workgroup."""
    wg = workgroup_size(device) if workgroup is None else workgroup
    vec4 = n % 4 == 0
    units = n // 4 if vec4 else n
    target = 4 * c.parallelism(device)
    nchunks = 1
    if rows < target:
        min_units = max(1, MIN_CHUNK_ELEMENTS // (4 if vec4 else 1))
        nchunks = max(1, min(c.ceil_div(units, min_units), c.ceil_div(target, rows)))
    nchunks = max(nchunks, c.ceil_div(units, MAX_STEPS_PER_PASS * wg))
    chunk = c.ceil_div(c.ceil_div(units, nchunks), wg) * wg
    nchunks = c.ceil_div(units, chunk)
    return Plan(rows, n, vec4, units, chunk, nchunks, wg)


_plans: weakref.WeakKeyDictionary[Device, dict[tuple[int, int, int], Plan]] = (
    weakref.WeakKeyDictionary()
)


def _cached_plan(device: Device, rows: int, n: int) -> Plan:
    """plan() memoized per device and workgroup size (a few shapes recur; bounded)."""
    wg = workgroup_size(device)
    table = _plans.setdefault(device, {})
    p = table.get((rows, n, wg))
    if p is None:
        if len(table) >= 256:
            table.clear()
        p = table[(rows, n, wg)] = plan(device, rows, n, workgroup=wg)
    return p


def _program(
    device: Device, shader: str, stage: int, p: Plan, texel: str | None, log: bool
) -> Program:
    """The Program of one softmax variant on ``device``."""
    extra = variants.defines(device.info, exact=False, reduces=stage in _REDUCING_STAGES[shader])
    defines = {"STAGE": stage, "VEC4": int(p.vec4), "TEXEL": int(texel is not None)}
    return programs.program(
        device,
        shader,
        {**defines, "LOG": int(log), **extra},
        workgroup=p.workgroup,
        texel={0: texel} if texel else None,
    )


def _split_stages(algorithm: str) -> list[int]:
    """Shader stages of a split row: partial states, (safe: partial sums,) merge and write."""
    return _STAGES[algorithm][1:]


def _dispatches(
    device: Device,
    p: Plan,
    algorithm: str,
    x: Buffer,
    y: Buffer,
    parts: Buffer,
    x_offset: int = 0,
    *,
    stages: list[int] | None = None,
    nparts: int | None = None,
    part0: int = 0,
    log: bool = False,
) -> list[Dispatch]:
    """The dispatches of ``stages`` (default: all of them) for the rows of ``p``; a row's
    states are parts ``part0 .. part0 + p.nchunks - 1`` of ``nparts`` (default p.nchunks).
    ``log``: the writing stages write log_softmax."""
    shader = f"softmax_{algorithm}.comp"
    if stages is None:
        stages = [0] if p.nchunks == 1 else _split_stages(algorithm)
    max_rows = device.info.max_compute_work_group_count[1]
    steps = []
    texel = c.texel_format(device, x, "rgba32f" if p.vec4 else "r32f")
    for stage in stages:
        prog = _program(device, shader, stage, p, texel, log and stage in _WRITE_STAGES[algorithm])
        for first in range(0, p.rows, max_rows):
            count = min(max_rows, p.rows - first)
            push = c.pack_u32(p.units, first, p.chunk, nparts or p.nchunks, x_offset, part0)
            steps.append(prog.record(x, y, parts, groups=(p.nchunks, count, 1), push=push))
    # Stages of one slice depend on each other; order stages outermost so barriers suffice.
    return steps


def softmax(
    x: Any,
    axis: Any = -1,
    *,
    algorithm: str = "online",
    out: Any = None,
    device: Device | None = None,
) -> Any:
    """Softmax of ``x`` over ``axis``; numpy in, numpy out (Tensor in, Tensor out).

    ``axis`` is an int, a tuple of distinct ints (those axes normalized together) or None
    (the whole array); the default -1 is PyTorch's habit (scipy's default is None).
    ``algorithm`` is ``"online"`` (running max and sum in one pass, then a write pass) or
    ``"safe"`` (max pass, sum pass, write pass). ``out``, a C-contiguous float32 array (or
    Tensor) of ``x``'s shape, receives the result and is returned; it may be ``x`` itself.
    See the module docstring for semantics.
    """
    return _normalized(x, axis, algorithm, out, device, log=False)


def log_softmax(
    x: Any,
    axis: Any = -1,
    *,
    algorithm: str = "online",
    out: Any = None,
    device: Device | None = None,
) -> Any:
    """``x - m - log(l)`` over ``axis``, from the same statistics pass as :func:`softmax`
    (one read for ``m`` and ``l``, one for the output). ``-inf`` entries give ``-inf``, an
    all ``-inf`` row gives ``-inf`` everywhere (the log of its zero probabilities), a NaN
    or ``+inf`` in a row makes the row NaN. Arguments as for :func:`softmax`."""
    return _normalized(x, axis, algorithm, out, device, log=True)


def _normalized(
    x: Any, axis: Any, algorithm: str, out: Any, device: Device | None, log: bool
) -> Any:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    data = _input(x)
    ndim = len(data.shape)
    if ndim == 0:
        raise ValueError("x must have at least one dimension, got a 0-d array")
    row_axes = axes.normalize_axes(axis, ndim)
    if isinstance(data, Tensor):
        if device is not None and device is not data.device:
            raise ValueError("device must be the Tensor's own device (or None)")
        if not axes.is_trailing(row_axes, ndim):
            raise ValueError(
                "a Tensor is normalized over its last axes only (axis=-1, a tuple of the "
                f"last axes, or None), got axis={axis!r}"
            )
        return _softmax_tensor(data, len(row_axes), algorithm, log, _tensor_out(out, data))
    dev = resolve(device)
    if isinstance(out, Tensor):
        raise TypeError("out must be a numpy array for a numpy x (a Tensor out takes a Tensor x)")
    target = None if out is None else axes.check_out(out, data.shape)
    rows, shape, restore = axes.as_rows(data, row_axes)
    trailing = axes.is_trailing(row_axes, ndim)
    if rows.nbytes > binding_bytes(dev):
        # Written a binding at a time while later pieces are still read: straight into
        # ``out`` only where it is the input itself (each piece is read before it is
        # written) or does not overlap it.
        direct = target is not None and trailing and _separate_or_same(target, rows)
        result = target if direct and target is not None else c.result_array(dev, shape)
        _softmax_numpy_split(dev, rows, result.reshape(rows.shape), algorithm, log)
    elif rows.size and _importable(dev, rows):
        result = _softmax_imported(dev, rows, shape, algorithm, log)
    else:
        # Written straight into ``out`` where its layout is the rows' own.
        result = target if target is not None and trailing else c.result_array(dev, shape)
        if rows.size:
            _softmax_numpy(dev, rows, result.reshape(rows.shape), algorithm, log)
    if target is None:
        return restore(result)
    if result is not target:
        np.copyto(target, restore(result))
    return target


def _separate_or_same(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` share no memory, or are the same bytes in the same order."""
    if not np.may_share_memory(a, b):
        return True
    same_start = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return same_start and a.nbytes == b.nbytes and a.flags.c_contiguous and b.flags.c_contiguous


def _input(x: Any) -> np.ndarray | Tensor:
    """A float32 Tensor, or an array of floats or integers (integers become float32, exact
    up to 2^24 in magnitude); bool, complex and object input is a TypeError."""
    if type(x) is np.ndarray and x.dtype == np.float32:  # the common case, checked first
        return x
    if isinstance(x, (np.ndarray, list, tuple, int, np.integer)):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            arr = None  # ragged: float_input says so
        if arr is not None and arr.dtype.kind in "iu":
            return arr.astype(np.float32)
    return c.float_input(x, "x")


def _tensor_out(out: Any, x: Tensor) -> Tensor | None:
    """``out`` checked for a Tensor input: None, or a float32 Tensor like ``x``."""
    if out is None:
        return None
    if not isinstance(out, Tensor):
        raise TypeError(f"out must be a vkcore.Tensor for a Tensor x, got {type(out).__name__}")
    if out.device is not x.device:
        raise ValueError("out must be a Tensor on x's device, got one on another device")
    if out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(
            f"out must be a float32 Tensor of shape {x.shape}, got a {out.dtype} Tensor of "
            f"shape {out.shape}"
        )
    c.check_tensor(out, "out")  # released (an empty Tensor has no buffer and is fine)
    return out


def _importable(dev: Device, arr: np.ndarray) -> bool:
    """Large, writable, vec4- or float-aligned input on a device that imports host memory."""
    if arr.nbytes < IMPORT_MIN_BYTES or not arr.flags.writeable or not can_import_host(dev):
        return False
    unit = 16 if arr.shape[-1] % 4 == 0 else 4
    if arr.ctypes.data % unit:
        return False
    align = dev.info.min_imported_host_pointer_alignment
    span = arr.ctypes.data % align + arr.nbytes
    return -(-span // align) * align <= dev.info.max_storage_buffer_range


def _softmax_imported(
    dev: Device, arr: np.ndarray, shape: tuple[int, ...], algorithm: str, log: bool
) -> np.ndarray:
    """Softmax of the rows ``arr`` with no host copy: the input array's pages are imported
    as a buffer (VK_EXT_external_memory_host) for the duration of the call, and the kernel
    writes a result array of ``shape`` from the host pool in place (its memory stays
    imported)."""
    n = arr.shape[-1]
    rows = arr.size // n
    p = _cached_plan(dev, rows, n)
    out, y = host_pool(dev).empty(shape, np.float32, imported=True)
    assert y is not None  # can_import_host(dev) holds here
    pool = buffer_pool(dev)
    parts = c.dummy_buffer(dev)
    x = HostBuffer(dev, arr)
    try:
        if p.nchunks > 1:
            parts = pool.acquire(rows * p.nchunks * 16)
        offset = x.offset // (16 if p.vec4 else 4)
        steps = _dispatches(dev, p, algorithm, x, y, parts, offset, log=log)
        dev.submitter.run(steps, read_seconds=False)
    finally:
        x.destroy()
        if p.nchunks > 1:
            pool.release(parts)
    return out


def _softmax_numpy(
    dev: Device, arr: np.ndarray, out: np.ndarray, algorithm: str, log: bool
) -> None:
    """Softmax of the C-contiguous float32 ``arr`` into ``out`` through pooled buffers.

    A repeated call of the same shape gets the same buffers back from the device's pool,
    so the submitter resubmits the command buffer it recorded the first time.
    """
    n = arr.shape[-1]
    rows = arr.size // n
    p = _cached_plan(dev, rows, n)
    pool = buffer_pool(dev)
    borrowed: list[Buffer] = []
    try:
        x = pool.acquire(arr.nbytes)
        borrowed.append(x)
        x.write(arr)
        y = pool.acquire(arr.nbytes)
        borrowed.append(y)
        if p.nchunks > 1:
            parts = pool.acquire(rows * p.nchunks * 16)
            borrowed.append(parts)
        else:
            parts = c.dummy_buffer(dev)
        steps = _dispatches(dev, p, algorithm, x, y, parts, log=log)
        dev.submitter.run(steps, read_seconds=False)
        y.read(out)
    finally:
        for buf in borrowed:
            pool.release(buf)


def _softmax_tensor(
    x: Tensor, row_ndim: int, algorithm: str, log: bool, out: Tensor | None
) -> Tensor:
    """Rows of the last ``row_ndim`` axes of ``x``, into ``out`` (which may be ``x``:
    every element is read by the invocation that writes it, before it writes it) or
    into a new Tensor."""
    dev = x.device
    n = math.prod(x.shape[len(x.shape) - row_ndim :])
    rows = x.size // n if n else 0
    if rows == 0 or n == 0:
        return out if out is not None else Tensor.empty(x.shape, np.float32, dev)
    if x.nbytes > binding_bytes(dev):
        return _softmax_tensor_split(x, rows, n, algorithm, log, out)
    p = _cached_plan(dev, rows, n)
    pool = buffer_pool(dev)
    # A leased output buffer goes back to the pool (pages already touched) when the
    # Tensor's buffer is destroyed or collected, instead of being freed.
    y = out if out is not None else Tensor(pool.lease(x.nbytes), x.shape, np.dtype(np.float32), dev)
    assert x.buffer is not None and y.buffer is not None
    parts = pool.acquire(rows * p.nchunks * 16) if p.nchunks > 1 else c.dummy_buffer(dev)
    try:
        steps = _dispatches(dev, p, algorithm, x.buffer, y.buffer, parts, log=log)
        dev.submitter.run(steps)
    finally:
        if p.nchunks > 1:
            pool.release(parts)
    return y


# ------------------------------------------------------------- inputs larger than a binding
def binding_bytes(device: Device) -> int:
    """The most bytes one storage-buffer binding may cover on ``device``; larger inputs are
    split by rows, and rows longer than this into pieces (see :func:`_softmax_split`)."""
    return int(device.info.max_storage_buffer_range)


def _pieces(device: Device, n: int) -> list[tuple[int, int]]:
    """[start, end) element ranges of a row of ``n``: equal pieces of at most one binding,
    whole vec4s when the row is (so every piece keeps the vec4 loads)."""
    most = max(1, binding_bytes(device) // 4)
    if n % 4 == 0 and most >= 4:
        most -= most % 4
    size = c.ceil_div(n, c.ceil_div(n, most))
    if n % 4 == 0 and most >= 4:
        size = c.ceil_div(size, 4) * 4
    return [(a, min(a + size, n)) for a in range(0, n, size)]


def _softmax_split(
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
    limit = binding_bytes(device)
    pool = buffer_pool(device)
    if n * 4 <= limit:
        per = max(1, limit // (n * 4))
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
    plans = [_cached_plan(device, rows, (b - a) // rows) for a, b in spans]
    # One span: all stages in one submission. Pieces: each stage over every piece in turn.
    stage_lists: list[list[int] | None] = [None]
    if len(spans) > 1:
        stage_lists = [[s] for s in _split_stages(algorithm)]
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
                steps = _dispatches(
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
                device.submitter.run(steps, read_seconds=False)
                if last:
                    store(y, a, b)
                part0 += p.nchunks
    finally:
        for buf in borrowed:
            pool.release(buf)


def _softmax_numpy_split(
    dev: Device, arr: np.ndarray, out: np.ndarray, algorithm: str, log: bool
) -> None:
    """The rows ``arr`` (larger than one binding) into ``out``, a binding at a time."""
    flat_in, flat_out = arr.reshape(-1), out.reshape(-1)

    def load(buf: Buffer, a: int, b: int) -> None:
        buf.write(flat_in[a:b])

    def store(buf: Buffer, a: int, b: int) -> None:
        buf.read(flat_out[a:b])

    _softmax_split(dev, arr.shape[0], arr.shape[1], algorithm, load, store, log)


def _softmax_tensor_split(
    x: Tensor, rows: int, n: int, algorithm: str, log: bool, out: Tensor | None
) -> Tensor:
    """Tensor in, Tensor out for a Tensor larger than one binding: pieces are copied on the
    device into buffers of at most one binding and the results copied back (into ``out``,
    which may be ``x``: each piece is loaded for the last time before its result is stored)."""
    dev = x.device
    y = out if out is not None else Tensor.empty(x.shape, np.float32, dev)
    assert x.buffer is not None and y.buffer is not None
    src, dst = x.buffer, y.buffer

    def load(buf: Buffer, a: int, b: int) -> None:
        with dev.lock:
            dev.submitter._copy(src, a * 4, buf, 0, (b - a) * 4)

    def store(buf: Buffer, a: int, b: int) -> None:
        with dev.lock:
            dev.submitter._copy(buf, 0, dst, a * 4, (b - a) * 4)

    _softmax_split(dev, rows, n, algorithm, load, store, log)
    return y


def roofline_copy(x: Tensor, y: Tensor) -> float | None:
    """Copy x to y with the softmax kernels' access pattern; device seconds (for the bench).

    Both tensors must be float32 on one device with the same number of elements, a
    multiple of 4. What this copy reaches is the most any softmax pass can reach here.
    """
    if x.device is not y.device or x.dtype != np.float32 or y.dtype != np.float32:
        raise ValueError("x and y must be float32 Tensors on one device")
    if x.size != y.size or x.size % 4 or not x.size:
        raise ValueError(
            f"x and y must have the same non-zero size, a multiple of 4; got {x.size}, {y.size}"
        )
    dev = x.device
    units = x.size // 4
    wg = workgroup_size(dev)
    groups = min(units, 4 * c.parallelism(dev) * 64)
    chunk = c.ceil_div(c.ceil_div(units, groups), wg) * wg
    chunk = min(max(chunk, wg), MAX_STEPS_PER_PASS * wg)
    groups = c.ceil_div(units, chunk)
    assert x.buffer is not None and y.buffer is not None
    texel = c.texel_format(dev, x.buffer, "rgba32f")
    prog = programs.program(
        dev,
        "softmax_roofline.comp",
        {"TEXEL": int(texel is not None)},
        workgroup=wg,
        texel={0: texel} if texel else None,
    )
    step = prog.record(x.buffer, y.buffer, groups=groups, push=c.pack_u32(units, chunk))
    return dev.submitter.run([step])
