"""The logical device: queue, pools, memory types, pipelines; owner of every Vulkan object.

Ownership and destruction order (``Device.close``): wait for the queue to be idle, then
command resources, pipelines, descriptor pool, live buffers, the pipeline cache (saved
first), the command pool, the VkDevice and finally the instance with its messenger.
Garbage collection only calls ``close`` as a fallback.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import signal
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from . import config, vkapi
from .errors import VulkanError
from .instance import DeviceInfo, Instance, choose, query_info

if TYPE_CHECKING:
    from .commands import Submitter
    from .memory import Buffer
    from .pipeline import Pipeline
    from .pipeline_cache import PipelineCache

log = logging.getLogger("vkcore")

# Descriptor pool size: sets are freed after each submission, so this bounds one call.
_MAX_SETS = 1024


# Per-device state other modules keep (buffer pools, placeholder buffers, memoized plans
# and pipelines). Their values refer back to the device, so a plain WeakKeyDictionary
# would keep every device alive forever; Device.close drops the entries instead.
_per_device_maps: list[weakref.WeakKeyDictionary[Any, Any]] = []


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
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
    """A ``{Device: state}`` map whose entry for a device is dropped when it closes."""
    mapping: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
    _per_device_maps.append(mapping)
    return mapping


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
        self.ffi, self.lib = vkapi.api()
        self.lock = threading.RLock()
        self.handle: Any = None
        self._closed = False
        self._buffers: dict[int, weakref.ref[Buffer]] = {}
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
            self.memory_types = self._memory_types()
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
        v12 = info.api_version >= (1 << 22 | 2 << 12)
        v13 = info.api_version >= (1 << 22 | 3 << 12)
        wanted: list[str] = []
        if not v12:
            wanted += [
                "VK_KHR_8bit_storage",
                "VK_KHR_shader_float16_int8",
                "VK_KHR_storage_buffer_storage_class",
            ]
        if not v13:
            wanted += ["VK_EXT_pipeline_creation_feedback", "VK_KHR_shader_integer_dot_product"]
        wanted += ["VK_EXT_external_memory_host"]
        if "VK_KHR_portability_subset" in info.extensions:
            wanted.append("VK_KHR_portability_subset")  # required where present (MoltenVK)
        self.enabled_extensions = [e for e in wanted if e in info.extensions]
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
            ],
        )
        desc_info = keep.struct(
            "VkDescriptorPoolCreateInfo",
            flags=vkapi.flag("VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT"),
            maxSets=_MAX_SETS,
            poolSizeCount=2,
            pPoolSizes=sizes,
        )
        out2 = ffi.new("VkDescriptorPool*")
        vkapi.check(
            lib.vkCreateDescriptorPool(self.handle, desc_info, ffi.NULL, out2),
            "vkCreateDescriptorPool",
        )
        self.descriptor_pool = out2[0]

    def _memory_types(self) -> list[tuple[int, int, int]]:
        """``(index, property flags, heap size)`` of every memory type."""
        props = self.ffi.new("VkPhysicalDeviceMemoryProperties*")
        self.lib.vkGetPhysicalDeviceMemoryProperties(self.physical, props)
        return [
            (
                i,
                props.memoryTypes[i].propertyFlags,
                props.memoryHeaps[props.memoryTypes[i].heapIndex].size,
            )
            for i in range(props.memoryTypeCount)
        ]

    # ------------------------------------------------------------------ services
    def check(self) -> None:
        """Raise if the device is closed or the validation layer reported an error."""
        if self._closed:
            raise RuntimeError("this vkcore.Device is closed")
        self.instance.check()

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
        with self.lock:
            self.check()
            pipe = self._pipelines.get(key)
            if pipe is None:
                pipe = Pipeline(
                    self,
                    shader,
                    dict(defines or {}),
                    dict(spec or {}),
                    buffers,
                    push_size,
                    dict(texel or {}),
                )
                self._pipelines[key] = pipe
            return pipe

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
        staging buffer and the small placeholder buffer kernels bind to unused slots;
        ``buffer_views`` are the texel views buffers own; every pipeline also owns one
        shader module and two layouts.
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
        self._buffers[id(buffer)] = weakref.ref(buffer)

    def forget_buffer(self, buffer: Buffer) -> None:
        self._buffers.pop(id(buffer), None)
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
        with self.lock, _ctrl_c_deferred():
            if self._closed:
                return
            self._closed = True
            try:
                self.lib.vkDeviceWaitIdle(self.handle)
            finally:
                self._destroy_partial()
            for mapping in _per_device_maps:
                mapping.pop(self, None)
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
            for ref in list(self._buffers.values()):
                buf = ref()
                if buf is not None:
                    buf.destroy()
            self._buffers.clear()
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
    for dev in list(_open_devices):
        try:
            dev.close()
        except Exception as exc:  # noqa: BLE001 - keep closing the others
            log.warning("closing %r at exit failed: %s", dev, exc)
