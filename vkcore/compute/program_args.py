"""The buffers of a :class:`vkcore.Program` call: the binding rules (one place), and each
positional argument bound as it is (a Tensor) or staged (a numpy array, copied back after
the dispatch where the shader may write it).

Element types: a binding whose block is made of one scalar type (``float x[]``, ``uvec4
s[]``; :mod:`vkcore.spirv.reflect_element`), or a texel binding (its view format's), takes
values of that type. An array-like for a ``readonly`` binding is converted to it by
:func:`vkcore.tensor.convert` (floats round into a float type, integers must fit an
integer type exactly, floats are not taken for an integer type); a numpy array that takes
a result, and a Tensor, must already have that dtype (a TypeError naming the argument: a
result is never converted back, a Tensor never reinterpreted). A block that mixes scalar
types takes a native-byte-order numpy array (any dtype: its bytes) or a Tensor, as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore.compute.repeat import SMALL_CALL_BYTES
from vkcore.compute.tensor import Tensor, check_on_device, convert
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.errors import shown
from vkcore.spirv import reflect

TEXEL_BYTES = {"r32f": 4, "r32ui": 4, "rgba32f": 16, "rgba32ui": 16}
TEXEL_ELEMENTS = {"r32f": "float32", "r32ui": "uint32", "rgba32f": "float32", "rgba32ui": "uint32"}
# A numpy argument up to this size keeps its staging buffer in the Program between calls.
HELD_STAGING_BYTES = SMALL_CALL_BYTES


@dataclass(frozen=True)
class BindingRules:
    """What a program's buffers are checked against: its device, the view format of each
    textureBuffer binding, one binding's byte limit, and each binding's element dtype
    (None for a block that mixes scalar types: :func:`elements`). The limits are the
    device's: maxStorageBufferRange, maxUniformBufferRange, maxTexelBufferElements."""

    device: Device
    texel: dict[int, str]
    max_binding: int
    dtypes: dict[int, np.dtype | None]

    @property
    def max_uniform(self) -> int:
        return int(self.device.info.max_uniform_buffer_range)

    @property
    def max_texels(self) -> int:
        return int(self.device.info.max_texel_buffer_elements)


def elements(bindings: Sequence[reflect.Binding], texel: dict[int, str]) -> dict[int, Any]:
    """Binding number -> the numpy dtype of its elements, or None (a mixed block)."""
    out: dict[int, np.dtype | None] = {}
    for b in bindings:
        name = TEXEL_ELEMENTS.get(texel.get(b.binding, ""), b.element)
        out[b.binding] = np.dtype(name) if name else None
    return out


