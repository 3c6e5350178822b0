"""Device buffers and the Tensor (a device buffer with a shape and a dtype).

Memory choice: every buffer has a purpose (``resident`` for Tensors, weights and kernel
buffers; ``upload`` and ``readback`` for the two staging buffers; ``params``) and takes
the first memory type of ``Device.placement(purpose)`` (the one policy,
:func:`vkcore.placement.place`) that it can be allocated in. A mapped buffer is read and
written with numpy copies, flushed after host writes and invalidated before host reads
where its type is not HOST_COHERENT; an unmapped (device-local) one is reached through
the device's staging buffers. ``VKCORE_FORCE_STAGING=1`` keeps resident buffers unmapped.
An allocation that fails for lack of memory falls back to the next type of the placement
(said once per device and purpose on the ``vkcore`` logger).
"""

from __future__ import annotations

import collections
import math
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import placement, vkapi
from .device import Device, ctrl_c_deferred, per_device_map, resolve
from .errors import VulkanError

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

# dtypes a Tensor can hold. Kernels check their own narrower sets.
TENSOR_DTYPES = tuple(
    np.dtype(t)
    for t in ("float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32")
)

VK_WHOLE_SIZE = (1 << 64) - 1
# Results after which the next memory type of a placement is tried: out of host or device
# memory, or a mapping that failed (out of address space).
_FALLBACK_RESULTS = frozenset({-1, -2, -5})
# Test hook: treat every mapped type as non-coherent (flush and invalidate even coherent
# memory, which is legal), so that path runs on devices whose types are all coherent.
ASSUME_NON_COHERENT = False


