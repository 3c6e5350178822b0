"""DeviceContext: what every object made on a device needs from that device.

A buffer, a pipeline, the pipeline cache or the submitter is given a DeviceContext: the
VkDevice and its compute queue, the binding (``ffi``, ``lib``), the physical device and
its :class:`~vkcore.device.info.DeviceInfo`, the memory types and the placement policy
(:meth:`DeviceContext.placement`), the device lock and :meth:`DeviceContext.check`. The
context also records every live buffer, so that closing frees them whatever else is
gone, and holds the per-device state other modules keep
(:class:`vkcore.base.per_device.PerDeviceMap`).

:class:`vkcore.Device` is a DeviceContext that owns the rest (submitter, staging copies,
pipelines and their cache); the modules below it only ever see this class.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np

from vkcore import _vk
from vkcore.base import config
from vkcore.base.per_device import PerDeviceMap, StateOwner
from vkcore.device import logical
from vkcore.device.info import choose, query_info
from vkcore.device.instance import Instance
from vkcore.device.placement import (
    Choice,
    MemoryHeap,
    MemoryType,
    Placement,
    place,
    read_in_place_max,
)
from vkcore.errors import VulkanError

log = logging.getLogger("vkcore")


# The C module under ``signal``: its functions skip the enum conversions of the wrappers
# (most of a deferral's cost, and kernels defer several times a call).
try:
    import _signal as _raw_signal
except ImportError:  # pragma: no cover - another Python implementation
    _raw_signal = signal


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then deliver it (main thread only).

    A teardown stopped halfway would leave half-destroyed objects that later calls or
    finalizers would destroy a second time.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread receives KeyboardInterrupt
        return
    previous = _raw_signal.getsignal(signal.SIGINT)
    if previous is None:
        yield  # a handler set in C: left alone
        return
    caught: list[Any] = []
    _raw_signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        _raw_signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # Python's default handler raises KeyboardInterrupt
        elif caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


class Settles(Protocol):
    """What the context needs of a submission
    (:class:`~vkcore.device.submit.submission.Submission`)."""

    unsettled: bool  # a plain attribute: read before every free

    def settle(self) -> None: ...


class LiveBuffer(Protocol):
    """What the context needs of the buffers it records
    (:class:`~vkcore.device.memory.buffer.Buffer`)."""

    handle: Any
    memory: Any
    nbytes: int
    _views: dict[str, Any] | None

    @property
    def alive(self) -> bool: ...

    def destroy(self) -> None: ...

    def _abandon(self) -> None: ...


class TransferService(Protocol):
    """Copies to and from buffers the host cannot map
    (:class:`~vkcore.device.submit.transfers.Transfers`)."""

    def upload(self, dst: Any, raw: np.ndarray, offset: int) -> None: ...

    def download(self, src: Any, raw: np.ndarray, offset: int) -> None: ...


class _BufferHandles(NamedTuple):
    """The Vulkan objects of one live buffer, as the context recorded them."""

    handle: Any
    memory: Any
    views: dict[str, Any]


def check_allocation(device: DeviceContext, nbytes: int, name: str) -> None:
    """ValueError when one allocation of ``nbytes`` exceeds the device's limit."""
    limit = device.info.max_memory_allocation_size or (1 << 62)
    if nbytes > limit:
        raise ValueError(
            f"{name} needs {nbytes} bytes in one buffer, more than this device's "
            f"maxMemoryAllocationSize ({limit} bytes)"
        )


