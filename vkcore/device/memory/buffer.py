"""Buffer: one VkBuffer bound to its own VkDeviceMemory, read and written with numpy copies.

Memory choice: every buffer has a purpose (``resident`` for Tensors, weights and kernel
buffers; ``upload`` and ``readback`` for the two staging buffers; ``params``) and takes
the first memory type of ``DeviceContext.placement(purpose)`` (the one policy,
:func:`vkcore.device.placement.place`) that it can be allocated in. A mapped buffer is read and
written with numpy copies, flushed after host writes and invalidated before host reads
where its type is not HOST_COHERENT (:mod:`~vkcore.device.memory.mapping`); an unmapped
(device-local) one is reached through the device's staging copies
(:mod:`vkcore.device.submit.transfers`).
``VKCORE_FORCE_STAGING=1`` keeps resident buffers unmapped. An allocation that fails for
lack of memory falls back to the next type of the placement (said once per device and
purpose on the ``vkcore`` logger).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.device import placement
from vkcore.device.context import DeviceContext, check_allocation
from vkcore.device.info import TEXEL_FORMATS
from vkcore.device.memory import mapping
from vkcore.device.memory.holds import Held
from vkcore.errors import VulkanError, shown

# Results after which the next memory type of a placement is tried: out of host or device
# memory, or a mapping that failed (out of address space).
_FALLBACK_RESULTS = frozenset({-1, -2, -5})


# Any buffer can be bound to a kernel's storage, texel or (vkcore.Program) uniform bindings.
BUFFER_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT
)


class ReturnTo(Protocol):
    """Where a leased buffer goes back to instead of being destroyed
    (:class:`vkcore.device.memory.pools.BufferPool`)."""

    def take_back(self, lent: Buffer) -> bool: ...


class MappedBytes:
    """Byte access to a buffer's mapped memory that never hands out a view of it.

    Indexing returns a copy and assignment writes through, both under the buffer's lock
    and only while it is alive: no numpy array can outlive the mapping (a view kept past
    ``destroy`` would read freed memory or crash). It reads in place at any size.
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


