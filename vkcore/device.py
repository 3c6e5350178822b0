"""The logical device: queue, pools, memory types, pipelines; owner of every Vulkan object.

Ownership and destruction order (``Device.close``): wait for the queue to be idle, then
command resources, pipelines, descriptor pool, live buffers, the pipeline cache (saved
first), the command pool, the VkDevice and finally the instance with its messenger.
Garbage collection only calls ``close`` as a fallback: per-device state other modules
keep (:func:`per_device_map`) lives on the device itself, so it never keeps a dropped
device alive, and the device records the raw handles of every live buffer, so it can
free them even when the collector has already cleared its weak references to them.

Vulkan objects do not survive ``os.fork()``: in a child process every inherited Device is
marked as belonging to the parent; the child never calls Vulkan on it (not even to
destroy it), a kernel call on it raises RuntimeError, and the default device is created
anew on first use.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import operator
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from . import config, vkapi
from .errors import VulkanError
from .instance import DeviceInfo, Instance, choose, enabled_device_extensions, query_info
from .placement import Choice, MemoryHeap, MemoryType, Placement, place

if TYPE_CHECKING:
    from .commands import Submitter
    from .memory import Buffer
    from .pipeline import Pipeline
    from .pipeline_cache import PipelineCache
    from .spirv import Spirv

log = logging.getLogger("vkcore")

# Descriptor pool size: sets are freed after each submission, so this bounds one call.
_MAX_SETS = 1024
# A dropped device is freed by the cyclic garbage collector (it and its objects refer to
# each other), which may not run for a long time: creating a device while this many are
# open runs it first, so a loop that drops devices keeps only a few alive at once.
_COLLECT_WHEN_OPEN = 4
# Reported by `vkcore info` (heap budgets and usage) wherever the device offers it.
MEMORY_BUDGET = "VK_EXT_memory_budget"
HEAP_FLAG_NAMES = {"DEVICE_LOCAL": 0x1, "MULTI_INSTANCE": 0x2}


_MISSING = object()


class PerDeviceMap(weakref.WeakKeyDictionary[Any, Any]):
    """A ``{Device: state}`` mapping whose entries are stored on the devices themselves.

    Per-device state (buffer pools, placeholder buffers, memoized pipelines) refers back
    to its device. Held in a module-level table, it would keep every device alive; stored
    on the device (``Device._state``), it forms a cycle the garbage collector frees with
    the device, and ``Device.close`` drops it. A WeakKeyDictionary subclass only so that
    callers' annotations hold: none of its own storage is used.
    """

    def __init__(self) -> None:  # noqa: D107 - no WeakKeyDictionary storage on purpose
        self._devices: weakref.WeakSet[Device] = weakref.WeakSet()

    @staticmethod
    def _table(device: Any) -> dict[PerDeviceMap, Any]:
        if not isinstance(device, Device):
            raise TypeError(f"per-device state is keyed by a Device, got {type(device).__name__}")
        return device._state

    def __hash__(self) -> int:  # tables on devices are keyed by the map's identity
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __getitem__(self, device: Any) -> Any:
        value = self._table(device).get(self, _MISSING)
        if value is _MISSING:
            raise KeyError(device)
        return value

    def __setitem__(self, device: Any, value: Any) -> None:
        self._table(device)[self] = value
        self._devices.add(device)

    def __delitem__(self, device: Any) -> None:
        del self._table(device)[self]

    def __contains__(self, device: object) -> bool:
        return isinstance(device, Device) and self in device._state

    def __iter__(self) -> Iterator[Any]:
        return iter([d for d in list(self._devices) if self in d._state])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def get(self, device: Any, default: Any = None) -> Any:
        return self._table(device).get(self, default) if isinstance(device, Device) else default

    def setdefault(self, device: Any, default: Any = None) -> Any:
        value = self._table(device).setdefault(self, default)  # one step: thread-safe
        self._devices.add(device)
        return value

    def pop(self, device: Any, *default: Any) -> Any:
        if isinstance(device, Device) and self in device._state:
            return device._state.pop(self)
        if default:
            return default[0]
        raise KeyError(device)

    def keys(self) -> Iterator[Any]:  # type: ignore[override]
        return iter(self)

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        return (d._state[self] for d in self)

    def items(self) -> Iterator[tuple[Any, Any]]:  # type: ignore[override]
        return ((d, d._state[self]) for d in self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for device, value in dict(*args, **kwargs).items():
            self[device] = value

    def popitem(self) -> tuple[Any, Any]:
        for device in self:
            return device, device._state.pop(self)
        raise KeyError("popitem(): no device has state in this map")

    def clear(self) -> None:
        for device in self:
            device._state.pop(self, None)

    def copy(self) -> dict[Any, Any]:  # type: ignore[override]
        return dict(self.items())

    def keyrefs(self) -> list[weakref.ref[Any]]:
        return [weakref.ref(d) for d in self]

    def __repr__(self) -> str:
        return f"<vkcore.device.PerDeviceMap of {len(self)} devices>"


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then deliver it (main thread only).

    A teardown stopped halfway would leave half-destroyed objects that later calls or
    finalizers would destroy a second time.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield  # only the main thread receives KeyboardInterrupt; None: a handler set in C
        return
    caught: list[Any] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(signal.SIGINT, caught[0])  # Python's default handler raises KeyboardInterrupt
        elif caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


def per_device_map() -> weakref.WeakKeyDictionary[Any, Any]:
    """A ``{Device: state}`` map (:class:`PerDeviceMap`): the state is stored on the device,
    dropped when it closes and collected with it; it never keeps a device alive."""
    return PerDeviceMap()


class _BufferHandles(NamedTuple):
    """The Vulkan objects of one live buffer, as the device recorded them."""

    handle: Any
    memory: Any
    views: dict[str, Any]


def devices() -> list[DeviceInfo]:
    """Every Vulkan physical device the loader reports, in enumeration order."""
    instance = Instance(validation=False)
    try:
        return [query_info(instance, pd, i) for i, pd in enumerate(instance.physical_devices())]
    finally:
        instance.destroy()


class Device:
    """A Vulkan logical device with one compute queue.

    ``selector`` is an index or a name substring (default: ``$VKCORE_DEVICE``, else the
    best device: discrete, integrated, virtual, then CPU). ``validation`` enables the
    Khronos validation layer (default: ``$VKCORE_VALIDATION``); its errors are raised as
    :class:`vkcore.ValidationError` at the next vkcore call. ``pipeline_cache`` set to
    False disables the persisted pipeline cache for this device (``$VKCORE_PIPELINE_CACHE``).

    A Device is a context manager; ``close()`` releases everything it owns. Calls from
    several threads are serialized on the queue.
    """

    def __init__(
        self,
        selector: str | int | None = None,
        *,
        validation: bool | None = None,
        pipeline_cache: bool | None = None,
        cache_dir: str | None = None,
    ) -> None:
        selector = check_selector(selector)
        if len(_open_devices) >= _COLLECT_WHEN_OPEN:
            gc.collect()  # frees dropped devices, with their driver memory, before a new one
        self.ffi, self.lib = vkapi.api()
        self.lock = threading.RLock()
        self.handle: Any = None
        self._closed = False
        self._inherited = False  # set in a forked child: the objects are the parent's
        self._state: dict[PerDeviceMap, Any] = {}
        self._buffers: dict[int, weakref.ref[Buffer]] = {}
        self._buffer_handles: dict[int, _BufferHandles] = {}
        self._pipelines: dict[tuple[Any, ...], Pipeline] = {}
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
            self._create_device()
            self._create_pools()
            self._memory_properties()
            from .commands import Submitter
            from .pipeline_cache import PipelineCache

            self.submitter: Submitter = Submitter(self)
            persist = (
                config.env_flag("VKCORE_PIPELINE_CACHE", True)
                if pipeline_cache is None
                else pipeline_cache
            )
            self.pipeline_cache: PipelineCache = PipelineCache(
                self, persist=persist, directory=cache_dir
            )
        except BaseException:
            self._destroy_partial()
            raise
        _open_devices.add(self)

    # ------------------------------------------------------------------ creation
    def _create_device(self) -> None:
        ffi, lib, info = self.ffi, self.lib, self.info
        keep = vkapi.Keep()
        self.queue_family, self.timestamp_valid_bits = self._compute_queue_family()
        priority = keep.new("float[]", [1.0])
        queue_info = keep.struct(
            "VkDeviceQueueCreateInfo",
            queueFamilyIndex=self.queue_family,
            queueCount=1,
            pQueuePriorities=priority,
        )
        self.enabled_extensions = enabled_device_extensions(info.extensions, info.api_version)
        if MEMORY_BUDGET in info.extensions and MEMORY_BUDGET not in self.enabled_extensions:
            self.enabled_extensions.append(MEMORY_BUDGET)
        f8 = fi8 = fdot = None
        if info.storage_buffer_8bit_access:
            f8 = keep.struct("VkPhysicalDevice8BitStorageFeatures", storageBuffer8BitAccess=1)
        if info.shader_int8:
            fi8 = keep.struct("VkPhysicalDeviceShaderFloat16Int8Features", shaderInt8=1)
        if info.integer_dot_product:
            fdot = keep.struct(
                "VkPhysicalDeviceShaderIntegerDotProductFeatures", shaderIntegerDotProduct=1
            )
        create = keep.struct(
            "VkDeviceCreateInfo",
            pNext=keep.chain(f8, fi8, fdot),
            queueCreateInfoCount=1,
            pQueueCreateInfos=queue_info,
            enabledExtensionCount=len(self.enabled_extensions),
            ppEnabledExtensionNames=keep.strings(self.enabled_extensions),
        )
        out = ffi.new("VkDevice*")
        vkapi.check(lib.vkCreateDevice(self.physical, create, ffi.NULL, out), "vkCreateDevice")
        self.handle = out[0]
        queue = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, self.queue_family, 0, queue)
        self.queue = queue[0]

    def _compute_queue_family(self) -> tuple[int, int]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical, count, ffi.NULL)
        props = ffi.new("VkQueueFamilyProperties[]", count[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical, count, props)
        compute = vkapi.flag("VK_QUEUE_COMPUTE_BIT")
        graphics = vkapi.flag("VK_QUEUE_GRAPHICS_BIT")
        families = [i for i in range(count[0]) if props[i].queueFlags & compute]
        if not families:
            raise VulkanError(
                "vkGetPhysicalDeviceQueueFamilyProperties",
                0,
                f"{self.info.name} has no compute queue",
            )
        # Prefer a dedicated compute family (async compute on GPUs), else the first one.
        dedicated = [i for i in families if not props[i].queueFlags & graphics]
        index = (dedicated or families)[0]
        return index, props[index].timestampValidBits

    def _create_pools(self) -> None:
        ffi, lib = self.ffi, self.lib
        keep = vkapi.Keep()
        pool_info = keep.struct(
            "VkCommandPoolCreateInfo",
            flags=vkapi.flag("VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT"),
            queueFamilyIndex=self.queue_family,
        )
        out = ffi.new("VkCommandPool*")
        vkapi.check(
            lib.vkCreateCommandPool(self.handle, pool_info, ffi.NULL, out), "vkCreateCommandPool"
        )
        self.command_pool = out[0]
        sizes = keep.new(
            "VkDescriptorPoolSize[]",
            [
                {
                    "type": vkapi.flag("VK_DESCRIPTOR_TYPE_STORAGE_BUFFER"),
                    "descriptorCount": _MAX_SETS * 8,
                },
                {
                    "type": vkapi.flag("VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER"),
                    "descriptorCount": _MAX_SETS * 4,
                },
                {  # users' programs (vkcore.Program) may declare uniform blocks
                    "type": vkapi.flag("VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER"),
                    "descriptorCount": _MAX_SETS * 2,
                },
            ],
        )
        desc_info = keep.struct(
            "VkDescriptorPoolCreateInfo",
            flags=vkapi.flag("VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT"),
            maxSets=_MAX_SETS,
            poolSizeCount=3,
            pPoolSizes=sizes,
        )
        out2 = ffi.new("VkDescriptorPool*")
        vkapi.check(
            lib.vkCreateDescriptorPool(self.handle, desc_info, ffi.NULL, out2),
            "vkCreateDescriptorPool",
        )
        self.descriptor_pool = out2[0]

    def _memory_properties(self) -> None:
        """The memory types and heaps as the placement policy takes them, and the policy's
        one switch (``VKCORE_FORCE_STAGING``), read once per device."""
        self.memory_heaps = [MemoryHeap(size, f) for size, f in self.info.memory_heaps]
        self.memory_types = [
            MemoryType(i, f, heap) for i, (f, heap) in enumerate(self.info.memory_types)
        ]
        self.force_staging = config.env_flag("VKCORE_FORCE_STAGING")
        self._fallbacks_said: set[str] = set()

    def placement(self, purpose: str, type_bits: int = 0xFFFFFFFF) -> Placement:
        """The memory types a buffer of ``purpose`` may take, best first
        (:func:`vkcore.placement.place` on this device's types and heaps)."""
        return place(
            self.memory_types,
            self.memory_heaps,
            purpose,
            type_bits=type_bits,
            force_staging=self.force_staging,
        )

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
        if MEMORY_BUDGET not in self.enabled_extensions:
            return None
        keep = vkapi.Keep()
        budget = keep.struct("VkPhysicalDeviceMemoryBudgetPropertiesEXT")
        props = keep.struct("VkPhysicalDeviceMemoryProperties2", pNext=budget)
        self.lib.vkGetPhysicalDeviceMemoryProperties2(self.physical, props)
        count = props.memoryProperties.memoryHeapCount
        return [(int(budget.heapBudget[i]), int(budget.heapUsage[i])) for i in range(count)]

    # ------------------------------------------------------------------ services
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

    def pipeline(
        self,
        shader: str,
        *,
        defines: Mapping[str, int | str] | None = None,
        spec: Mapping[int, int | float] | None = None,
        buffers: int,
        push_size: int,
        texel: Mapping[int, str] | None = None,
    ) -> Pipeline:
        """The compute pipeline for a shader variant, created once through the pipeline cache.

        ``texel`` maps bindings read as uniform texel buffers to their format (a name of
        ``instance.TEXEL_FORMATS`` the device supports: see ``info.texel_formats``).
        """
        from .pipeline import Pipeline

        key = (
            shader,
            tuple(sorted((defines or {}).items())),
            tuple(sorted((spec or {}).items())),
            buffers,
            push_size,
            tuple(sorted((texel or {}).items())),
        )
        return self._pipeline_for(
            key,
            lambda: Pipeline(
                self,
                shader,
                dict(defines or {}),
                dict(spec or {}),
                buffers,
                push_size,
                dict(texel or {}),
            ),
        )

    def _pipeline_for(self, key: tuple[Any, ...], make: Callable[[], Pipeline]) -> Pipeline:
        """The pipeline kept under ``key``, made by ``make()`` on first use."""
        with self.lock:
            self.check()
            pipe = self._pipelines.get(key)
            if pipe is None:
                pipe = self._pipelines[key] = make()
            return pipe

    def program_pipeline(
        self,
        code: Spirv,
        name: str,
        *,
        bindings: tuple[tuple[int, int], ...],
        push_size: int,
        spec: Mapping[int, int | float],
        texel: Mapping[int, str],
    ) -> Pipeline:
        """The pipeline of a user's program (:class:`vkcore.Program`): created once per
        SPIR-V, specialization, layout and texel formats, through the pipeline cache."""
        from .pipeline import Pipeline

        key = (
            "program",
            code.key,
            tuple(sorted(spec.items())),
            bindings,
            push_size,
            tuple(sorted(texel.items())),
        )
        return self._pipeline_for(
            key,
            lambda: Pipeline(
                self,
                name,
                {},
                dict(spec),
                len(bindings),
                push_size,
                dict(texel),
                code=code,
                bindings=bindings,
            ),
        )

    def pipeline_stats(self) -> list[dict[str, Any]]:
        """Per pipeline: name, creation time and whether the pipeline cache was hit."""
        with self.lock:
            return [p.stats() for p in self._pipelines.values()]

    def save_pipeline_cache(self) -> bool:
        """Persist the pipeline cache now; True if a file was written."""
        with self.lock:
            self.check()
            return self.pipeline_cache.save()

    def live_objects(self) -> dict[str, int]:
        """Counts of the Vulkan objects this device holds right now, by kind.

        A leak shows as a count that grows across repeated calls. ``buffers`` includes the
        staging buffers (one for uploads, one for readbacks, made on first use) and the
        small placeholder buffer kernels bind to unused slots; ``buffer_views`` are the
        texel views buffers own; every pipeline also owns one shader module and two
        layouts.
        """
        with self.lock:
            alive = (ref() for ref in self._buffers.values())
            buffers = [b for b in alive if b is not None and b.alive]
            pipelines = [p for p in self._pipelines.values() if p.handle is not None]
            sub = getattr(self, "submitter", None)
            cache = getattr(self, "pipeline_cache", None)
            return {
                "buffers": len(buffers),
                "device_memory": sum(1 for b in buffers if b.memory is not None),
                "buffer_bytes": sum(b.nbytes for b in buffers),
                "buffer_views": sum(len(b._views or ()) for b in buffers),
                "pipelines": len(pipelines),
                "descriptor_sets": getattr(sub, "live_descriptor_sets", 0),
                "pipeline_caches": int(cache is not None and cache.handle is not None),
            }

    def register_buffer(self, buffer: Buffer) -> None:
        """Record a live buffer and its Vulkan objects (``buffer._views`` becomes the dict
        its texel views are added to), so close can free them whatever else is gone."""
        if buffer._views is None:
            buffer._views = {}
        key = id(buffer)
        self._buffers[key] = weakref.ref(buffer)
        self._buffer_handles[key] = _BufferHandles(buffer.handle, buffer.memory, buffer._views)

    def forget_buffer(self, buffer: Buffer) -> None:
        self._buffers.pop(id(buffer), None)
        self._buffer_handles.pop(id(buffer), None)
        self.submitter.forget_buffer(buffer)

    def wait_idle(self) -> None:
        with self.lock:
            if self.handle is not None:
                vkapi.check(self.lib.vkDeviceWaitIdle(self.handle), "vkDeviceWaitIdle")

    def __repr__(self) -> str:
        state = "closed" if self._closed else self.info.name
        return f"<vkcore.Device {state}>"

    # ------------------------------------------------------------------ lifetime
    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the queue, save the pipeline cache, destroy everything this device owns."""
        with self.lock, ctrl_c_deferred():
            if self._closed:
                return
            self._closed = True
            try:
                self.lib.vkDeviceWaitIdle(self.handle)
            finally:
                self._destroy_partial()
            self._state.clear()  # pools, placeholders, memoized pipelines go with the device
            global _default
            with _default_lock:
                if _default is self:
                    _default = None

    def _destroy_partial(self) -> None:
        """Destroy whatever exists, children first; safe after a failed __init__."""
        self._closed = True
        ffi, lib = self.ffi, self.lib
        if self.handle is not None:
            if hasattr(self, "submitter"):
                self.submitter.destroy()
            for pipe in self._pipelines.values():
                pipe.destroy()
            self._pipelines.clear()
            self._destroy_buffers()
            if hasattr(self, "pipeline_cache"):
                try:
                    self.pipeline_cache.close()
                except Exception as exc:  # noqa: BLE001 - never lose the device teardown
                    log.warning("pipeline cache could not be saved: %s", exc)
            if getattr(self, "descriptor_pool", None) is not None:
                lib.vkDestroyDescriptorPool(self.handle, self.descriptor_pool, ffi.NULL)
                self.descriptor_pool = None
            if getattr(self, "command_pool", None) is not None:
                lib.vkDestroyCommandPool(self.handle, self.command_pool, ffi.NULL)
                self.command_pool = None
            lib.vkDestroyDevice(self.handle, ffi.NULL)
            self.handle = None
        self.instance.destroy()

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
        for pipe in self._pipelines.values():
            pipe.module = pipe.set_layout = pipe.layout = pipe.handle = None
        self._pipelines.clear()
        self._state.clear()
        self.handle = None
        self.instance.handle = self.instance.messenger = None

    def __del__(self) -> None:
        # Fallback only: close() explicitly or use ``with``.
        if not getattr(self, "_closed", True):
            try:
                self.close()
            except Exception:  # noqa: BLE001 - never raise from a finalizer
                pass


_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The shared default device, created on first use and closed at interpreter exit."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Device()
        return _default


def check_selector(selector: object) -> str | int | None:
    """``selector`` as given if it can name a device (an index >= 0 or a name substring),
    else TypeError/ValueError naming the argument and what it accepts."""
    if selector is None or isinstance(selector, str):
        if isinstance(selector, str) and not selector.strip():
            raise ValueError("selector must be a device index or a name substring, got ''")
        return selector
    if isinstance(selector, bool) or not hasattr(selector, "__index__"):
        raise TypeError(
            "selector must be a device index (int) or a name substring (str), "
            f"got {type(selector).__name__} {selector!r}"
        )
    index = operator.index(selector)
    if index < 0:
        raise ValueError(f"selector: device index must be 0 or more, got {index}")
    return index


def resolve(device: Device | None) -> Device:
    """``device`` itself, or the default device."""
    if device is None:
        return default_device()
    if not isinstance(device, Device):
        raise TypeError(f"device must be a vkcore.Device or None, got {type(device).__name__}")
    device.check()
    return device


# Devices not closed yet: closed (and their pipeline caches saved) at interpreter exit,
# while the interpreter still works; a finalizer at shutdown could not open files.
_open_devices: weakref.WeakSet[Device] = weakref.WeakSet()


@atexit.register
def _close_open_devices() -> None:
    for dev in list(_open_devices):  # (none in a forked child: see _after_fork)
        try:
            dev.close()
        except Exception as exc:  # noqa: BLE001 - keep closing the others
            log.warning("closing %r at exit failed: %s", dev, exc)


def _after_fork_in_child() -> None:
    """Abandon the parent's devices: their Vulkan objects are not valid in this process."""
    global _default, _default_lock
    _default_lock = threading.Lock()  # a parent thread may have held it at the fork
    _default = None
    inherited = list(_open_devices)
    for dev in inherited:
        try:
            dev._abandon()
        except Exception:  # noqa: BLE001 - a half-built device: still never touch it
            dev._closed = dev._inherited = True
    _open_devices.clear()
    if inherited:
        _skip_parent_exit_handlers()


def _skip_parent_exit_handlers() -> None:
    """End this forked child with ``_exit(status)`` once Python has finalized, before the
    C exit handlers registered in the parent run.

    Drivers register such handlers to join their worker threads (Mesa's util_queue does,
    lavapipe included); in a child those threads exist only in the parent, and the join
    crashes (SIGSEGV) or hangs. Python's own shutdown (atexit functions, finalizers,
    flushing sys.stdout) has already happened by then, and glibc's ``on_exit`` handlers
    receive the exit status, so the status is kept. Elsewhere (no glibc) nothing changes.
    """
    try:
        import cffi

        ffi = cffi.FFI()
        ffi.cdef("int on_exit(void (*)(int, void *), void *); void _exit(int);")
        libc = ffi.dlopen(None)
        handler = ffi.cast("void (*)(int, void *)", ffi.addressof(libc, "_exit"))
        libc.on_exit(handler, ffi.NULL)  # _exit(status, arg): the extra argument is ignored
    except Exception:  # noqa: BLE001 - no cffi or no on_exit: keep the default exit
        log.debug("no on_exit(): a forked child keeps the C exit handlers it inherited")


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