class DeviceContext(StateOwner):
    """A VkDevice with one compute queue, its memory types, and the registry of its buffers.

    ``selector`` (already checked) picks the physical device: an index or a name
    substring, else ``$VKCORE_DEVICE``, else the best device. ``validation`` enables the
    Khronos validation layer (default: ``$VKCORE_VALIDATION``).
    """

    # Staging copies for unmapped buffers; set by the owner (vkcore.Device).
    transfers: TransferService
    # Closed until __init__ has created the device: a finalizer of a half-made one is a no-op.
    _closed = True

    def __init__(self, selector: str | int | None, *, validation: bool | None) -> None:
        self.ffi, self.lib = _vk.api()
        self.lock = threading.RLock()
        self.handle: Any = None
        self._closed = False
        self._inherited = False  # set in a forked child: the objects are the parent's
        self._state: dict[PerDeviceMap, Any] = {}
        self._buffers: dict[int, weakref.ref[LiveBuffer]] = {}
        self._buffer_handles: dict[int, _BufferHandles] = {}
        # id -> out-pointers of each pipeline not yet destroyed (what close must destroy)
        self._pipeline_objects: dict[int, tuple[Any, ...]] = {}
        self.instance = Instance(
            config.validation_requested() if validation is None else validation
        )
        try:
            physicals = self.instance.physical_devices()
            infos = [query_info(self.instance, pd, i) for i, pd in enumerate(physicals)]
            self.info = (
                choose(infos, selector)
                if selector is not None  # $VKCORE_DEVICE: a bad value warns, best device
                else config.env_choice("VKCORE_DEVICE", lambda s: choose(infos, s))
            )
            self.physical = physicals[self.info.index]
            made = logical.create(self.ffi, self.lib, self.physical, self.info)
            self.handle, self.queue = made.handle, made.queue
            self.queue_family = made.queue_family
            self.timestamp_valid_bits = made.timestamp_valid_bits
            self.enabled_extensions = made.enabled_extensions
            self._memory_properties()
        except BaseException:
            self._destroy_partial()
            raise

    # ------------------------------------------------------------------ memory
    def _memory_properties(self) -> None:
        """The memory types and heaps as the placement policy takes them, and the policy's
        one switch (``VKCORE_FORCE_STAGING``), read once per device."""
        self.memory_heaps = [MemoryHeap(size, f) for size, f in self.info.memory_heaps]
        self.memory_types = [
            MemoryType(i, f, heap) for i, (f, heap) in enumerate(self.info.memory_types)
        ]
        self.force_staging = config.env_flag("VKCORE_FORCE_STAGING")
        self._fallbacks_said: set[str] = set()
        self._read_limits: dict[int, int] = {}  # memory type -> read_in_place_max

    def placement(self, purpose: str, type_bits: int = 0xFFFFFFFF) -> Placement:
        """The memory types a buffer of ``purpose`` may take, best first
        (:func:`vkcore.device.placement.place` on this device's types and heaps)."""
        return place(
            self.memory_types,
            self.memory_heaps,
            purpose,
            type_bits=type_bits,
            force_staging=self.force_staging,
        )

    def read_in_place_max(self, type_index: int) -> int:
        """:func:`vkcore.device.placement.read_in_place_max` for this device's memory type (worked
        out once per type: buffers ask at every host read)."""
        limits = self._read_limits
        if type_index not in limits:
            limits[type_index] = read_in_place_max(self.memory_types, self.memory_heaps, type_index)
        return limits[type_index]

    def note_fallback(
        self,
        purpose: str,
        nbytes: int,
        failed: Choice,
        next_choice: Choice,
        exc: VulkanError,
    ) -> None:
        """Say once per purpose that a preferred memory type could not hold a buffer."""
        if purpose in self._fallbacks_said:
            return
        self._fallbacks_said.add(purpose)
        log.warning(
            "%s: a %d-byte %s buffer did not fit in memory type %d (%s): using memory type "
            "%d (%s) instead; later fallbacks of %s buffers on this device are not reported",
            self.info.name,
            nbytes,
            purpose,
            failed.type_index,
            exc.result_name or exc,
            next_choice.type_index,
            "mapped" if next_choice.mapped else "device-local, through staging",
            purpose,
        )

    def memory_budget(self) -> list[tuple[int, int]] | None:
        """``(budget, usage)`` in bytes per heap (VK_EXT_memory_budget), or None where the
        device does not offer the extension."""
        return logical.memory_budget(self.lib, self.physical, self.enabled_extensions)

    # ------------------------------------------------------------------ state
    def check(self) -> None:
        """Raise if the device is closed or the validation layer reported an error."""
        if self._closed:
            raise RuntimeError(self.closed_reason())
        self.instance.check()

    def closed_reason(self) -> str:
        """Why this device cannot be used (for error messages)."""
        if self._inherited:
            return (
                "this vkcore.Device belongs to the parent process: Vulkan objects do not "
                "survive os.fork(); create a new Device in the child (or use the "
                "multiprocessing 'spawn' start method)"
            )
        return "this vkcore.Device is closed"

    @property
    def validation_messages(self) -> list[str]:
        """Every validation message (errors and warnings) seen so far."""
        return list(self.instance.messages)

    @property
    def closed(self) -> bool:
        return self._closed

    # The single calls' submission (the submitter's): one an exception cut short may still
    # use memory, so freeing memory settles it first.
    call_submission: Settles | None = None

    def before_free(self) -> None:
        """Called before a buffer's memory is freed or handed to other work: finishes a
        submission an exception cut short, which may still use it (nothing otherwise)."""
        call = self.call_submission
        if call is not None and call.unsettled:
            with self.lock:
                call.settle()

    def wait_idle(self) -> None:
        with self.lock:
            if self.handle is not None:
                _vk.check(self.lib.vkDeviceWaitIdle(self.handle), "vkDeviceWaitIdle")

    # ------------------------------------------------------------------ buffers
    def register_buffer(self, buffer: LiveBuffer) -> None:
        """Record a live buffer and its Vulkan objects (``buffer._views`` becomes the dict
        its texel views are added to), so close can free them whatever else is gone."""
        if buffer._views is None:
            buffer._views = {}
        key = id(buffer)
        self._buffers[key] = weakref.ref(buffer)
        self._buffer_handles[key] = _BufferHandles(buffer.handle, buffer.memory, buffer._views)

    def forget_buffer(self, buffer: LiveBuffer) -> None:
        """Stop recording ``buffer`` (it is being destroyed, or handed to another object)."""
        self._buffers.pop(id(buffer), None)
        self._buffer_handles.pop(id(buffer), None)

    def register_pipeline(self, pipeline_id: int, outs: tuple[Any, ...]) -> None:
        """Record the out-pointers of the pipeline ``id(pipeline)``: the device's close
        destroys what they hold, even when the pipeline was collected with the device."""
        self._pipeline_objects[pipeline_id] = outs

    def forget_pipeline(self, pipeline_id: int) -> None:
        """The pipeline ``id(pipeline)`` is being destroyed: stop recording it."""
        self._pipeline_objects.pop(pipeline_id, None)

    def take_pipeline_objects(self) -> list[tuple[Any, ...]]:
        """The out-pointers of every pipeline not yet destroyed, no longer recorded (the
        device is closing: the caller destroys them)."""
        taken = list(self._pipeline_objects.values())
        self._pipeline_objects.clear()
        return taken

    def live_buffers(self) -> list[LiveBuffer]:
        """The recorded buffers still alive."""
        alive = (ref() for ref in list(self._buffers.values()))
        return [b for b in alive if b is not None and b.alive]

    def _destroy_buffers(self) -> None:
        """Destroy every live buffer. One the collector is finalizing has lost its weak
        reference already (cleared before finalizers run): its recorded handles are freed
        here, and its own destroy() later finds the VkDevice gone and calls nothing."""
        ffi, lib = self.ffi, self.lib
        for key, ref in list(self._buffers.items()):
            buf = ref()
            if buf is not None:
                buf.destroy()
                continue
            rec = self._buffer_handles.get(key)
            if rec is None:
                continue
            for view in rec.views.values():
                lib.vkDestroyBufferView(self.handle, view, ffi.NULL)
            rec.views.clear()
            if rec.memory is not None:
                lib.vkFreeMemory(self.handle, rec.memory, ffi.NULL)
            lib.vkDestroyBuffer(self.handle, rec.handle, ffi.NULL)
        self._buffers.clear()
        self._buffer_handles.clear()

    # ------------------------------------------------------------------ lifetime
    def _destroy_partial(self) -> None:
        """Destroy the buffers, the VkDevice and the instance, whichever exist; safe after
        a failed __init__. The owner destroys its own objects first."""
        self._closed = True
        if self.handle is not None:
            self._destroy_buffers()
            self.lib.vkDestroyDevice(self.handle, self.ffi.NULL)
            self.handle = None
        self.instance.destroy()

    def _abandon(self) -> None:
        """In a forked child: forget every Vulkan object (they are the parent's) without
        calling Vulkan, so that close, finalizers and exit never touch them."""
        self._inherited = True
        self._closed = True
        self.lock = threading.RLock()  # a parent thread may have held it at the fork
        for ref in list(self._buffers.values()):
            buf = ref()
            if buf is not None:
                buf._abandon()
        self._buffers.clear()
        self._buffer_handles.clear()
        self._pipeline_objects.clear()
        self._state.clear()
        self.handle = None
        self.instance.handle = self.instance.messenger = None