class Argument:
    """One positional buffer of a call: a Tensor bound as is, or a numpy array staged in a
    pooled buffer (copied back after the dispatch when the binding is writable)."""

    def __init__(
        self,
        binding: reflect.Binding,
        tensor: Tensor | None,
        array: np.ndarray | None,
        write_back: bool,
    ) -> None:
        self.binding = binding
        self.tensor = tensor
        self.array = array
        self.write_back = write_back
        self.staged: Buffer | None = None
        self.held = False  # staged in the Program's own buffer, not borrowed from the pool

    @classmethod
    def of(cls, rules: BindingRules, b: reflect.Binding, x: Any, index: int) -> Argument:
        dtype = rules.dtypes.get(b.binding)
        plain = type(x) is np.ndarray and x.flags.c_contiguous and bytes_of(x, dtype)
        if (
            plain
            and size_problem(rules, b, x.nbytes) is None
            and (x.flags.writeable or not b.writable)
        ):
            return cls(b, None, x, b.writable)  # the common case: nothing to say
        what = describe(b, index)
        if isinstance(x, Tensor):
            check_on_device(x.device, rules.device, what, "the program's")
            if x.buffer is None or not x.buffer.alive:
                raise ValueError(f"{what} is an empty or released Tensor")
            check_tensor_dtype(x, dtype, what)
            check_size(rules, b, x.buffer.nbytes, what)
            return cls(b, x, None, False)
        if b.writable:
            if not isinstance(x, np.ndarray):
                raise TypeError(
                    f"{what} is written by the shader: pass a numpy array (or a Tensor) "
                    f"to take the result, got {type(x).__name__}"
                )
            if not bytes_of(x, dtype):
                raise TypeError(
                    f"{what} is written by the shader as {dtype or 'its bytes'}: the numpy "
                    f"array that takes the result must be {dtype or 'native byte order'}, "
                    f"got {x.dtype}"
                )
            if not x.flags.writeable or not x.flags.c_contiguous:
                raise ValueError(
                    f"{what} is written by the shader: the numpy array must be writable "
                    "and C-contiguous to take the result"
                )
            arr = x
        else:
            arr = readonly_array(x, dtype, what)
        check_size(rules, b, arr.nbytes, what)
        return cls(b, None, arr, b.writable)

    def upload(self, pool: Any, held: dict[int, Buffer], index: int) -> Buffer:
        """The buffer bound for this argument: the Tensor's own, or a staging buffer with
        the array written into it (the one ``held`` keeps for ``index`` when it fits)."""
        if self.tensor is not None:
            assert self.tensor.buffer is not None
            return self.tensor.buffer
        assert self.array is not None
        nbytes = self.array.nbytes
        buf = held.get(index)
        if buf is None or not buf.alive or buf.nbytes != nbytes:
            buf = pool.acquire(nbytes)
            if nbytes <= HELD_STAGING_BYTES:
                old = held.pop(index, None)
                held[index] = buf
                if old is not None:
                    pool.release(old)
        self.held = held.get(index) is buf
        self.staged = buf
        buf.write(self.array)
        return buf

    def copy_back(self) -> None:
        if self.write_back and self.staged is not None and self.array is not None:
            self.staged.read(self.array)

    def give_back(self, pool: Any) -> None:
        if self.staged is not None and not self.held:
            pool.release(self.staged)
        self.staged = None


def describe(b: reflect.Binding, index: int) -> str:
    return f"buffer {index} (binding {b.binding}{' ' + b.name if b.name else ''})"


def bytes_of(x: np.ndarray, dtype: np.dtype | None) -> bool:
    """Whether numpy array ``x`` is bound as its own bytes: its dtype is the binding's
    element dtype (native order), or any plain native dtype for a mixed block."""
    if dtype is not None:
        return x.dtype == dtype
    return x.dtype.isnative and not x.dtype.hasobject


def readonly_array(x: Any, dtype: np.dtype | None, what: str) -> np.ndarray:
    """A C-contiguous array of the values a readonly binding reads: ``x`` converted to the
    element ``dtype`` (:func:`vkcore.tensor.convert`), or, for a mixed block (``dtype``
    None), a numpy array's own bytes."""
    if isinstance(x, (str, bytes, bytearray, memoryview)) or x is None:
        raise TypeError(f"{what} must be a numpy array or a vkcore.Tensor, got {type(x).__name__}")
    if dtype is None:
        if not isinstance(x, np.ndarray):
            raise TypeError(
                f"{what} is a block of several scalar types: pass a numpy array holding its "
                f"bytes (or a vkcore.Tensor), got {type(x).__name__}"
            )
        if not bytes_of(x, None):
            raise TypeError(
                f"{what} is a block of several scalar types: the numpy array must be of a "
                f"numeric or structured dtype in native byte order, got {x.dtype}"
            )
        return np.ascontiguousarray(x)
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{what} must be a numpy array or a vkcore.Tensor: {shown(exc)}") from None
    if arr.dtype.hasobject and arr.ndim == 0:  # not an array at all (a Buffer, a generator)
        raise TypeError(
            f"{what} must be a numpy array, a sequence of numbers or a vkcore.Tensor, "
            f"got {type(x).__name__}"
        )
    try:
        converted = convert(arr, dtype, what)
    except TypeError as exc:
        raise TypeError(f"{exc}{_view_hint(arr, dtype)}") from None
    return converted if converted.flags.c_contiguous else np.ascontiguousarray(converted)


