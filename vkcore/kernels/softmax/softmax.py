"""Softmax and log-softmax over a set of axes: online (two passes over the data) or safe
(three passes).

Semantics, identical for both algorithms and for :mod:`vkcore.reference`:

* computed in float32; float16/float64 and integer input is converted, the result is
  float32 (integers beyond 2^24 in magnitude round in that conversion);
* ``axis`` is an int, a tuple of ints or None (see :mod:`vkcore.kernels.softmax.axes`); the
  kernels see rows, the chosen axes flattened last;
* ``-inf`` entries give exactly 0 (log: ``-inf``); a row of only ``-inf`` gives all zeros
  (log: all ``-inf``);
* a NaN or ``+inf`` anywhere in a row makes that whole row NaN, and no other row;
* zero rows or a zero-length axis give an empty float32 result without a dispatch.

log_softmax is within 1e-6 + 1e-6 |y| of a float64 reference. Softmax accuracy against a
float64 reference: max abs error <= 1e-6, rows sum to 1 within 1e-5,
for both algorithms and any order of the input (test_softmax_accuracy.py). The online
kernel does not rescale its sum each time the maximum grows (each rescale adds one exp's
error, and an ascending row grows it at every step): it sums exp(x - r) against a reference
r moved only when a value exceeds it by more than MARGIN (shaders/softmax_online.comp), so
rescales are rare and each shrinks the older sum, and its errors, by e^-MARGIN or more.

Any workgroup size the device allows works (shaders/workgroup_reduce.glsl). Inputs larger
than one storage-buffer binding (``device.info.max_storage_buffer_range``) are split by
rows, and a row longer than a binding into pieces whose partial (m, l) states are merged
before each piece is written (:mod:`vkcore.kernels.softmax.split`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkcore.compute.repeat import SMALL_CALL_BYTES, Repeat, Repeats
from vkcore.compute.tensor import Tensor, check_on_device, device_for
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer, imports_host_array
from vkcore.device.memory.pools import buffer_pool, host_pool
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.softmax import axes
from vkcore.kernels.softmax.split import numpy_split, tensor_split
from vkcore.kernels.softmax.stages import ALGORITHMS, cached_plan, dispatches


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


# Small calls kept for an exact repeat (vkcore.compute.repeat), by signature.
_repeats = Repeats()


def _repeated(x: Any, axis: Any, algorithm: str, out: Any, device: Device | None, log: bool) -> Any:
    """The result of a call that repeats a kept one (the full call's result), else None.
    A repeat is a C-contiguous float32 array (or a float32 Tensor with a Tensor ``out``)
    of a kept call's shape, with the same int ``axis``, ``algorithm`` and ``log``."""
    if type(axis) is not int or type(algorithm) is not str:  # (hashable, as the full call's)
        return None
    if type(x) is np.ndarray:
        if not c.plain_f32(x) or not _plain_out(out, x.shape):
            return None
        repeat = c.found(_repeats.get(resolve(device), (x.shape, axis, algorithm, log)))
        if repeat is None:
            return None
        y = np.empty(x.shape, np.float32) if out is None else out
        return y if repeat.run((x, y)) else None
    if type(x) is Tensor and type(out) is Tensor and x.dtype == out.dtype == np.float32:
        if x.shape != out.shape or (device is not None and device is not x.device):
            return None
        repeat = c.found(_repeats.get(x.device, _tensor_key(x, out, axis, algorithm, log)))
        if repeat is None or not repeat.binds((x.buffer, out.buffer)):
            return None
        return out if repeat.run(()) else None
    return None


def _tensor_key(x: Tensor, out: Tensor, axis: int, algorithm: str, log: bool) -> Any:
    """The signature of a call on Tensors into ``out`` (their buffers by identity: a
    repeat checks they are the very objects, ``Repeat.binds``)."""
    return (x.shape, axis, algorithm, log, id(x.buffer), id(out.buffer))


def _plain_out(out: Any, shape: tuple[int, ...]) -> bool:
    """``out`` is None, or a float32 array a repeat writes as the full call would."""
    return out is None or (c.plain_f32(out, shape) and out.flags.writeable)


def _normalized(
    x: Any, axis: Any, algorithm: str, out: Any, device: Device | None, log: bool
) -> Any:
    repeated = _repeated(x, axis, algorithm, out, device, log)
    if repeated is not None:
        return repeated
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {shown(algorithm)}")
    data = c.row_input(x, "x", device)  # inside a sequence: a Tensor
    ndim = len(data.shape)
    row_axes = axes.normalize_axes(axis, ndim)
    if isinstance(data, Tensor):
        device_for(data.device, device)
        if not axes.is_trailing(row_axes, ndim):
            raise ValueError(
                "a Tensor is normalized over its last axes only (axis=-1, a tuple of the "
                f"last axes, or None), got axis={shown(axis)}"
            )
        y = _tensor_out(out, data, x)
        key: tuple[Any, ...] | None = None
        plain = type(axis) is int and data.dtype == np.float32
        if y is not None and y.buffer is not None and plain:
            key = _tensor_key(data, y, axis, algorithm, log)
        return _softmax_tensor(data, len(row_axes), algorithm, log, y, key)
    dev = resolve(device)
    if isinstance(out, Tensor):
        raise TypeError("out must be a numpy array for a numpy x (a Tensor out takes a Tensor x)")
    target = None if out is None else axes.check_out(out, data.shape)
    rows, shape, restore = axes.as_rows(data, row_axes)
    trailing = axes.is_trailing(row_axes, ndim)
    if rows.nbytes > storage.binding_limit(dev):
        # Written a binding at a time while later pieces are still read: straight into
        # ``out`` only where it is the input itself (each piece is read before it is
        # written) or does not overlap it.
        direct = target is not None and trailing and _separate_or_same(target, rows)
        result = target if direct and target is not None else c.result_array(dev, shape)
        numpy_split(dev, rows, result.reshape(rows.shape), algorithm, log)
    elif rows.size and _importable(dev, rows):
        result = _softmax_imported(dev, rows, shape, algorithm, log)
    else:
        # Written straight into ``out`` where its layout is the rows' own.
        result = target if target is not None and trailing else c.result_array(dev, shape)
        if rows.size:
            key = _numpy_key(x, axis, algorithm, out, log) if trailing else None
            _softmax_numpy(dev, rows, result.reshape(rows.shape), algorithm, log, key)
    if target is None:
        return restore(result)
    if result is not target:
        np.copyto(target, restore(result))
    return target


def _numpy_key(x: Any, axis: Any, algorithm: str, out: Any, log: bool) -> Any:
    """The signature a repeat of this call is found by (:func:`_repeated`), or None for a
    call a repeat would not make the same way (a converted or strided input, a large one,
    an ``out`` it would not write directly)."""
    if not c.plain_f32(x) or type(axis) is not int or x.nbytes > SMALL_CALL_BYTES:
        return None
    if not _plain_out(out, x.shape):
        return None
    return (x.shape, axis, algorithm, log)


def _separate_or_same(a: np.ndarray, b: np.ndarray) -> bool:
    """True when ``a`` and ``b`` share no memory, or are the same bytes in the same order."""
    if not np.may_share_memory(a, b):
        return True
    same_start = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return same_start and a.nbytes == b.nbytes and a.flags.c_contiguous and b.flags.c_contiguous


def _tensor_out(out: Any, x: Tensor, given: Any) -> Tensor | None:
    """``out`` checked for a Tensor input (``given``, or a numpy ``given`` uploaded as
    ``x`` inside a sequence): None, or a float32 Tensor like ``x``."""
    if out is None:
        return None
    if not isinstance(out, Tensor):
        why = (
            "for a Tensor x"
            if isinstance(given, Tensor)
            else "inside a vkcore.sequence (a numpy x is uploaded as a Tensor when recorded "
            "and the result computed at submission)"
        )
        raise TypeError(f"out must be a vkcore.Tensor {why}, got {type(out).__name__}")
    check_on_device(out.device, x.device, "out", "x's")
    if out.dtype != np.float32 or out.shape != x.shape:
        raise ValueError(
            f"out must be a float32 Tensor of shape {x.shape}, got a {out.dtype} Tensor of "
            f"shape {out.shape}"
        )
    c.check_tensor(out, "out")  # released (an empty Tensor has no buffer and is fine)
    return out


def _importable(dev: Device, arr: np.ndarray) -> bool:
    """Large, writable, vec4- or float-aligned input on a device that imports host memory."""
    if not imports_host_array(dev, arr):
        return False
    unit = 16 if arr.shape[-1] % 4 == 0 else 4
    if arr.ctypes.data % unit:
        return False
    align = dev.info.min_imported_host_pointer_alignment
    span = arr.ctypes.data % align + arr.nbytes
    return -(-span // align) * align <= storage.binding_limit(dev)


def _softmax_imported(
    dev: Device, arr: np.ndarray, shape: tuple[int, ...], algorithm: str, log: bool
) -> np.ndarray:
    """Softmax of the rows ``arr`` with no host copy: the input array's pages are imported
    as a buffer (VK_EXT_external_memory_host) for the duration of the call, and the kernel
    writes a result array of ``shape`` from the host pool in place (its memory stays
    imported)."""
    n = arr.shape[-1]
    rows = arr.size // n
    p = cached_plan(dev, rows, n)
    out, y = host_pool(dev).empty(shape, np.float32, imported=True)
    assert y is not None  # can_import_host(dev) holds here
    pool = buffer_pool(dev)
    parts = c.dummy_buffer(dev)
    x = HostBuffer(dev, arr)
    try:
        if p.nchunks > 1:
            parts = pool.acquire(rows * p.nchunks * 16)
        offset = x.offset // (16 if p.vec4 else 4)
        steps = dispatches(dev, p, algorithm, x, y, parts, offset, log=log)
        dev.run(steps)
    finally:
        x.destroy()
        if p.nchunks > 1:
            pool.release(parts)
    return out


def _softmax_numpy(
    dev: Device, arr: np.ndarray, out: np.ndarray, algorithm: str, log: bool, key: Any = None
) -> None:
    """Softmax of the C-contiguous float32 ``arr`` into ``out`` through pooled buffers.

    A repeated call of the same shape gets the same buffers back from the device's pool,
    so the device resubmits the command buffer it recorded the first time; once it keeps
    one, a call with a signature ``key`` keeps the buffers too, for an exact repeat.
    """
    n = arr.shape[-1]
    rows = arr.size // n
    p = cached_plan(dev, rows, n)
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
        steps = dispatches(dev, p, algorithm, x, y, parts, log=log)
        kept = dev.run(steps)
        y.read(out)
        if kept is not None and key is not None:
            repeat = Repeat(dev, kept, [(0, x)], [(1, y)], owned=borrowed)
            borrowed = []  # the repeat's now, given back with it
            _repeats.put(dev, key, c.stamped(repeat))
    finally:
        for buf in borrowed:
            pool.release(buf)


def _softmax_tensor(
    x: Tensor, row_ndim: int, algorithm: str, log: bool, out: Tensor | None, key: Any = None
) -> Tensor:
    """Rows of the last ``row_ndim`` axes of ``x``, into ``out`` (which may be ``x``:
    every element is read by the invocation that writes it, before it writes it) or
    into a new Tensor."""
    dev = x.device
    n = math.prod(x.shape[len(x.shape) - row_ndim :])
    rows = x.size // n if n else 0
    if rows == 0 or n == 0:
        return out if out is not None else Tensor.empty(x.shape, np.float32, dev)
    if x.nbytes > storage.binding_limit(dev):
        return tensor_split(x, rows, n, algorithm, log, out)
    p = cached_plan(dev, rows, n)
    pool = buffer_pool(dev)
    y = out if out is not None else c.result_tensor(dev, x.shape)
    assert x.buffer is not None and y.buffer is not None
    parts = pool.acquire(rows * p.nchunks * 16) if p.nchunks > 1 else c.dummy_buffer(dev)
    borrowed = [parts] if p.nchunks > 1 else []
    try:
        steps = dispatches(dev, p, algorithm, x.buffer, y.buffer, parts, log=log)
        kept = dev.run(steps)
        if kept is not None and key is not None:  # an exact repeat binds the same two
            repeat = Repeat(dev, kept, (), (), (x.buffer, y.buffer), owned=borrowed)
            borrowed = []
            _repeats.put(dev, key, c.stamped(repeat))
    finally:
        for buf in borrowed:
            pool.release(buf)
    return y
