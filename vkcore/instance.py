"""VkInstance creation, the validation-layer messenger, and physical-device discovery."""

from __future__ import annotations

import logging
import re
import struct
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from . import vkapi
from .errors import _RESULT_NAMES, ValidationError, VulkanError

log = logging.getLogger("vkcore")

NO_DRIVER_HINT = (
    "no Vulkan driver found: install one (Debian: mesa-vulkan-drivers for lavapipe) "
    "or check VK_ICD_FILENAMES / VK_DRIVER_FILES"
)
_VK_ERROR_INCOMPATIBLE_DRIVER = -9

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
DEBUG_UTILS = "VK_EXT_debug_utils"
# MoltenVK (and any other non-conformant "portability" driver) is only listed by a loader
# when the instance enables this extension with this flag.
PORTABILITY_ENUMERATION = "VK_KHR_portability_enumeration"
ENUMERATE_PORTABILITY_BIT = 0x1  # VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
# Required on a device that reports it (VUID-VkDeviceCreateInfo-pProperties-04451).
PORTABILITY_SUBSET = "VK_KHR_portability_subset"
_V12 = 1 << 22 | 2 << 12
_V13 = 1 << 22 | 3 << 12


def instance_extensions(available: Iterable[str], validation: bool) -> tuple[list[str], int]:
    """The instance extensions to enable and the VkInstanceCreateInfo flags, from what the
    loader offers: debug utils with validation, portability enumeration (with its flag)
    wherever the loader offers it."""
    names = [DEBUG_UTILS] if validation else []
    flags = 0
    if PORTABILITY_ENUMERATION in set(available):
        names.append(PORTABILITY_ENUMERATION)
        flags |= ENUMERATE_PORTABILITY_BIT
    return names, flags


def enabled_device_extensions(available: Iterable[str], api_version: int) -> list[str]:
    """The device extensions vkcore enables, from those the device reports: what its API
    version lacks in core (8-bit storage and int8 before 1.2; creation feedback and
    integer dot product before 1.3), host-memory import, and the portability subset
    wherever it is reported."""
    offered = set(available)
    wanted: list[str] = []
    if api_version < _V12:
        wanted += [
            "VK_KHR_8bit_storage",
            "VK_KHR_shader_float16_int8",
            "VK_KHR_storage_buffer_storage_class",
            "VK_KHR_shader_float_controls",  # the RoundingModeRTE capability (kernels.variants)
        ]
    if api_version < _V13:
        wanted += ["VK_EXT_pipeline_creation_feedback", "VK_KHR_shader_integer_dot_product"]
    wanted += ["VK_EXT_external_memory_host", PORTABILITY_SUBSET]
    return [e for e in wanted if e in offered]


_TYPE_NAMES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
# Default choice order: discrete GPU, integrated, virtual, CPU (lavapipe), other.
_TYPE_RANK = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}
_DRIVER_IDS = {
    1: "AMD proprietary",
    2: "AMD open source",
    3: "RADV",
    4: "NVIDIA proprietary",
    5: "Intel proprietary Windows",
    6: "Intel open-source Mesa",
    7: "Imagination proprietary",
    8: "Qualcomm proprietary",
    9: "ARM proprietary",
    10: "Google SwiftShader",
    11: "GGP proprietary",
    12: "Broadcom proprietary",
    13: "Mesa llvmpipe",
    14: "MoltenVK",
    15: "CoreAVI proprietary",
    16: "Juice proprietary",
    17: "Verisilicon proprietary",
    18: "Mesa Turnip",
    19: "Mesa V3DV",
    20: "Mesa PanVK",
    21: "Samsung proprietary",
    22: "Mesa Venus",
    23: "Mesa Dozen",
    24: "Mesa NVK",
    25: "Imagination open-source Mesa",
    26: "Mesa Honeykrisp",
}


def version_string(version: int) -> str:
    """A Vulkan packed version (major.minor.patch)."""
    return f"{version >> 22 & 0x7F}.{version >> 12 & 0x3FF}.{version & 0xFFF}"


