"""Argument checks and small helpers shared by the kernel modules."""

from __future__ import annotations

import math
import os
import struct
from typing import Any

import numpy as np

from vkcore.base import config
from vkcore.base.per_device import PerDeviceMap
from vkcore.compute.repeat import Repeat
from vkcore.compute.tensor import Tensor, asarray
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HOST_SHARING_MIN_BYTES as POOLED_RESULT_BYTES
from vkcore.device.memory.pools import buffer_pool, host_pool
from vkcore.kernels import tuning

_FLOAT_KINDS = ("f",)
_dummies: PerDeviceMap[Buffer] = PerDeviceMap()


def pack_u32(*values: int) -> bytes:
    """Push constants: little-endian uint32 words."""
    return struct.pack(f"<{len(values)}I", *values)


class ReleasedError(RuntimeError, ValueError):
    """An argument whose device memory was released: a RuntimeError (as for any released
    buffer) and a ValueError (a bad argument)."""


def check_tensor(t: Tensor, name: str) -> None:
    """Raise if Tensor ``t`` cannot be read: its device is closed, or its buffer released."""
    t.device.check()
    if t.buffer is not None and not t.buffer.alive:
        raise ReleasedError(
            f"{name} is a released Tensor (its buffer was destroyed; its device is still open)"
        )


