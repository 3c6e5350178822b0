"""The buffers of a :class:`vkcore.Program` call: the binding rules (one place), and each
positional argument bound as it is (a Tensor) or staged (a numpy array, copied back after
the dispatch where the shader may write it)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor, check_on_device
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.spirv import reflect

UNIFORM_BLOCK_LIMIT = 16384  # the minimum maxUniformBufferRange every Vulkan device offers
TEXEL_BYTES = {"r32f": 4, "r32ui": 4, "rgba32f": 16, "rgba32ui": 16}
# A numpy argument up to this size keeps its staging buffer in the Program between calls
# (a repeated small call skips the pool); larger ones borrow from the pool per call.
HELD_STAGING_BYTES = 1 << 16


@dataclass(frozen=True)
class BindingRules:
    """What a program's buffers are checked against: its device, the view format of each
    textureBuffer binding, and one binding's byte limit."""

    device: Device
    texel: dict[int, str]
    max_binding: int


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
        plain = type(x) is np.ndarray and x.flags.c_contiguous and x.dtype != object
        if (
            plain
            and size_problem(rules, b, x.nbytes) is None
            and (x.flags.writeable or not b.writable)
        ):
            return cls(b, None, x, b.writable)  # the common case: nothing to say
        what = f"buffer {index} (binding {b.binding}{' ' + b.name if b.name else ''})"
        if isinstance(x, Tensor):
            check_on_device(x.device, rules.device, what, "the program's")
            if x.buffer is None or not x.buffer.alive:
                raise ValueError(f"{what} is an empty or released Tensor")
            check_size(rules, b, x.buffer.nbytes, what)
            return cls(b, x, None, False)
        if b.writable:
            if not isinstance(x, np.ndarray):
                raise TypeError(
                    f"{what} is written by the shader: pass a numpy array (or a Tensor) "
                    f"to take the result, got {type(x).__name__}"
                )
            if not x.flags.writeable or not x.flags.c_contiguous:
                raise ValueError(
                    f"{what} is written by the shader: the numpy array must be writable "
                    "and C-contiguous to take the result"
                )
            arr = x
        else:
            if isinstance(x, (str, bytes, bytearray, memoryview)):
                raise TypeError(
                    f"{what} must be a numpy array or a vkcore.Tensor, got {type(x).__name__}"
                )
            try:
                arr = np.ascontiguousarray(x)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{what} must be a numpy array or a vkcore.Tensor: {exc}") from None
            if arr.dtype == object:
                raise TypeError(f"{what} must be a numeric numpy array or a vkcore.Tensor")
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
        return None
    if nbytes < b.fixed_bytes:
        return f"{nbytes} bytes is smaller than the block's fixed part ({b.fixed_bytes} bytes)"
    if whole_elements and b.stride and (nbytes - b.fixed_bytes) % b.stride:
        return (
            f"{nbytes} bytes is not the block's {b.fixed_bytes} fixed bytes plus whole "
            f"elements of {b.stride} bytes"
        )
    limit = UNIFORM_BLOCK_LIMIT if b.kind == reflect.UNIFORM_BUFFER else rules.max_binding
    if nbytes > limit:
        return f"{nbytes} bytes is more than one binding may cover ({limit} bytes)"
    return None


def size_bounds(
    rules: BindingRules, b: reflect.Binding, whole_elements: bool = True
) -> tuple[int, float, int, int]:
    """size_problem as numbers, for the fast paths of Program calls: a buffer of ``n``
    bytes fits binding ``b`` iff ``lo <= n <= hi`` and ``(n - base) % step == 0``."""
    fmt = rules.texel.get(b.binding)
    if fmt is not None:
        texel = TEXEL_BYTES[fmt]
        return texel, math.inf, 0, texel if whole_elements else 1
    limit = UNIFORM_BLOCK_LIMIT if b.kind == reflect.UNIFORM_BUFFER else rules.max_binding
    step = b.stride if whole_elements and b.stride else 1
    return max(1, b.fixed_bytes), limit, b.fixed_bytes, step


def check_size(
    rules: BindingRules, b: reflect.Binding, nbytes: int, what: str, whole_elements: bool = True
) -> None:
    problem = size_problem(rules, b, nbytes, whole_elements)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
