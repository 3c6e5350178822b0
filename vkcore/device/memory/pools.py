"""The per-device pools kernels borrow from: device buffers (:class:`BufferPool`) and
page-aligned host memory for large numpy results (:class:`HostArrayPool`)."""

from __future__ import annotations

import collections
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from vkcore.base.per_device import PerDeviceMap
from vkcore.device.context import DeviceContext, ctrl_c_deferred
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer, can_import_host, page_aligned_empty


class BufferPool:
    """Buffers that numpy-in, numpy-out kernel calls borrow and give back, per device.

    Reusing the same VkBuffers call after call saves their creation (tens of microseconds
    each through the binding) and lets the submitter reuse a recorded command buffer for
    a repeated call. Free buffers are kept by exact size, at most ``max_buffers`` of them
    and ``max_bytes`` in all (the oldest go first: some GPUs allow only 4096 allocations);
    the device destroys whatever is left when it closes.
    """

    def __init__(
        self, device: DeviceContext, max_bytes: int = 256 << 20, max_buffers: int = 32
    ) -> None:
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
        """A buffer of ``nbytes`` for a kernel's output Tensor that, when destroyed or
        collected, gives its memory back to this pool (already touched pages: no page
        faults on the next output of that size) rather than freeing it.

        The pool's own Buffer object is handed over. It stops being ``reusable`` (its
        owner decides its lifetime), so nothing reuses a recording for it: a command
        buffer kept from its pool days, or a Program's remembered dispatch, still names
        it but is only reused over reusable buffers; the kept recordings go when it comes
        back (:meth:`take_back` moves its memory to a new object)."""
        with self.device.lock:
            lent = self.acquire(nbytes)
            lent.reusable = False
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
            old.handle = old.memory = old._mapped = old._views = old._whole = None
            self.device.register_buffer(new)
        return new

    def release(self, buf: Buffer) -> None:
        """Give ``buf`` back; it is destroyed instead when the pool is full."""
        with self.device.lock:
            if not buf.alive or buf.defer_release(self):  # a sequence binds it: later
                return
            self.device.before_free()  # no submission cut short still uses it
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

    def __init__(
        self, device: DeviceContext, max_bytes: int = 256 << 20, max_slots: int = 8
    ) -> None:
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
_pools: PerDeviceMap[BufferPool] = PerDeviceMap()
_host_pools: PerDeviceMap[HostArrayPool] = PerDeviceMap()


def _pool_of(
    pools: PerDeviceMap[_Pool],
    device: DeviceContext,
    make: Callable[[DeviceContext], _Pool],
) -> _Pool:
    with device.lock:
        pool = pools.get(device)
        if pool is None:
            pool = pools[device] = make(device)
        return pool


def buffer_pool(device: DeviceContext) -> BufferPool:
    """The device's :class:`BufferPool` (created on first use)."""
    return _pool_of(_pools, device, BufferPool)


def host_pool(device: DeviceContext) -> HostArrayPool:
    """The device's :class:`HostArrayPool` (created on first use)."""
    return _pool_of(_host_pools, device, HostArrayPool)