@dataclass(frozen=True)
class DeviceInfo:
    """What vkcore knows about one physical device: identity, limits and features."""

    index: int
    name: str
    device_type: str
    vendor_id: int
    device_id: int
    driver_version: int
    api_version: int
    pipeline_cache_uuid: bytes
    device_uuid: bytes
    driver_id: int
    driver_name: str
    driver_info: str
    subgroup_size: int
    max_storage_buffer_range: int
    max_memory_allocation_size: int
    max_compute_work_group_count: tuple[int, int, int]
    max_compute_work_group_size: tuple[int, int, int]
    max_compute_work_group_invocations: int
    max_push_constants_size: int
    min_storage_buffer_offset_alignment: int
    timestamp_period: float
    timestamp_compute_and_graphics: bool
    shader_int8: bool
    storage_buffer_8bit_access: bool
    integer_dot_product: bool
    integer_dot_product_8bit_accelerated: bool
    external_memory_host: bool
    min_imported_host_pointer_alignment: int
    pipeline_creation_feedback: bool
    extensions: frozenset[str] = field(repr=False)
    max_texel_buffer_elements: int = 0
    # Formats (names of TEXEL_FORMATS) this device can read as uniform texel buffers.
    texel_formats: frozenset[str] = frozenset()
    # (size, VkMemoryHeapFlags) per heap and (VkMemoryPropertyFlags, heap index) per type.
    memory_heaps: tuple[tuple[int, int], ...] = ()
    memory_types: tuple[tuple[int, int], ...] = ()
    non_coherent_atom_size: int = 0
    max_compute_shared_memory_size: int = 0
    # VkSubgroupFeatureFlags and VkShaderStageFlags of VkPhysicalDeviceSubgroupProperties.
    subgroup_supported_operations: int = 0
    subgroup_supported_stages: int = 0
    # VK_EXT_subgroup_size_control (core in 1.3): the sizes a pipeline may require.
    subgroup_size_control: bool = False
    min_subgroup_size: int = 0
    max_subgroup_size: int = 0
    # VkPhysicalDeviceFloatControlsProperties (core in 1.2), float32 fields.
    rounding_mode_rte_float32: bool = False
    denorm_preserve_float32: bool = False
    denorm_flush_to_zero_float32: bool = False

    @property
    def portability_subset(self) -> bool:
        """A portability (non-conformant layered) implementation such as MoltenVK."""
        return "VK_KHR_portability_subset" in self.extensions

    @property
    def subgroup_arithmetic_in_compute(self) -> bool:
        """Subgroup arithmetic (subgroupAdd, subgroupMax...) usable in compute shaders."""
        return bool(
            self.subgroup_supported_operations & SUBGROUP_ARITHMETIC
            and self.subgroup_supported_stages & STAGE_COMPUTE
        )

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    @property
    def driver_version_string(self) -> str:
        """Human form of driverVersion; NVIDIA packs it 10.8.8.6 bits."""
        v = self.driver_version
        if self.vendor_id == 0x10DE:
            return f"{v >> 22 & 0x3FF}.{v >> 14 & 0xFF}.{v >> 6 & 0xFF}.{v & 0x3F}"
        return version_string(v)

    @property
    def driver_id_name(self) -> str:
        return _DRIVER_IDS.get(self.driver_id, f"driver {self.driver_id}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (UUIDs as hex, versions also as strings)."""
        d = asdict(self)
        d["pipeline_cache_uuid"] = self.pipeline_cache_uuid.hex()
        d["device_uuid"] = self.device_uuid.hex()
        d["extensions"] = sorted(self.extensions)
        d["texel_formats"] = sorted(self.texel_formats)
        d["vendor_id_hex"] = f"0x{self.vendor_id:04x}"
        d["device_id_hex"] = f"0x{self.device_id:04x}"
        d["api_version_string"] = version_string(self.api_version)
        d["driver_version_string"] = self.driver_version_string
        d["driver_id_name"] = self.driver_id_name
        d["pointer_size"] = struct.calcsize("P")
        return d


class Instance:
    """A VkInstance, with the validation layer and a messenger when asked for.

    The messenger's callback only records messages; :meth:`check` raises them as a
    :class:`ValidationError` from ordinary Python code (never from inside the callback).
    """

    def __init__(self, validation: bool = False) -> None:
        self.ffi, self.lib = vkapi.api()
        self.validation = validation
        self.messages: list[str] = []
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._callback: Any = None
        self.messenger: Any = None
        self.handle: Any = None
        self.enabled_extensions: list[str] = []  # as passed to vkCreateInstance
        self.create_flags = 0
        self._create()

    def _available_extensions(self) -> set[str]:
        """Instance extensions the loader and its implicit layers offer."""
        ffi, lib = self.ffi, self.lib
        call = "vkEnumerateInstanceExtensionProperties"
        count = ffi.new("uint32_t*")
        vkapi.check(lib.vkEnumerateInstanceExtensionProperties(ffi.NULL, count, ffi.NULL), call)
        props = ffi.new("VkExtensionProperties[]", count[0])
        vkapi.check(lib.vkEnumerateInstanceExtensionProperties(ffi.NULL, count, props), call)
        return {ffi.string(props[i].extensionName).decode() for i in range(count[0])}

    def _available_layers(self) -> set[str]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("uint32_t*")
        vkapi.check(
            lib.vkEnumerateInstanceLayerProperties(count, ffi.NULL),
            "vkEnumerateInstanceLayerProperties",
        )
        props = ffi.new("VkLayerProperties[]", count[0])
        vkapi.check(
            lib.vkEnumerateInstanceLayerProperties(count, props),
            "vkEnumerateInstanceLayerProperties",
        )
        return {ffi.string(props[i].layerName).decode() for i in range(count[0])}

    def _create(self) -> None:
        ffi, lib = self.ffi, self.lib
        keep = vkapi.Keep()
        layers: list[str] = []
        extensions, flags = instance_extensions(self._available_extensions(), self.validation)
        messenger_info = None
        if self.validation:
            if VALIDATION_LAYER not in self._available_layers():
                raise VulkanError(
                    "vkCreateInstance",
                    0,
                    f"{VALIDATION_LAYER} is not installed (Debian: vulkan-validationlayers)",
                )
            layers.append(VALIDATION_LAYER)
            self._callback = ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", self._on_message)
            messenger_info = keep.struct(
                "VkDebugUtilsMessengerCreateInfoEXT",
                messageSeverity=vkapi.flag("VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT")
                | vkapi.flag("VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT"),
                messageType=vkapi.flag("VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT")
                | vkapi.flag("VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT")
                | vkapi.flag("VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT"),
                pfnUserCallback=self._callback,
            )
        app = keep.struct(
            "VkApplicationInfo",
            pApplicationName=keep.string("vkcore"),
            applicationVersion=1,
            pEngineName=keep.string("vkcore"),
            engineVersion=1,
            apiVersion=self._api_version(),
        )
        info = keep.struct(
            "VkInstanceCreateInfo",
            pNext=messenger_info if messenger_info is not None else ffi.NULL,
            flags=flags,
            pApplicationInfo=app,
            enabledLayerCount=len(layers),
            ppEnabledLayerNames=keep.strings(layers),
            enabledExtensionCount=len(extensions),
            ppEnabledExtensionNames=keep.strings(extensions),
        )
        handle = ffi.new("VkInstance*")
        result = lib.vkCreateInstance(info, ffi.NULL, handle)
        if result == _VK_ERROR_INCOMPATIBLE_DRIVER:  # what the loader says when it finds no driver
            raise VulkanError("vkCreateInstance", result, NO_DRIVER_HINT)
        vkapi.check(result, "vkCreateInstance")
        self.handle = handle[0]
        self.enabled_extensions, self.create_flags = extensions, flags
        if messenger_info is not None:
            create = self.proc(
                "vkCreateDebugUtilsMessengerEXT", "PFN_vkCreateDebugUtilsMessengerEXT"
            )
            out = ffi.new("VkDebugUtilsMessengerEXT*")
            vkapi.check(
                create(self.handle, messenger_info, ffi.NULL, out), "vkCreateDebugUtilsMessengerEXT"
            )
            self.messenger = out[0]

    def _api_version(self) -> int:
        """The newest API version up to 1.3 that the loader offers (at least 1.1)."""
        ffi, lib = self.ffi, self.lib
        out = ffi.new("uint32_t*")
        try:
            vkapi.check(lib.vkEnumerateInstanceVersion(out), "vkEnumerateInstanceVersion")
            loader = out[0]
        except AttributeError:
            loader = 1 << 22
        wanted = (1 << 22) | (3 << 12)
        if loader < (1 << 22) | (1 << 12):
            raise VulkanError("vkEnumerateInstanceVersion", 0, "vkcore needs a Vulkan 1.1 loader")
        return min(loader, wanted)

    def proc(self, name: str, pfn_type: str) -> Any:
        """An instance-level extension function, cast to its PFN type."""
        ffi, lib = self.ffi, self.lib
        ptr = lib.vkGetInstanceProcAddr(self.handle, name.encode())
        if ptr == ffi.NULL:
            raise VulkanError("vkGetInstanceProcAddr", 0, f"{name} is not available")
        return ffi.cast(pfn_type, ptr)

    def _on_message(self, severity: int, types: int, data: Any, user: Any) -> int:
        try:
            text = self.ffi.string(data.pMessage).decode(errors="replace") if data.pMessage else ""
            error = severity >= vkapi.flag("VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT")
            if error and _is_result_echo(types, text):
                # The driver restating a failed VkResult that the caller already raised
                # as a VulkanError: recorded, but not raised again at the next call.
                error = False
            with self._lock:
                self.messages.append(text)
                if error:
                    self._errors.append(text)
            # Loader and driver chatter (general type) is only logged at debug level: a
            # failure it describes reaches the caller as an exception, in one line.
            validation = bool(types & vkapi.flag("VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT"))
            level = logging.WARNING if validation else logging.DEBUG
            log.log(level, "validation %s: %s", "error" if error else "warning", text)
        except Exception:  # noqa: BLE001 - nothing may escape into C
            pass
        return 0

    def check(self) -> None:
        """Raise the validation errors recorded since the last check, if any."""
        if not self._errors:
            return
        with self._lock:
            errors, self._errors = self._errors, []
        raise ValidationError(errors)

    def physical_devices(self) -> list[Any]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("uint32_t*")
        vkapi.check(
            lib.vkEnumeratePhysicalDevices(self.handle, count, ffi.NULL),
            "vkEnumeratePhysicalDevices",
        )
        handles = ffi.new("VkPhysicalDevice[]", count[0])
        vkapi.check(
            lib.vkEnumeratePhysicalDevices(self.handle, count, handles),
            "vkEnumeratePhysicalDevices",
        )
        return [handles[i] for i in range(count[0])]

    def destroy(self) -> None:
        if self.handle is None:
            return
        if self.messenger is not None:
            destroy = self.proc(
                "vkDestroyDebugUtilsMessengerEXT", "PFN_vkDestroyDebugUtilsMessengerEXT"
            )
            destroy(self.handle, self.messenger, self.ffi.NULL)
            self.messenger = None
        self.lib.vkDestroyInstance(self.handle, self.ffi.NULL)
        self.handle = None


def _is_result_echo(types: int, text: str) -> bool:
    """True for a driver's general (non-validation) message naming a VK_ERROR_ result.

    Mesa reports every error it returns (e.g. VK_ERROR_OUT_OF_DEVICE_MEMORY from
    vkAllocateMemory) through the messenger; the returned code already raises.
    """
    if types & vkapi.flag("VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT"):
        return False
    return any(name in text for code, name in _RESULT_NAMES.items() if code < 0)


def device_extensions(ffi: Any, lib: Any, physical: Any) -> frozenset[str]:
    count = ffi.new("uint32_t*")
    call = "vkEnumerateDeviceExtensionProperties"
    vkapi.check(lib.vkEnumerateDeviceExtensionProperties(physical, ffi.NULL, count, ffi.NULL), call)
    props = ffi.new("VkExtensionProperties[]", count[0])
    vkapi.check(lib.vkEnumerateDeviceExtensionProperties(physical, ffi.NULL, count, props), call)
    return frozenset(ffi.string(props[i].extensionName).decode() for i in range(count[0]))


# VK_SUBGROUP_FEATURE_BASIC_BIT / ARITHMETIC_BIT and VK_SHADER_STAGE_COMPUTE_BIT.
SUBGROUP_BASIC = 0x1
SUBGROUP_ARITHMETIC = 0x4
STAGE_COMPUTE = 0x20


def query_info(instance: Instance, physical: Any, index: int) -> DeviceInfo:
    """Properties and features of one physical device, through pNext chains."""
    ffi, lib = instance.ffi, instance.lib
    keep = vkapi.Keep()
    exts = device_extensions(ffi, lib, physical)
    base = ffi.new("VkPhysicalDeviceProperties*")
    lib.vkGetPhysicalDeviceProperties(physical, base)
    api = base.apiVersion
    v12, v13 = api >= (1 << 22 | 2 << 12), api >= (1 << 22 | 3 << 12)

    has_driver = v12 or "VK_KHR_driver_properties" in exts
    has_dot = v13 or "VK_KHR_shader_integer_dot_product" in exts
    has_host = "VK_EXT_external_memory_host" in exts
    driver = keep.struct("VkPhysicalDeviceDriverProperties") if has_driver else None
    subgroup = keep.struct("VkPhysicalDeviceSubgroupProperties")
    ids = keep.struct("VkPhysicalDeviceIDProperties")
    maint3 = keep.struct("VkPhysicalDeviceMaintenance3Properties")
    dotp = keep.struct("VkPhysicalDeviceShaderIntegerDotProductProperties") if has_dot else None
    host = keep.struct("VkPhysicalDeviceExternalMemoryHostPropertiesEXT") if has_host else None
    has_size_control = v13 or "VK_EXT_subgroup_size_control" in exts
    has_float_controls = v12 or "VK_KHR_shader_float_controls" in exts
    size_control = (
        keep.struct("VkPhysicalDeviceSubgroupSizeControlProperties") if has_size_control else None
    )
    floats = keep.struct("VkPhysicalDeviceFloatControlsProperties") if has_float_controls else None
    props2 = keep.struct("VkPhysicalDeviceProperties2")
    props2.pNext = keep.chain(driver, subgroup, ids, maint3, dotp, host, size_control, floats)
    lib.vkGetPhysicalDeviceProperties2(physical, props2)
    memory = ffi.new("VkPhysicalDeviceMemoryProperties*")
    lib.vkGetPhysicalDeviceMemoryProperties(physical, memory)

    has_8bit = v12 or "VK_KHR_8bit_storage" in exts
    has_int8 = v12 or "VK_KHR_shader_float16_int8" in exts
    f8 = keep.struct("VkPhysicalDevice8BitStorageFeatures") if has_8bit else None
    fi8 = keep.struct("VkPhysicalDeviceShaderFloat16Int8Features") if has_int8 else None
    fdot = keep.struct("VkPhysicalDeviceShaderIntegerDotProductFeatures") if has_dot else None
    fsize = keep.struct("VkPhysicalDeviceSubgroupSizeControlFeatures") if has_size_control else None
    feats2 = keep.struct("VkPhysicalDeviceFeatures2")
    feats2.pNext = keep.chain(f8, fi8, fdot, fsize)
    lib.vkGetPhysicalDeviceFeatures2(physical, feats2)

    p = props2.properties
    limits = p.limits
    return DeviceInfo(
        index=index,
        name=ffi.string(p.deviceName).decode(errors="replace"),
        device_type=_TYPE_NAMES.get(p.deviceType, "other"),
        vendor_id=p.vendorID,
        device_id=p.deviceID,
        driver_version=p.driverVersion,
        api_version=api,
        pipeline_cache_uuid=bytes(ffi.buffer(p.pipelineCacheUUID)),
        device_uuid=bytes(ffi.buffer(ids.deviceUUID)),
        driver_id=driver.driverID if driver is not None else 0,
        driver_name=ffi.string(driver.driverName).decode(errors="replace")
        if driver is not None
        else "",
        driver_info=ffi.string(driver.driverInfo).decode(errors="replace")
        if driver is not None
        else "",
        subgroup_size=subgroup.subgroupSize,
        max_storage_buffer_range=limits.maxStorageBufferRange,
        max_memory_allocation_size=maint3.maxMemoryAllocationSize,
        max_compute_work_group_count=tuple(limits.maxComputeWorkGroupCount),
        max_compute_work_group_size=tuple(limits.maxComputeWorkGroupSize),
        max_compute_work_group_invocations=limits.maxComputeWorkGroupInvocations,
        max_push_constants_size=limits.maxPushConstantsSize,
        min_storage_buffer_offset_alignment=limits.minStorageBufferOffsetAlignment,
        timestamp_period=float(limits.timestampPeriod),
        timestamp_compute_and_graphics=bool(limits.timestampComputeAndGraphics),
        shader_int8=bool(fi8.shaderInt8) if fi8 is not None else False,
        storage_buffer_8bit_access=bool(f8.storageBuffer8BitAccess) if f8 is not None else False,
        integer_dot_product=bool(fdot.shaderIntegerDotProduct) if fdot is not None else False,
        integer_dot_product_8bit_accelerated=bool(
            dotp is not None
            and (
                dotp.integerDotProduct4x8BitPackedSignedAccelerated
                or dotp.integerDotProduct8BitSignedAccelerated
            )
        ),
        external_memory_host=has_host,
        min_imported_host_pointer_alignment=host.minImportedHostPointerAlignment
        if host is not None
        else 0,
        pipeline_creation_feedback=v13 or "VK_EXT_pipeline_creation_feedback" in exts,
        extensions=exts,
        max_texel_buffer_elements=limits.maxTexelBufferElements,
        texel_formats=_uniform_texel_formats(ffi, lib, physical),
        memory_heaps=tuple(
            (memory.memoryHeaps[i].size, memory.memoryHeaps[i].flags)
            for i in range(memory.memoryHeapCount)
        ),
        memory_types=tuple(
            (memory.memoryTypes[i].propertyFlags, memory.memoryTypes[i].heapIndex)
            for i in range(memory.memoryTypeCount)
        ),
        non_coherent_atom_size=limits.nonCoherentAtomSize,
        max_compute_shared_memory_size=limits.maxComputeSharedMemorySize,
        subgroup_supported_operations=subgroup.supportedOperations,
        subgroup_supported_stages=subgroup.supportedStages,
        subgroup_size_control=bool(fsize is not None and fsize.subgroupSizeControl),
        min_subgroup_size=size_control.minSubgroupSize if size_control is not None else 0,
        max_subgroup_size=size_control.maxSubgroupSize if size_control is not None else 0,
        rounding_mode_rte_float32=bool(floats is not None and floats.shaderRoundingModeRTEFloat32),
        denorm_preserve_float32=bool(floats is not None and floats.shaderDenormPreserveFloat32),
        denorm_flush_to_zero_float32=bool(
            floats is not None and floats.shaderDenormFlushToZeroFloat32
        ),
    )


# Texel-buffer formats kernels may read through (GLSL format name -> VkFormat). Reading
# through a uniform texel buffer takes the driver's texture path; on lavapipe that path
# is vectorized, while storage-buffer loads run one SIMD lane at a time.
TEXEL_FORMATS = {"r32f": 100, "rgba32f": 109, "r32ui": 98, "rgba32ui": 107}
_UNIFORM_TEXEL_BUFFER_FEATURE = 0x8


def _uniform_texel_formats(ffi: Any, lib: Any, physical: Any) -> frozenset[str]:
    props = ffi.new("VkFormatProperties*")
    found = set()
    for name, fmt in TEXEL_FORMATS.items():
        lib.vkGetPhysicalDeviceFormatProperties(physical, fmt, props)
        if props.bufferFeatures & _UNIFORM_TEXEL_BUFFER_FEATURE:
            found.add(name)
    return frozenset(found)


def rank(info: DeviceInfo) -> tuple[int, int]:
    """Sort key for the default choice: device type, then enumeration order."""
    return (_TYPE_RANK.get({v: k for k, v in _TYPE_NAMES.items()}[info.device_type], 9), info.index)


def choose(infos: list[DeviceInfo], selector: str | int | None) -> DeviceInfo:
    """Pick a device by index, by name substring (case-insensitive), or by default rank."""
    if not infos:
        raise VulkanError("vkEnumeratePhysicalDevices", 0, NO_DRIVER_HINT)
    if selector is None:
        return min(infos, key=rank)
    listing = "; ".join(f"{i.index}: {i.name}" for i in infos)
    text = str(selector).strip()
    index = re.fullmatch(r"-?[0-9]+", text)  # ASCII digits only: an index, else a name
    if index and text.startswith("-"):
        raise ValueError(
            f"VKCORE_DEVICE/device index {text} is negative; an index is 0 or more; "
            f"devices are: {listing}"
        )
    if index:
        idx = int(text)
        if idx < len(infos):
            return infos[idx]
        raise ValueError(
            f"VKCORE_DEVICE/device index {idx} is out of range; devices are: {listing}"
        )
    matches = [i for i in infos if text.lower() in i.name.lower()]
    if not matches:
        raise ValueError(
            f"VKCORE_DEVICE/device {text!r} matches no device name; devices are: {listing}"
        )
    return matches[0]