class Buffer(Held):
    """One VkBuffer bound to its own VkDeviceMemory (storage + transfer usage).

    ``view(format)`` gives a VkBufferView over the whole buffer for texel-buffer reads;
    views are created once and destroyed with the buffer. ``read``/``write`` copy between
    numpy arrays and the buffer; the mapping itself is never handed out as an array.
    """

    _views: dict[str, Any] | None = None
    _mapped: np.ndarray | None = None  # the mapping; never leaves this class
    # The mapping seen as the latest whole-buffer array's (dtype, shape, in-place reads):
    # write and read of a whole buffer copy through it. Never leaves this class either.
    _whole: tuple[np.dtype, tuple[int, ...], np.ndarray, bool] | None = None

    # True for long-lived buffers (pooled, placeholders): the submitter may keep a recorded
    # command buffer that references them, dropped when the buffer is destroyed.
    reusable = False
    # A leased buffer (BufferPool.lease) goes back to its pool instead of being destroyed.
    _return_to: ReturnTo | None = None
    # Where the memory went (a choice of Device.placement(purpose)); None for imports.
    choice: placement.Choice | None = None
    purpose = "resident"
    _coherent = True  # False: flush after host writes, invalidate before host reads
    _allocation_size = 0  # VkMemoryRequirements.size: the whole mapped allocation

    def __init__(self, device: DeviceContext, nbytes: int, *, purpose: str = "resident") -> None:
        if purpose not in placement.PURPOSES:
            raise ValueError(f"purpose must be one of {placement.PURPOSES}, got {shown(purpose)}")
        if nbytes <= 0:
            raise ValueError(f"buffer size must be positive, got {nbytes}")
        check_allocation(device, nbytes, "buffer")
        self.device = device
        self.nbytes = nbytes
        self.purpose = purpose
        self.handle: Any = None
        self.memory: Any = None
        self._lock = threading.Lock()
        keep = _vk.Keep()
        usage = BUFFER_USAGE | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
        usage |= vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
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
                _vk.check(result, "vkCreateBuffer")
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
        self._mapped = self._whole = None
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
        _vk.check(result, "vkAllocateMemory")

    def _bind_memory(self) -> None:
        dev = self.device
        result = dev.lib.vkBindBufferMemory(dev.handle, self.handle, self.memory, 0)
        _vk.check(result, "vkBindBufferMemory")

    def _allocate_in(self, choice: placement.Choice, size: int) -> None:
        """Allocate and (for a mapped choice) map memory of one type. Each handle is
        recorded as soon as the call that made it returns, so a failure or a Ctrl-C
        after it never leaves memory the caller cannot free."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        info = keep.struct(
            "VkMemoryAllocateInfo", allocationSize=size, memoryTypeIndex=choice.type_index
        )
        self._allocate_memory(info)
        if choice.mapped:
            # The whole allocation is mapped, so ranges rounded out to nonCoherentAtomSize
            # stay inside the mapping.
            ptr = ffi.new("void**")
            _vk.check(
                lib.vkMapMemory(dev.handle, self.memory, 0, mapping.VK_WHOLE_SIZE, 0, ptr),
                "vkMapMemory",
            )
            self._mapped = np.frombuffer(ffi.buffer(ptr[0], self.nbytes), dtype=np.uint8)
        self.choice = choice
        self._allocation_size = size
        self._coherent = choice.coherent and not mapping.ASSUME_NON_COHERENT

    def _sync_mapped(self, offset: int, size: int, *, flush: bool) -> None:
        """Flush host writes to (or invalidate the host's view of) bytes ``[offset,
        offset + size)`` of non-coherent mapped memory; nothing for coherent memory."""
        if not self._coherent:
            mapping.sync_range(
                self.device, self.memory, offset, size, self._allocation_size, flush=flush
            )

    @property
    def read_in_place_max(self) -> int:
        """Host reads larger than this are staged (uncached resident memory only)."""
        if self.choice is None or self.purpose != "resident":  # imports, staging buffers
            return placement.NO_LIMIT
        return self.device.read_in_place_max(self.choice.type_index)

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
        views = self._views if self._views is not None else {}
        self._views = views
        handle = views.get(fmt)
        if handle is None:
            dev = self.device
            size = 16 if "rgba" in fmt else 4
            texels = self.nbytes // size
            if texels > dev.info.max_texel_buffer_elements:  # a clamped view would read 0s
                raise ValueError(
                    f"a {fmt} view of {texels} texels is more than this device's "
                    f"maxTexelBufferElements ({dev.info.max_texel_buffer_elements})"
                )
            keep = _vk.Keep()
            info = keep.struct(
                "VkBufferViewCreateInfo",
                buffer=self.handle,
                format=TEXEL_FORMATS[fmt],
                offset=0,
                range=texels * size,
            )
            out = dev.ffi.new("VkBufferView*")
            _vk.check(
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
        if self._holders:
            self._before_host(reading=False)
        elif offset == 0 and type(offset) is int:  # a small call's staging: one assignment
            whole = self._whole_for(data)
            if whole is not None:
                with self._lock:  # as _copy_mapped: no unmapping in the middle of the copy
                    if self.handle is None:
                        self._require_alive()
                    whole[2][...] = data  # same dtype and shape: a plain copy
                    if not self._coherent:
                        self._sync_mapped(0, self.nbytes, flush=True)
                return
        if not isinstance(data, np.ndarray):
            raise TypeError(f"data must be a numpy array, got {type(data).__name__}")
        self._check_range(data.nbytes, offset, "data")
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if self._copy_mapped(raw, offset, into_buffer=True):
            return
        with self.device.lock:  # no destroy between the check and the copy
            self._require_alive()
            self.device.transfers.upload(self, raw, offset)

    def read(self, out: np.ndarray, offset: int = 0) -> None:
        """Fill the array ``out`` (in C order) with ``out.nbytes`` bytes from ``offset``.

        A non-contiguous ``out`` is filled through a contiguous copy: reshaping it would
        copy, and the data would land in the copy instead of ``out``.
        """
        if self._holders:
            self._before_host(reading=True)
        elif offset == 0 and type(offset) is int:  # a small call's results: one assignment
            whole = self._whole_for(out)
            if whole is not None and whole[3] and out.flags.writeable:
                with self._lock:
                    if self.handle is None:
                        self._require_alive()
                    if not self._coherent:
                        self._sync_mapped(0, self.nbytes, flush=False)
                    out[...] = whole[2]
                return
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
            self.device.transfers.download(self, raw, offset)

    def _whole_for(
        self, arr: np.ndarray
    ) -> tuple[np.dtype, tuple[int, ...], np.ndarray, bool] | None:
        """The kept view when ``arr`` matches it (the repeated case, in a few
        comparisons), else :meth:`_whole_view`."""
        whole = self._whole
        if (
            whole is not None
            and type(arr) is np.ndarray
            and arr.dtype is whole[0]
            and arr.shape == whole[1]
            and not self._holders
            and arr.flags.c_contiguous
        ):
            return whole
        return self._whole_view(arr)

    def _whole_view(
        self, arr: np.ndarray
    ) -> tuple[np.dtype, tuple[int, ...], np.ndarray, bool] | None:
        """The mapping viewed as ``arr``'s dtype and shape, kept for the next whole copy
        (with whether a read may copy in place), or None where the plain path must run: a
        sequence holds the buffer, the buffer is not mapped, or ``arr`` is not a
        C-contiguous array of its size."""
        if self._holders or not self._fits_whole(arr, 0) or not arr.dtype.isbuiltin:
            return None  # (a structured dtype would be copied field by field, not its padding)
        with self._lock:
            if self._mapped is None:
                return None
            view = self._mapped.view(arr.dtype).reshape(arr.shape)
            whole = (arr.dtype, arr.shape, view, self.nbytes <= self.read_in_place_max)
            self._whole = whole
            return whole

    def _fits_whole(self, arr: object, offset: object) -> bool:
        """A C-contiguous numpy array of exactly this mapped buffer's size at offset 0."""
        return (
            type(arr) is np.ndarray
            and offset == 0
            and type(offset) is int
            and arr.nbytes == self.nbytes
            and self._mapped is not None
            and arr.flags.c_contiguous
        )

    def _check_range(self, nbytes: int, offset: int, name: str) -> None:
        if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
            raise TypeError(f"offset must be an int, got {type(offset).__name__}")
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(
                f"{name} ({nbytes} bytes at offset {offset}) does not fit this "
                f"{self.nbytes}-byte buffer"
            )

    def _copy_mapped(self, raw: np.ndarray, offset: int, *, into_buffer: bool) -> bool:
        """Copy through the mapping (False when the buffer is not mapped, or for a read
        too large to make in place from uncached memory: the caller stages it).

        Holds the buffer's lock, so another thread closing the device cannot unmap and
        free the memory in the middle of the copy (numpy copies without the GIL).
        """
        with self._lock:
            self._require_alive()
            if self._mapped is None or (not into_buffer and raw.size > self.read_in_place_max):
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
        self._mapped = self._whole = None
        self._views = None

    def destroy(self) -> None:
        """Release the buffer and its memory; idempotent."""
        dev = self.device
        # The device lock first: Device.close holds it while it destroys its buffers.
        with dev.lock, self._lock:
            if self.handle is None:
                return
            if self.held:  # freed when the last holder lets go (and its work has finished)
                self._destroy_when_free = True
                return
            dev.before_free()  # no submission cut short still uses this memory
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
            self._mapped = self._whole = None  # (freed with its device if that closed first)
            self._views = None

    def __del__(self) -> None:
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass
