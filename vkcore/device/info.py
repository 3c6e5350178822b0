"""What vkcore knows about a physical device (:class:`DeviceInfo`), how it is queried, and
how a device is chosen by index, name or rank."""

from __future__ import annotations

import re
import struct
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.device.instance import NO_DRIVER_HINT
from vkcore.errors import VulkanError, shown

if TYPE_CHECKING:
    from vkcore.device.instance import Instance


SUBGROUP_BASIC = vk.VK_SUBGROUP_FEATURE_BASIC_BIT
SUBGROUP_ARITHMETIC = vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
SUBGROUP_SHUFFLE = vk.VK_SUBGROUP_FEATURE_SHUFFLE_BIT
STAGE_COMPUTE = vk.VK_SHADER_STAGE_COMPUTE_BIT

# Texel-buffer formats kernels may read through (GLSL format name -> VkFormat). Reading
# through a uniform texel buffer takes the driver's texture path; on lavapipe that path
# is vectorized, while storage-buffer loads run one SIMD lane at a time.
TEXEL_FORMATS = {
    "r32f": vk.VK_FORMAT_R32_SFLOAT,
    "rgba32f": vk.VK_FORMAT_R32G32B32A32_SFLOAT,
    "r32ui": vk.VK_FORMAT_R32_UINT,
    "rgba32ui": vk.VK_FORMAT_R32G32B32A32_UINT,
}
_UNIFORM_TEXEL_BUFFER_FEATURE = vk.VK_FORMAT_FEATURE_UNIFORM_TEXEL_BUFFER_BIT

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
    # What a pipeline layout and a compute stage may hold (VkPhysicalDeviceLimits; the
    # per-set total from VkPhysicalDeviceMaintenance3Properties): 0 where unknown.
    max_uniform_buffer_range: int = 0
    max_bound_descriptor_sets: int = 0
    max_per_stage_descriptor_storage_buffers: int = 0
    max_per_stage_descriptor_uniform_buffers: int = 0
    max_per_stage_descriptor_sampled_images: int = 0  # uniform texel buffers count here
    max_per_stage_descriptor_storage_images: int = 0  # storage texel buffers count here
    max_per_stage_resources: int = 0
    max_descriptor_set_storage_buffers: int = 0
    max_descriptor_set_uniform_buffers: int = 0
    max_descriptor_set_sampled_images: int = 0
    max_descriptor_set_storage_images: int = 0
    max_per_set_descriptors: int = 0
    # Shader arithmetic types (VkPhysicalDeviceFeatures, Float16Int8 features).
    shader_float64: bool = False
    shader_int64: bool = False
    shader_int16: bool = False
    shader_float16: bool = False

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
    def subgroup_shuffle_in_compute(self) -> bool:
        """Subgroup shuffles (subgroupShuffle) usable in compute shaders."""
        return bool(
            self.subgroup_supported_operations & SUBGROUP_SHUFFLE
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


def device_extensions(ffi: Any, lib: Any, physical: Any) -> frozenset[str]:
    count = ffi.new("uint32_t*")
    call = "vkEnumerateDeviceExtensionProperties"
    _vk.check(lib.vkEnumerateDeviceExtensionProperties(physical, ffi.NULL, count, ffi.NULL), call)
    props = ffi.new("VkExtensionProperties[]", count[0])
    _vk.check(lib.vkEnumerateDeviceExtensionProperties(physical, ffi.NULL, count, props), call)
    return frozenset(ffi.string(props[i].extensionName).decode() for i in range(count[0]))


def query_info(instance: Instance, physical: Any, index: int) -> DeviceInfo:
    """Properties and features of one physical device, through pNext chains."""
    ffi, lib = instance.ffi, instance.lib
    keep = _vk.Keep()
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
        max_uniform_buffer_range=limits.maxUniformBufferRange,
        max_bound_descriptor_sets=limits.maxBoundDescriptorSets,
        max_per_stage_descriptor_storage_buffers=limits.maxPerStageDescriptorStorageBuffers,
        max_per_stage_descriptor_uniform_buffers=limits.maxPerStageDescriptorUniformBuffers,
        max_per_stage_descriptor_sampled_images=limits.maxPerStageDescriptorSampledImages,
        max_per_stage_descriptor_storage_images=limits.maxPerStageDescriptorStorageImages,
        max_per_stage_resources=limits.maxPerStageResources,
        max_descriptor_set_storage_buffers=limits.maxDescriptorSetStorageBuffers,
        max_descriptor_set_uniform_buffers=limits.maxDescriptorSetUniformBuffers,
        max_descriptor_set_sampled_images=limits.maxDescriptorSetSampledImages,
        max_descriptor_set_storage_images=limits.maxDescriptorSetStorageImages,
        max_per_set_descriptors=maint3.maxPerSetDescriptors,
        shader_float64=bool(feats2.features.shaderFloat64),
        shader_int64=bool(feats2.features.shaderInt64),
        shader_int16=bool(feats2.features.shaderInt16),
        shader_float16=bool(fi8.shaderFloat16) if fi8 is not None else False,
    )


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
            f"VKCORE_DEVICE/device {shown(text)} matches no device name; devices are: {listing}"
        )
    return matches[0]