def atom_range(offset: int, size: int, atom: int, allocation_size: int) -> tuple[int, int] | None:
    """The ``(offset, size)`` of a VkMappedMemoryRange covering bytes ``[offset,
    offset + size)`` of a mapped allocation of ``allocation_size`` bytes: the offset
    rounded down and the end rounded up to multiples of ``atom`` (nonCoherentAtomSize),
    and ``VK_WHOLE_SIZE`` when the rounded end reaches the allocation's end (the last
    atom may be partial). None for an empty range (nothing to flush)."""
    for name, value in (("offset", offset), ("size", size), ("allocation_size", allocation_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if isinstance(atom, bool) or not isinstance(atom, int) or atom < 0:
        raise ValueError(f"atom must be an int >= 0, got {atom!r}")
    if offset + size > allocation_size:
        raise ValueError(f"range {offset}+{size} exceeds the {allocation_size}-byte allocation")
    if size == 0:
        return None
    atom = max(atom, 1)  # 0 would be a broken report; 1 means any range is aligned
    start = offset - offset % atom
    end = -(-(offset + size) // atom) * atom
    return (start, VK_WHOLE_SIZE) if end >= allocation_size else (start, end - start)


def _check_allocation(device: Device, nbytes: int, name: str) -> None:
    """ValueError when one allocation of ``nbytes`` exceeds the device's limit."""
    limit = device.info.max_memory_allocation_size or (1 << 62)
    if nbytes > limit:
        raise ValueError(
            f"{name} needs {nbytes} bytes in one buffer, more than this device's "
            f"maxMemoryAllocationSize ({limit} bytes)"
        )


# Every buffer can be bound as a storage buffer and read through a uniform texel buffer.
# VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | UNIFORM_TEXEL_BUFFER_BIT | UNIFORM_BUFFER_BIT: any
# buffer can be bound to a kernel's storage, texel or (vkcore.Program) uniform bindings.
_USAGE = 0x20 | 0x4 | 0x10


class MappedBytes:
    """Byte access to a buffer's mapped memory that never hands out a view of it.

    Indexing returns a copy and assignment writes through, both under the buffer's lock
    and only while it is alive: no numpy array can outlive the mapping (a view kept past
    ``destroy`` would read freed memory or crash).
    """

    def __init__(self, buffer: Buffer) -> None:
        self._buffer = buffer

    def __len__(self) -> int:
        return self._buffer.nbytes

    def __getitem__(self, index: Any) -> np.ndarray:
        buf = self._buffer
        with buf._lock:
            buf._require_alive()
            assert buf._mapped is not None
            buf._sync_mapped(0, buf.nbytes, flush=False)
            return np.array(buf._mapped[index], copy=True)

    def __setitem__(self, index: Any, value: Any) -> None:
        buf = self._buffer
        with buf._lock:
            buf._require_alive()
            assert buf._mapped is not None
            buf._mapped[index] = value
            buf._sync_mapped(0, buf.nbytes, flush=True)


class Buffer:
    """One VkBuffer bound to its own VkDeviceMemory (storage + transfer usage).

    ``view(format)`` gives a VkBufferView over the whole buffer for texel-buffer reads;
    views are created once and destroyed with the buffer. ``read``/``write`` copy between
    numpy arrays and the buffer; the mapping itself is never handed out as an array.
    """

    _views: dict[str, Any] | None = None
    _mapped: np.ndarray | None = None  # the mapping; never leaves this class

    # True for long-lived buffers (pooled, placeholders): the submitter may keep a recorded
    # command buffer that references them, dropped when the buffer is destroyed.
    reusable = False
    # A leased buffer (BufferPool.lease) goes back to its pool instead of being destroyed.
    _return_to: BufferPool | None = None
    # Where the memory went (a choice of Device.placement(purpose)); None for imports.
    choice: placement.Choice | None = None
    purpose = "resident"
    _coherent = True  # False: flush after host writes, invalidate before host reads
    _allocation_size = 0  # VkMemoryRequirements.size: the whole mapped allocation

    def __init__(self, device: Device, nbytes: int, *, purpose: str = "resident") -> None:
        if purpose not in placement.PURPOSES:
            raise ValueError(f"purpose must be one of {placement.PURPOSES}, got {purpose!r}")
        if nbytes <= 0:
            raise ValueError(f"buffer size must be positive, got {nbytes}")
        _check_allocation(device, nbytes, "buffer")
        self.device = device
        self.nbytes = nbytes
        self.purpose = purpose
        self.handle: Any = None
        self.memory: Any = None
        self._lock = threading.Lock()
        keep = vkapi.Keep()
        usage = _USAGE | vkapi.flag("VK_BUFFER_USAGE_TRANSFER_SRC_BIT")
        usage |= vkapi.flag("VK_BUFFER_USAGE_TRANSFER_DST_BIT")
        info = keep.struct("VkBufferCreateInfo", size=nbytes, usage=usage, sharingMode=0)
        self._create(info, lambda: self._allocate(purpose))

    def _create(self, info: Any, bind_memory: Callable[[], None]) -> None:
        """vkCreateBuffer, then ``bind_memory()``; the buffer and any memory are freed again
        if that fails (also on a Ctrl-C just as a call returned: what it made is freed),
        and registered with its device (which destroys them at close) if it works."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        out = ffi.new("VkBuffer*")
        with dev.lock:
            dev.check()
            try:
                result = None
                try:
                    result = lib.vkCreateBuffer(dev.handle, info, ffi.NULL, out)
                finally:  # no result: interrupted as it returned, the buffer may exist
                    if result in (None, 0) and out[0] != ffi.NULL:
                        self.handle = out[0]
                vkapi.check(result, "vkCreateBuffer")
                bind_memory()
            except BaseException:
                self._free_memory()
                if self.handle is not None:
                    lib.vkDestroyBuffer(dev.handle, self.handle, ffi.NULL)
                    self.handle = None
                raise
            dev.register_buffer(self)

    def _free_memory(self) -> None:
        """Free the memory of a buffer being built (mapped memory is unmapped with it)."""
        self._mapped = None
        if self.memory is not None:
            dev = self.device
            dev.lib.vkFreeMemory(dev.handle, self.memory, dev.ffi.NULL)
            self.memory = None

    def _allocate(self, purpose: str) -> None:
        """Memory from the first type of the purpose's placement that can hold it."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev.handle, self.handle, req)
        choices = dev.placement(purpose, req.memoryTypeBits).choices
        for n, choice in enumerate(choices):
            try:
                self._allocate_in(choice, req.size)
                break
            except VulkanError as exc:
                self._free_memory()
                if exc.result not in _FALLBACK_RESULTS or n + 1 == len(choices):
                    raise
                dev.note_fallback(purpose, self.nbytes, choice, choices[n + 1], exc)
        # Bound once the memory is settled: a buffer cannot be bound a second time, so a
        # failure here is not retried in another type.
        self._bind_memory()

    def _allocate_memory(self, info: Any) -> None:
        """vkAllocateMemory into ``self.memory``. The handle is kept even when a Ctrl-C
        arrives as the call returns (no result), so the caller's cleanup frees it."""
        dev = self.device
        out = dev.ffi.new("VkDeviceMemory*")
        result = None
        try:
            result = dev.lib.vkAllocateMemory(dev.handle, info, dev.ffi.NULL, out)
        finally:
            if result in (None, 0) and out[0] != dev.ffi.NULL:
                self.memory = out[0]
        vkapi.check(result, "vkAllocateMemory")

    def _bind_memory(self) -> None:
        dev = self.device
        result = dev.lib.vkBindBufferMemory(dev.handle, self.handle, self.memory, 0)
        vkapi.check(result, "vkBindBufferMemory")

    def _allocate_in(self, choice: placement.Choice, size: int) -> None:
        """Allocate and (for a mapped choice) map memory of one type. Each handle is
        recorded as soon as the call that made it returns, so a failure or a Ctrl-C
        after it never leaves memory the caller cannot free."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = vkapi.Keep()
        info = keep.struct(
            "VkMemoryAllocateInfo", allocationSize=size, memoryTypeIndex=choice.type_index
        )
        self._allocate_memory(info)
        if choice.mapped:
            # The whole allocation is mapped, so ranges rounded out to nonCoherentAtomSize
            # stay inside the mapping.
            ptr = ffi.new("void**")
            vkapi.check(
                lib.vkMapMemory(dev.handle, self.memory, 0, VK_WHOLE_SIZE, 0, ptr), "vkMapMemory"
            )
            self._mapped = np.frombuffer(ffi.buffer(ptr[0], self.nbytes), dtype=np.uint8)
        self.choice = choice
        self._allocation_size = size
        self._coherent = choice.coherent and not ASSUME_NON_COHERENT

    def _sync_mapped(self, offset: int, size: int, *, flush: bool) -> None:
        """Flush host writes to (or invalidate the host's view of) bytes ``[offset,
        offset + size)`` of non-coherent mapped memory; nothing for coherent memory."""
        if self._coherent:
            return
        span = atom_range(
            offset, size, self.device.info.non_coherent_atom_size, self._allocation_size
        )
        if span is None:
            return
        dev = self.device
        rng = dev.ffi.new(
            "VkMappedMemoryRange*",
            {
                "sType": vkapi.structure_type("VkMappedMemoryRange"),
                "memory": self.memory,
                "offset": span[0],
                "size": span[1],
            },
        )
        if flush:
            call = "vkFlushMappedMemoryRanges"
            vkapi.check(dev.lib.vkFlushMappedMemoryRanges(dev.handle, 1, rng), call)
        else:
            call = "vkInvalidateMappedMemoryRanges"
            vkapi.check(dev.lib.vkInvalidateMappedMemoryRanges(dev.handle, 1, rng), call)

    @property
    def alive(self) -> bool:
        return self.handle is not None

    @property
    def mapped(self) -> MappedBytes | None:
        """Copying byte access to the mapped memory, or None when the buffer is not
        mapped (device-local memory reached through the staging buffer)."""
        return MappedBytes(self) if self._mapped is not None else None

    def view(self, fmt: str) -> Any:
        """A VkBufferView of the whole buffer in texel format ``fmt`` (see TEXEL_FORMATS)."""
        from .instance import TEXEL_FORMATS

        views = self._views if self._views is not None else {}
        self._views = views
        handle = views.get(fmt)
        if handle is None:
            dev = self.device
            size = 16 if "rgba" in fmt else 4
            texels = min(self.nbytes // size, dev.info.max_texel_buffer_elements)
            keep = vkapi.Keep()
            info = keep.struct(
                "VkBufferViewCreateInfo",
                buffer=self.handle,
                format=TEXEL_FORMATS[fmt],
                offset=0,
                range=texels * size,
            )
            out = dev.ffi.new("VkBufferView*")
            vkapi.check(
                dev.lib.vkCreateBufferView(dev.handle, info, dev.ffi.NULL, out),
                "vkCreateBufferView",
            )
            handle = views[fmt] = out[0]
        return handle

    def _destroy_views(self) -> None:
        dev = self.device
        for handle in (self._views or {}).values():
            dev.lib.vkDestroyBufferView(dev.handle, handle, dev.ffi.NULL)
        self._views = None

    def write(self, data: np.ndarray, offset: int = 0) -> None:
        """Copy an array's bytes (in C order) into the buffer at ``offset`` bytes."""
        if not isinstance(data, np.ndarray):
            raise TypeError(f"data must be a numpy array, got {type(data).__name__}")
        self._check_range(data.nbytes, offset, "data")
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if self._copy_mapped(raw, offset, into_buffer=True):
            return
        with self.device.lock:  # no destroy between the check and the copy
            self._require_alive()
            self.device.submitter.upload(self, raw, offset)

    def read(self, out: np.ndarray, offset: int = 0) -> None:
        """Fill the array ``out`` (in C order) with ``out.nbytes`` bytes from ``offset``.

        A non-contiguous ``out`` is filled through a contiguous copy: reshaping it would
        copy, and the data would land in the copy instead of ``out``.
        """
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
        if not out.flags.writeable:
            raise ValueError("out must be a writable numpy array")
        self._check_range(out.nbytes, offset, "out")
        if not out.flags.c_contiguous:
            tmp = np.empty(out.shape, out.dtype)
            self.read(tmp, offset)
            out[...] = tmp
            return
        raw = out.reshape(-1).view(np.uint8)
        if self._copy_mapped(raw, offset, into_buffer=False):
            return
        with self.device.lock:
            self._require_alive()
            self.device.submitter.download(self, raw, offset)

    def _check_range(self, nbytes: int, offset: int, name: str) -> None:
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{name} ({nbytes} bytes at offset {offset}) does not fit this "
                f"{self.nbytes}-byte buffer"
            )

    def _copy_mapped(self, raw: np.ndarray, offset: int, *, into_buffer: bool) -> bool:
        """Copy through the mapping (False when the buffer is not mapped).

        Holds the buffer's lock, so another thread closing the device cannot unmap and
        free the memory in the middle of the copy (numpy copies without the GIL).
        """
        with self._lock:
            self._require_alive()
            if self._mapped is None:
                return False
            if into_buffer:
                self._mapped[offset : offset + raw.size] = raw
                self._sync_mapped(offset, raw.size, flush=True)
            else:
                self._sync_mapped(offset, raw.size, flush=False)
                raw[...] = self._mapped[offset : offset + raw.size]
            return True

    def _require_alive(self) -> None:
        if self.handle is None:
            dev = self.device
            if dev.closed:
                raise RuntimeError(f"this vkcore buffer was released: {dev.closed_reason()}")
            raise RuntimeError("this vkcore buffer was released (destroyed); its device is open")

    def _abandon(self) -> None:
        """Forget the Vulkan objects without destroying them (a forked child's copy)."""
        self._lock = threading.Lock()  # a parent thread may have held it at the fork
        self.handle = self.memory = None
        self._mapped = None
        self._views = None

    def destroy(self) -> None:
        """Release the buffer and its memory; idempotent."""
        dev = self.device
        # The device lock first: Device.close holds it while it destroys its buffers.
        with dev.lock, self._lock:
            if self.handle is None:
                return
            pool = self._return_to
            if pool is not None and pool.take_back(self):
                return
            ffi, lib = dev.ffi, dev.lib
            dev.forget_buffer(self)
            if dev.handle is not None:
                self._mapped = None
                self._destroy_views()
                if self.memory is not None:
                    lib.vkFreeMemory(dev.handle, self.memory, ffi.NULL)
                lib.vkDestroyBuffer(dev.handle, self.handle, ffi.NULL)
            self.handle = None
            self.memory = None
            self._mapped = None  # (already freed with its device if that closed first)
            self._views = None

    def __del__(self) -> None:
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


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
        """An uninitialized tensor on ``device``."""
        dev = resolve(device)
        dt = _check_dtype(np.dtype(dtype), "dtype")
        nbytes = math.prod(shape) * dt.itemsize
        _check_allocation(dev, nbytes, "shape")
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
    _check_allocation(dev, arr.size * native.itemsize, "data")  # before any host copy
    if arr.dtype != native:  # byte-swapped input: the device holds native byte order
        arr = arr.astype(native)
    if not arr.flags.c_contiguous:  # (np.ascontiguousarray would turn 0-d into 1-d)
        arr = arr.copy(order="C")
    tensor = Tensor.empty(arr.shape, arr.dtype, dev)
    if arr.size:
        assert tensor.buffer is not None
        tensor.buffer.write(arr)
    return tensor


_HOST_ALLOCATION = 0x80  # VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT


def can_import_host(device: Device) -> bool:
    """True when kernels should wrap numpy memory as buffers instead of copying it:
    the device imports host memory (VK_EXT_external_memory_host) and shares the host's
    memory (a CPU or integrated device). A discrete GPU would read imported memory over
    the bus on every pass, so there one upload to device-local memory is cheaper."""
    return (
        "VK_EXT_external_memory_host" in getattr(device, "enabled_extensions", ())
        and device.info.min_imported_host_pointer_alignment > 0
        and device.info.device_type in ("cpu", "integrated")
    )


class HostBuffer(Buffer):
    """A VkBuffer over memory numpy already owns (VK_EXT_external_memory_host): no copy.

    The driver reads and writes the array's own pages, so the array must stay alive and
    unmoved until :meth:`destroy`. The imported range is the array's pages rounded out
    to ``minImportedHostPointerAlignment``; ``offset`` is where the array starts in the
    buffer, in bytes. Kernels that accept it take the offset as an argument.
    """

    def __init__(self, device: Device, array: np.ndarray) -> None:  # noqa: D107
        if not can_import_host(device):
            raise ValueError("this device cannot import host memory (VK_EXT_external_memory_host)")
        if not array.flags.c_contiguous or array.nbytes == 0:
            raise ValueError("array must be a non-empty C-contiguous numpy array")
        align = device.info.min_imported_host_pointer_alignment
        ptr = array.ctypes.data
        base = ptr - ptr % align
        end = ptr + array.nbytes
        size = -(-(end - base) // align) * align
        _check_allocation(device, size, "array")
        self.device = device
        self.nbytes = size
        self.offset = ptr - base
        self.array: np.ndarray | None = array  # keeps the pages alive while the buffer exists
        self.handle = None
        self.memory = None
        self._lock = threading.Lock()
        keep = vkapi.Keep()
        external = keep.struct("VkExternalMemoryBufferCreateInfo", handleTypes=_HOST_ALLOCATION)
        info = keep.struct(
            "VkBufferCreateInfo", pNext=external, size=size, usage=_USAGE, sharingMode=0
        )
        self._create(info, lambda: self._import(keep, base, size))

    def _import(self, keep: vkapi.Keep, base: int, size: int) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        host_ptr = ffi.cast("void*", base)
        props = keep.struct("VkMemoryHostPointerPropertiesEXT")
        get_props = _host_pointer_properties(dev)
        vkapi.check(
            get_props(dev.handle, _HOST_ALLOCATION, host_ptr, props),
            "vkGetMemoryHostPointerPropertiesEXT",
        )
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev.handle, self.handle, req)
        index = placement.import_type(dev.memory_types, props.memoryTypeBits & req.memoryTypeBits)
        if index is None:
            raise VulkanError(
                "vkGetMemoryHostPointerPropertiesEXT",
                0,
                "no host-coherent memory type can import this pointer",
            )
        imported = keep.struct(
            "VkImportMemoryHostPointerInfoEXT", handleType=_HOST_ALLOCATION, pHostPointer=host_ptr
        )
        info = keep.struct(
            "VkMemoryAllocateInfo", pNext=imported, allocationSize=size, memoryTypeIndex=index
        )
        self._allocate_memory(info)
        self._bind_memory()

    def write(self, data: np.ndarray, offset: int = 0) -> None:
        raise TypeError("a HostBuffer is the numpy array itself: write to the array")

    def read(self, out: np.ndarray, offset: int = 0) -> None:
        raise TypeError("a HostBuffer is the numpy array itself: read the array")

    def destroy(self) -> None:
        super().destroy()
        self.array = None

    def _abandon(self) -> None:
        super()._abandon()
        self.array = None


def _host_pointer_properties(device: Device) -> Any:
    """vkGetMemoryHostPointerPropertiesEXT through vkGetDeviceProcAddr (not a loader export)."""
    fn = getattr(device, "_vkcore_host_pointer_fn", None)
    if fn is None:
        ffi, lib = device.ffi, device.lib
        raw = lib.vkGetDeviceProcAddr(device.handle, b"vkGetMemoryHostPointerPropertiesEXT")
        if raw == ffi.NULL:
            raise VulkanError(
                "vkGetDeviceProcAddr", 0, "vkGetMemoryHostPointerPropertiesEXT is missing"
            )
        fn = ffi.cast("PFN_vkGetMemoryHostPointerPropertiesEXT", raw)
        device._vkcore_host_pointer_fn = fn  # type: ignore[attr-defined]
    return fn


def page_aligned_empty(shape: tuple[int, ...], dtype: Any, align: int = 4096) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an ``align`` boundary and
    whose pages belong to it alone (so the whole range can be imported)."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    padded = -(-max(nbytes, 1) // align) * align
    raw = np.empty(padded + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + nbytes].view(dt).reshape(shape)


class BufferPool:
    """Buffers that numpy-in, numpy-out kernel calls borrow and give back, per device.

    Reusing the same VkBuffers call after call saves their creation (tens of microseconds
    each through the binding) and lets the submitter reuse a recorded command buffer for
    a repeated call. Free buffers are kept by exact size, at most ``max_buffers`` of them
    and ``max_bytes`` in all (the oldest go first: some GPUs allow only 4096 allocations);
    the device destroys whatever is left when it closes.
    """

    def __init__(self, device: Device, max_bytes: int = 256 << 20, max_buffers: int = 32) -> None:
        self.device = device
        self.max_bytes = max_bytes
        self.max_buffers = max_buffers
        self._free: list[Buffer] = []  # oldest first

    def acquire(self, nbytes: int) -> Buffer:
        """A live buffer of exactly ``nbytes`` bytes, reused when one is free."""
        with self.device.lock:
            for i, buf in enumerate(self._free):
                if buf.nbytes == nbytes and buf.alive:
                    del self._free[i]
                    return buf
        buf = Buffer(self.device, nbytes)
        buf.reusable = True
        return buf

    def lease(self, nbytes: int) -> Buffer:
        """A buffer of ``nbytes`` for a kernel's output Tensor: a new Buffer object that,
        when destroyed or collected, gives its memory back to this pool (already touched
        pages: no page faults on the next output of that size) rather than freeing it."""
        with self.device.lock:
            lent = self._adopt(self.acquire(nbytes))
            lent._return_to = self
            return lent

    def take_back(self, lent: Buffer) -> bool:
        """Adopt a leased buffer's memory as a free pool buffer; False if the pool cannot
        (device closing, pool full), and the caller destroys it."""
        dev = self.device
        if dev.closed or dev.handle is None or lent.nbytes > self.max_bytes:
            return False
        back = self._adopt(lent)
        back.reusable = True
        self.release(back)
        return True

    def _adopt(self, old: Buffer) -> Buffer:
        """A new Buffer object that takes over ``old``'s Vulkan objects (memory, mapping,
        texel views); ``old`` is forgotten and no longer refers to them.

        The handles move in one step that Ctrl-C cannot split: two objects owning them
        would both free them (a double free in the driver)."""
        new = Buffer.__new__(Buffer)
        new.handle = new.memory = new._mapped = new._views = None  # owns nothing yet
        new.device, new.nbytes, new._lock = self.device, old.nbytes, threading.Lock()
        new.purpose, new.choice = old.purpose, old.choice
        new._coherent, new._allocation_size = old._coherent, old._allocation_size
        with ctrl_c_deferred():
            self.device.forget_buffer(old)  # if this raises, ``old`` still owns everything
            new.handle, new.memory, new._mapped, new._views = (
                old.handle,
                old.memory,
                old._mapped,
                old._views,
            )
            old.handle = old.memory = old._mapped = old._views = None
            self.device.register_buffer(new)
        return new

    def release(self, buf: Buffer) -> None:
        """Give ``buf`` back; it is destroyed instead when the pool is full."""
        with self.device.lock:
            if not buf.alive:
                return
            if buf.nbytes > self.max_bytes:
                buf.destroy()
                return
            self._free.append(buf)
            while (
                len(self._free) > self.max_buffers
                or sum(b.nbytes for b in self._free) > self.max_bytes
            ):
                self._free.pop(0).destroy()

    def clear(self) -> None:
        """Destroy every free buffer."""
        with self.device.lock:
            while self._free:
                self._free.pop().destroy()


class _Lent:
    """The owner numpy sees behind a pooled result array (``__array_interface__``): every
    view of the result keeps it alive, and when the last one goes, the slot goes back.

    The slot holds its pages, and its VkBuffer only weakly (the pool owns it): a result
    never keeps its device (or the device's pools) alive, and outlives it as an ordinary
    array.
    """

    def __init__(self, slot: _HostSlot, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.slot = slot  # keeps the pages alive for as long as any view exists
        self.__array_interface__ = {
            "data": (slot.raw.ctypes.data, False),
            "shape": shape,
            "typestr": dtype.str,
            "version": 3,
        }


class _HostSlot:
    """Page-aligned host memory and, on devices that import host memory, its VkBuffer.

    The VkBuffer is owned by the pool (``HostArrayPool._imports``); the slot, which a
    result array keeps alive, refers to it weakly, so results never hold their device.
    """

    def __init__(self, raw: np.ndarray) -> None:
        self.raw = raw
        self._buffer: weakref.ref[HostBuffer] | None = None  # imported on first need

    @property
    def buffer(self) -> HostBuffer | None:
        return self._buffer() if self._buffer is not None else None

    @property
    def nbytes(self) -> int:
        return int(self.raw.nbytes)


class HostArrayPool:
    """Large numpy results of kernels, carved from recycled page-aligned host memory.

    A fresh 64 MiB result costs about 16,000 first-touch page faults (measured on lavapipe:
    5-9 ms, a third of a 4096x4096 softmax). :meth:`empty` hands out an ordinary ndarray
    whose memory comes back here when the last reference to it (or to any view of it) is
    gone, pages already touched and, where the device imports host memory, still imported
    as a VkBuffer the kernel writes in place. At most ``max_bytes`` and ``max_slots`` of
    free memory are kept (the oldest go first); memory in use by results is not counted.
    """

    def __init__(self, device: Device, max_bytes: int = 256 << 20, max_slots: int = 8) -> None:
        self.device = device
        self.max_bytes = max_bytes
        self.max_slots = max_slots
        self._free: list[_HostSlot] = []  # oldest first
        self._imports: dict[int, HostBuffer] = {}  # id(slot) -> the VkBuffer over it
        # Slots whose arrays died; filled by finalizers (any thread, even inside a Vulkan
        # call of this one), so only appended to there and drained under the device lock.
        self._returned: collections.deque[_HostSlot] = collections.deque()

    def empty(
        self, shape: tuple[int, ...], dtype: Any, *, imported: bool = False
    ) -> tuple[np.ndarray, HostBuffer | None]:
        """An uninitialized C-contiguous array and, with ``imported`` on a device that
        imports host memory, the VkBuffer over it (data at offset 0; the pool owns it)."""
        dt = np.dtype(dtype)
        align = self._alignment()
        nbytes = self.slot_bytes(math.prod(shape) * dt.itemsize)
        with self.device.lock:
            self._drain()
            slot = self._take(nbytes) or _HostSlot(page_aligned_empty((nbytes,), np.uint8, align))
            if imported and slot.buffer is None and can_import_host(self.device):
                buffer = HostBuffer(self.device, slot.raw)
                buffer.reusable = True  # owned here, destroyed by the pool or the device
                self._imports[id(slot)] = buffer
                slot._buffer = weakref.ref(buffer)
        lent = _Lent(slot, tuple(shape), dt)
        # Only a weak reference to the pool: a live result must not keep its device alive.
        weakref.finalize(lent, _give_back, weakref.ref(self._returned), slot)
        return np.asarray(lent), slot.buffer

    def _alignment(self) -> int:
        return max(4096, self.device.info.min_imported_host_pointer_alignment)

    def slot_bytes(self, nbytes: int) -> int:
        """Bytes of the block (and of its VkBuffer) behind a result of ``nbytes`` bytes."""
        align = self._alignment()
        return -(-max(nbytes, 1) // align) * align

    def _take(self, nbytes: int) -> _HostSlot | None:
        for i, slot in enumerate(self._free):
            if slot.nbytes == nbytes and (slot.buffer is None or slot.buffer.alive):
                return self._free.pop(i)
        return None

    def _drain(self) -> None:
        while self._returned:
            self._free.append(self._returned.popleft())
        while (
            len(self._free) > self.max_slots or sum(s.nbytes for s in self._free) > self.max_bytes
        ):
            self._free_slot(self._free.pop(0))

    def _free_slot(self, slot: _HostSlot) -> None:
        buffer = self._imports.pop(id(slot), None)
        if buffer is not None:
            buffer.destroy()  # before the pages can go: the import refers to them
        slot._buffer = None

    def clear(self) -> None:
        """Free every slot not in use by a result."""
        with self.device.lock:
            self._drain()
            while self._free:
                self._free_slot(self._free.pop())


def _give_back(returned: weakref.ref[collections.deque[_HostSlot]], slot: _HostSlot) -> None:
    """A pooled result died: queue its slot, if the pool still exists."""
    queue = returned()
    if queue is not None:
        queue.append(slot)


_Pool = TypeVar("_Pool", BufferPool, HostArrayPool)
_pools: weakref.WeakKeyDictionary[Device, BufferPool] = per_device_map()
_host_pools: weakref.WeakKeyDictionary[Device, HostArrayPool] = per_device_map()


def _pool_of(
    pools: weakref.WeakKeyDictionary[Device, _Pool], device: Device, make: Callable[[Device], _Pool]
) -> _Pool:
    with device.lock:
        pool = pools.get(device)
        if pool is None:
            pool = pools[device] = make(device)
        return pool


def buffer_pool(device: Device) -> BufferPool:
    """The device's :class:`BufferPool` (created on first use)."""
    return _pool_of(_pools, device, BufferPool)


def host_pool(device: Device) -> HostArrayPool:
    """The device's :class:`HostArrayPool` (created on first use)."""
    return _pool_of(_host_pools, device, HostArrayPool)