def check_tensor_dtype(t: Tensor, dtype: np.dtype | None, what: str) -> None:
    """A Tensor is bound as it is: refuse one whose dtype is not the binding's elements'."""
    if dtype is not None and t.dtype != dtype:
        raise TypeError(
            f"{what} holds {dtype} elements (as the shader declares them), got a Tensor of "
            f"dtype {t.dtype} (a Tensor is bound as it is, never reinterpreted or converted)"
        )


def _view_hint(arr: np.ndarray, dtype: np.dtype | None) -> str:
    """How to pass an array's bits instead of its values, where that may be what was
    meant (a dtype of the element's size: float32 bits for a uint binding)."""
    if dtype is None or arr.dtype.hasobject or arr.dtype.itemsize != dtype.itemsize:
        return ""
    return f" (to bind its bits as {dtype}, pass x.view(np.{dtype}))"


def size_problem(
    rules: BindingRules, b: reflect.Binding, nbytes: int, whole_elements: bool = True
) -> str | None:
    """What is wrong with a buffer of ``nbytes`` for binding ``b``, or None if it fits
    (the binding rules of the module docstring, in this one place). ``whole_elements``
    False (a recorded Buffer): a texel binding views the buffer's whole texels, so bytes
    past the last whole texel are allowed (and not visible to the shader)."""
    if nbytes == 0:
        return "empty (a Vulkan buffer holds at least one byte)"
    fmt = rules.texel.get(b.binding)
    if fmt is not None:
        texel = TEXEL_BYTES[fmt]
        if nbytes < texel or (whole_elements and nbytes % texel):
            return f"{nbytes} bytes is not whole {fmt} texels ({texel} bytes)"
        if nbytes // texel > rules.max_texels:  # a view past the limit: never clamped
            return (
                f"{nbytes // texel} {fmt} texels is more than one texel binding may view "
                f"(this device's maxTexelBufferElements, {rules.max_texels})"
            )
        return None
    if nbytes < b.fixed_bytes:
        return f"{nbytes} bytes is smaller than the block's fixed part ({b.fixed_bytes} bytes)"
    if whole_elements and b.stride and (nbytes - b.fixed_bytes) % b.stride:
        return (
            f"{nbytes} bytes is not the block's {b.fixed_bytes} fixed bytes plus whole "
            f"elements of {b.stride} bytes"
        )
    uniform = b.kind == reflect.UNIFORM_BUFFER
    limit = rules.max_uniform if uniform else rules.max_binding
    if nbytes > limit:
        name = "maxUniformBufferRange" if uniform else "maxStorageBufferRange"
        return f"{nbytes} bytes is more than one binding may cover (this device's {name}, {limit})"
    return None


def size_bounds(
    rules: BindingRules, b: reflect.Binding, whole_elements: bool = True
) -> tuple[int, float, int, int]:
    """size_problem as numbers, for the fast paths of Program calls: a buffer of ``n``
    bytes fits binding ``b`` iff ``lo <= n <= hi`` and ``(n - base) % step == 0``."""
    fmt = rules.texel.get(b.binding)
    if fmt is not None:
        texel = TEXEL_BYTES[fmt]
        return texel, texel * (rules.max_texels + 1) - 1, 0, texel if whole_elements else 1
    limit = rules.max_uniform if b.kind == reflect.UNIFORM_BUFFER else rules.max_binding
    step = b.stride if whole_elements and b.stride else 1
    return max(1, b.fixed_bytes), limit, b.fixed_bytes, step


def check_size(
    rules: BindingRules, b: reflect.Binding, nbytes: int, what: str, whole_elements: bool = True
) -> None:
    problem = size_problem(rules, b, nbytes, whole_elements)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