def float_input(x: Any, name: str, *, also: str = "") -> np.ndarray | Tensor:
    """Accept a Tensor of float32 or an array-like of float16/32/64 (returned as given);
    ``also`` ends the refusal of another dtype (what else a caller takes)."""
    if isinstance(x, Tensor):
        if x.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 Tensor, got a {x.dtype} Tensor")
        check_tensor(x, name)
        return x
    if x is None or isinstance(x, (str, bytes, dict, set)):
        raise TypeError(f"{name} must be a numpy array or a vkcore.Tensor, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise TypeError(f"{name} must be array-like of floats: {exc}") from None
    if arr.dtype == object and arr.ndim == 0:  # not an array at all (a QuantizedTensor, ...)
        raise TypeError(
            f"{name} must be a float numpy array or a float32 vkcore.Tensor, got {type(x).__name__}"
        )
    if arr.dtype.kind not in _FLOAT_KINDS or arr.dtype.itemsize > 8:
        raise TypeError(
            f"{name} must have a float16, float32 or float64 dtype, got {arr.dtype}{also}"
        )
    return arr


def numeric_input(x: Any, name: str) -> np.ndarray | Tensor:
    """:func:`float_input`, also taking integer arrays (as float32: exact up to 2^24 in
    magnitude); bool, complex, string and object input is a TypeError."""
    if type(x) is np.ndarray and x.dtype == np.float32:  # the common case, checked first
        return x
    if isinstance(x, (np.ndarray, list, tuple, int, np.integer)):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            arr = None  # ragged: float_input says so
        if arr is not None and arr.dtype.kind in "iu":
            return arr.astype(np.float32)
    return float_input(x, name, also=" (or an integer dtype, taken as float32)")


def recording(device: Device) -> bool:
    """True while a :func:`vkcore.sequence` records this thread's calls on ``device``:
    kernels then take numpy inputs as Tensors (uploaded now) and return Tensors."""
    return device.recording


def not_recorded(device: Device, call: str, why: str) -> None:
    """RuntimeError naming ``call`` while a sequence records on ``device``: the call needs
    device results on the host before it returns (``why``), which a recording never has."""
    if recording(device):
        raise RuntimeError(
            f"{call} cannot be recorded in a vkcore.sequence: {why}; call it before "
            "or after the `with vkcore.sequence()` block"
        )


def as_recorded(data: Any, device: Device) -> Any:
    """``data`` as a Tensor on ``device`` inside a recording sequence (numpy uploaded
    now: a host write at submission time would be too late), else unchanged."""
    if data is None or isinstance(data, Tensor) or not recording(device):
        return data
    return asarray(np.asarray(data), device=device)


def row_input(x: Any, name: str, device: Device | None) -> np.ndarray | Tensor:
    """:func:`numeric_input` of at least one dimension, as a Tensor inside a recording
    sequence (:func:`as_recorded`): what the row kernels (softmax, topk) take."""
    data = numeric_input(x, name)
    if not isinstance(data, Tensor):
        data = as_recorded(data, resolve(device))
    if len(data.shape) == 0:
        raise ValueError(f"{name} must have at least one dimension, got a 0-d array")
    return data


def as_float32(arr: np.ndarray) -> np.ndarray:
    """C-contiguous float32 (a copy only when needed; the input is never written). Values
    beyond float32's range become infinities, silently: the documented conversion (numpy
    would print an overflow warning)."""
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(arr, dtype=np.float32)


def result_array(device: Device, shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialized float32 result: recycled pages (already touched) when large."""
    if math.prod(shape) * 4 >= POOLED_RESULT_BYTES:
        return host_pool(device).empty(shape, np.float32)[0]
    return np.empty(shape, dtype=np.float32)


def result_tensor(device: Device, shape: tuple[int, ...], dtype: Any = np.float32) -> Tensor:
    """A new output Tensor over a buffer leased from the device's pool: no buffer to
    create (tens of microseconds through the binding), and its memory goes back to the
    pool (pages already touched) when the Tensor's buffer is destroyed or collected."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes == 0:
        return Tensor.empty(shape, dt, device)
    return Tensor(buffer_pool(device).lease(nbytes), shape, dt, device)


def dummy_buffer(device: Device) -> Buffer:
    """A small buffer for bindings a call does not use (the variant may still name them in
    code behind a runtime flag, so steps that bind it are ordered like any others)."""
    buf = _dummies.get(device)
    if buf is None or not buf.alive:
        buf = Buffer(device, 256)
        buf.reusable = True  # lives as long as the device: recorded commands may keep it
        _dummies[device] = buf
    return buf


_F32 = np.dtype(np.float32)


def plain_f32(x: Any, shape: tuple[int, ...] | None = None) -> bool:
    """Whether ``x`` is a C-contiguous float32 numpy array (of ``shape``, where given):
    what a kernel binds as its own bytes, and so what an exact repeat of the call
    (vkcore.compute.repeat) copies as it is."""
    return (
        type(x) is np.ndarray
        and x.dtype == _F32
        and x.flags.c_contiguous
        and (shape is None or x.shape == shape)
    )


def call_context() -> tuple[Any, ...]:
    """What a kernel call reads besides its arguments and its device: the per-call
    environment variables and the tuned parameters' generation. Part of every kernel's
    exact-repeat signature (vkcore.compute.repeat): a kept call repeats only under the
    same, so ``VKCORE_TEXEL=0`` or a ``vkcore tune`` trial takes effect at once."""
    return (*config.per_call_values(), tuning.generation())


def found(repeat: Repeat | None) -> Repeat | None:
    """``repeat`` (a kept call just looked up) if it was kept under the per-call context
    of now, else None: read only once one is found, so a miss costs no reading of it."""
    return repeat if repeat is not None and repeat.context == call_context() else None


def stamped(repeat: Repeat) -> Repeat:
    """``repeat`` with the per-call context it was made under, as it is kept."""
    repeat.context = call_context()
    return repeat


def parallelism(device: Device) -> int:
    """How many workgroups keep the device busy: lavapipe's thread count, or a GPU-sized grid."""
    if device.info.is_cpu:
        # lavapipe's own thread count: LP_NUM_THREADS (0: none, it runs on the caller's).
        cores = os.cpu_count() or 1
        return max(1, config.env_int("LP_NUM_THREADS", cores, lo=0, hi=1024))
    return 1024


def row_chunks(
    device: Device, rows: int, units: int, workgroup: int, min_units: int, max_steps: int
) -> tuple[int, int]:
    """(units per workgroup, workgroups per row) for rows of ``units`` load units: a row
    is split when there are too few rows to keep the device busy (each piece at least
    ``min_units``), and whenever one workgroup would take more than ``max_steps`` steps
    (llvmpipe ends an invocation's loops after 65,535 iterations). Chunks are whole
    workgroup strides."""
    target = 4 * parallelism(device)
    nchunks = 1
    if rows < target:
        nchunks = max(1, min(ceil_div(units, max(1, min_units)), ceil_div(target, rows)))
    nchunks = max(nchunks, ceil_div(units, max_steps * workgroup))
    chunk = ceil_div(ceil_div(units, nchunks), workgroup) * workgroup
    return chunk, ceil_div(units, chunk)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def grid_rows(device: Device) -> int:
    """The most workgroups along y in one dispatch (kernels give rows the y axis)."""
    return int(device.info.max_compute_work_group_count[1])


def row_grid(device: Device, rows: int, rows_per_group: int) -> tuple[int, int, int]:
    """Workgroups of ``rows_per_group`` rows each for ``rows`` rows, x filled first then
    y; a ValueError past the device's grid."""
    groups = ceil_div(rows, rows_per_group)
    gx = min(groups, int(device.info.max_compute_work_group_count[0]))
    gy = ceil_div(groups, gx)
    if gy > grid_rows(device):
        raise ValueError(
            f"{rows} rows need more workgroups than this device allows; split the matrix"
        )
    return gx, gy, 1


def texel_format(device: Device, buffer: Buffer, fmt: str) -> str | None:
    """``fmt`` if ``buffer`` can be read as a uniform texel buffer of that format, else None.

    Texel reads take the driver's texture path (much faster loads on lavapipe). They need
    the format's UNIFORM_TEXEL_BUFFER support and the whole buffer within
    maxTexelBufferElements; ``VKCORE_TEXEL=0`` turns them off (storage-buffer loads).
    """
    if not config.env_flag("VKCORE_TEXEL", True) or fmt not in device.info.texel_formats:
        return None
    texel_bytes = 16 if fmt.startswith("rgba") else 4
    if buffer.nbytes // texel_bytes > device.info.max_texel_buffer_elements:
        return None
    return fmt
