"""Tensor: a device buffer with a shape and a dtype, and :func:`asarray` that makes one."""

from __future__ import annotations

import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from vkcore.device.context import check_allocation
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# dtypes a Tensor can hold. Kernels check their own narrower sets.
TENSOR_DTYPES = tuple(
    np.dtype(t)
    for t in ("float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32")
)


class Tensor:
    """A device-resident array: ``shape``, ``dtype``, ``device``; ``numpy()`` copies it back.

    Create one with :func:`vkcore.asarray`. A Tensor with no elements owns no buffer.
    ``reshape`` returns a Tensor sharing the same buffer.
    """

    def __init__(
        self, buffer: Buffer | None, shape: tuple[int, ...], dtype: np.dtype, device: Device
    ) -> None:
        self.buffer = buffer
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device = device

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any, device: Device | None = None) -> Tensor:
        """An uninitialized tensor on ``device``; ``shape`` is an int or a tuple of ints,
        each 0 or more."""
        dev = resolve(device)
        shape = _check_shape(shape)
        dt = _check_dtype(np.dtype(dtype), "dtype")
        nbytes = math.prod(shape) * dt.itemsize
        check_allocation(dev, nbytes, "shape")
        return cls(Buffer(dev, nbytes) if nbytes else None, shape, dt, dev)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """A new numpy array holding a copy of the data."""
        out = np.empty(self.shape, dtype=self.dtype)
        if self.size:
            assert self.buffer is not None
            self.buffer.read(out)
        return out

    def write(self, data: ArrayLike) -> None:
        """Copy ``data`` (this Tensor's shape; its dtype, or values that convert to it
        exactly) into the Tensor, e.g. new inputs for a replayed :func:`vkcore.sequence`.
        Waits first for a sequence in flight that binds it."""
        arr = np.asarray(data)
        if arr.shape != self.shape:
            raise ValueError(f"data must have this Tensor's shape {self.shape}, got {arr.shape}")
        if arr.dtype != self.dtype:
            integers = arr.dtype.kind in "iu" and self.dtype.kind in "iu"  # signed <-> unsigned
            if arr.dtype == object or not (
                integers or np.can_cast(arr.dtype, self.dtype, "same_kind")
            ):
                raise TypeError(f"data must be {self.dtype} (or convert to it), got {arr.dtype}")
            with np.errstate(over="ignore", invalid="ignore"):  # checked just below
                converted = arr.astype(self.dtype)
            if not np.array_equal(converted, arr, equal_nan=arr.dtype.kind == "f"):
                raise ValueError(f"data does not convert to {self.dtype} exactly")
            arr = converted
        if self.size:
            assert self.buffer is not None
            self.buffer.write(np.ascontiguousarray(arr))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def reshape(self, *shape: int | tuple[int, ...]) -> Tensor:
        """The same data with another shape (one dimension may be -1)."""
        dims: Any = shape[0] if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        new: tuple[int, ...] = (
            np.empty(self.shape, dtype=np.uint8).reshape(dims).shape
        )  # numpy's rules
        return Tensor(self.buffer, new, self.dtype, self.device)

    def __repr__(self) -> str:
        name = self.device.info.name
        return f"vkcore.Tensor(shape={self.shape}, dtype={self.dtype}, device={name!r})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]


def device_for(own: Device | None, device: Device | None, what: str = "Tensor") -> Device:
    """The device a call runs on: the data's ``own`` device when it has one (a Tensor's,
    a QuantizedTensor's), which the ``device`` argument may only repeat; else ``device``
    (None: the default device). The one rule every call follows."""
    if own is None:
        return resolve(device)
    if device is not None and device is not own:
        raise ValueError(f"device must be the {what}'s own device (or None)")
    return own


def check_on_device(device: object, expected: object, name: str, whose: str) -> None:
    """ValueError naming argument ``name`` when its data lives on ``device`` rather than
    ``expected`` (``whose``: "the weights'", "x's", "the program's")."""
    if device is not expected:
        raise ValueError(f"{name} must be on {whose} device, got a Tensor on another device")


def _check_dtype(dt: np.dtype, name: str) -> np.dtype:
    if dt not in TENSOR_DTYPES:
        names = ", ".join(str(d) for d in TENSOR_DTYPES)
        raise TypeError(f"{name} must be one of {names}; got {dt}")
    return dt


def asarray(data: ArrayLike | Tensor, device: Device | None = None, dtype: Any = None) -> Tensor:
    """Upload an array to ``device`` (default device if None) as a :class:`Tensor`.

    The dtype rule is the kernels' rule for what a Tensor cannot hold: float64 and 64-bit
    integer data (Python floats and ints included) is stored as float32, converted as
    every kernel converts such input (integers beyond 2^24 in magnitude round). The
    dtypes of ``TENSOR_DTYPES`` (float32, float16, int8, uint8, int16, uint16, int32,
    uint32) are stored as they are. bool, complex, object and string data, and an
    explicit ``dtype`` outside ``TENSOR_DTYPES`` (``dtype="float64"``), is a TypeError.

    A Tensor already on that device (and of that dtype) is returned as is. The input is
    never modified; non-contiguous and negative-stride views are copied first.
    """
    if isinstance(data, Tensor):
        if (device is None or data.device is device) and (
            dtype is None or np.dtype(dtype) == data.dtype
        ):
            return data
        data = data.numpy()
    dev = resolve(device)
    if isinstance(data, (str, bytes)) or data is None:
        raise TypeError(f"data must be array-like of numbers, got {type(data).__name__}")
    try:
        arr = np.asarray(data, dtype=dtype)
    except ValueError as exc:  # ragged lists, unconvertible values
        raise TypeError(f"data must be array-like of numbers: {exc}") from None
    if dtype is None and arr.dtype.kind in "fiu" and arr.dtype.itemsize == 8:
        native = np.dtype(np.float32)  # no 64-bit Tensors: converted as the kernels do
    else:
        native = _check_dtype(arr.dtype.newbyteorder("="), "data dtype")
    check_allocation(dev, arr.size * native.itemsize, "data")  # before any host copy
    if arr.dtype != native:  # byte-swapped input: the device holds native byte order
        arr = arr.astype(native)
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d into 1-d)
        arr = arr.copy(order="C")
    tensor = Tensor.empty(arr.shape, arr.dtype, dev)
    if arr.size:
        assert tensor.buffer is not None
        tensor.buffer.write(arr)
    return tensor


def _check_shape(shape: Any) -> tuple[int, ...]:
    """``shape`` as a tuple of ints of 0 or more, else a TypeError or ValueError naming it."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        if isinstance(dims, (str, bytes)) or any(isinstance(d, bool) for d in dims):
            raise TypeError
        out = tuple(operator.index(d) for d in dims)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in out):
        raise ValueError(f"shape must have no negative dimension, got {out}")
    return out
