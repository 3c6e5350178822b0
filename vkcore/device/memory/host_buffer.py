"""Numpy memory the device reads and writes in place (VK_EXT_external_memory_host), and
the one rule for when host memory is shared with the device instead of copied."""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.device import placement
from vkcore.device.context import DeviceContext, check_allocation
from vkcore.device.memory.buffer import BUFFER_USAGE, Buffer
from vkcore.errors import VulkanError

# Host arrays from this size on are shared with the device instead of copied or freshly
# allocated: a numpy input is imported as a buffer (measured on lavapipe: an import costs
# ~40 us, copying 1 MiB in and out ~100-200 us), and a numpy result comes from pooled,
# already touched memory (pools.HostArrayPool); smaller results are plain np.empty
# arrays, which malloc recycles cheaply anyway.
HOST_SHARING_MIN_BYTES = 1 << 20

_HOST_ALLOCATION = vk.VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT


def can_import_host(device: DeviceContext) -> bool:
    """True when kernels should wrap numpy memory as buffers instead of copying it:
    the device imports host memory (VK_EXT_external_memory_host) and shares the host's
    memory (a CPU or integrated device). A discrete GPU would read imported memory over
    the bus on every pass, so there one upload to device-local memory is cheaper."""
    return (
        "VK_EXT_external_memory_host" in getattr(device, "enabled_extensions", ())
        and device.info.min_imported_host_pointer_alignment > 0
        and device.info.device_type in ("cpu", "integrated")
    )


def imports_host_array(device: DeviceContext, array: np.ndarray) -> bool:
    """True when a kernel should read (or write) ``array`` in place through a
    :class:`HostBuffer` rather than copy it: large enough (HOST_SHARING_MIN_BYTES), writable
    (an import lets the device write it), on a device that imports host memory."""
    return (
        array.nbytes >= HOST_SHARING_MIN_BYTES
        and bool(array.flags.writeable)
        and can_import_host(device)
    )


class HostBuffer(Buffer):
    """A VkBuffer over memory numpy already owns (VK_EXT_external_memory_host): no copy.

    The driver reads and writes the array's own pages, so the array must stay alive and
    unmoved until :meth:`destroy`. The imported range is the array's pages rounded out
    to ``minImportedHostPointerAlignment``; ``offset`` is where the array starts in the
    buffer, in bytes. Kernels that accept it take the offset as an argument.
    """

    def __init__(self, device: DeviceContext, array: np.ndarray) -> None:  # noqa: D107
        if not can_import_host(device):
            raise ValueError("this device cannot import host memory (VK_EXT_external_memory_host)")
        if not array.flags.c_contiguous or array.nbytes == 0:
            raise ValueError("array must be a non-empty C-contiguous numpy array")
        align = device.info.min_imported_host_pointer_alignment
        ptr = array.ctypes.data
        base = ptr - ptr % align
        end = ptr + array.nbytes
        size = -(-(end - base) // align) * align
        check_allocation(device, size, "array")
        self.device = device
        self.nbytes = size
        self.offset = ptr - base
        self.array: np.ndarray | None = array  # keeps the pages alive while the buffer exists
        self.handle = None
        self.memory = None
        self._lock = threading.Lock()
        keep = _vk.Keep()
        external = keep.struct("VkExternalMemoryBufferCreateInfo", handleTypes=_HOST_ALLOCATION)
        info = keep.struct(
            "VkBufferCreateInfo", pNext=external, size=size, usage=BUFFER_USAGE, sharingMode=0
        )
        self._create(info, lambda: self._import(keep, base, size))

    def _import(self, keep: _vk.Keep, base: int, size: int) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        host_ptr = ffi.cast("void*", base)
        props = keep.struct("VkMemoryHostPointerPropertiesEXT")
        get_props = _host_pointer_properties(dev)
        _vk.check(
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


def _host_pointer_properties(device: DeviceContext) -> Any:
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
