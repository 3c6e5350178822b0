"""Creating the logical device: one VkDevice with one compute queue, the features and
extensions vkcore uses enabled, and reading its memory budget where it reports one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.device.info import DeviceInfo
from vkcore.device.instance import enabled_device_extensions
from vkcore.errors import VulkanError

# Reported by `vkcore info` (heap budgets and usage) wherever the device offers it.
MEMORY_BUDGET = "VK_EXT_memory_budget"


class LogicalDevice(NamedTuple):
    """What vkCreateDevice made, and what was chosen for it."""

    handle: Any
    queue: Any
    queue_family: int
    timestamp_valid_bits: int
    enabled_extensions: list[str]


QUEUE_GRAPHICS, QUEUE_COMPUTE = vk.VK_QUEUE_GRAPHICS_BIT, vk.VK_QUEUE_COMPUTE_BIT


def choose_compute_family(families: Sequence[tuple[int, int]]) -> int | None:
    """The queue family to compute on, from each family's (VkQueueFlags,
    timestampValidBits): one with timestamps where there is one (device times, `vkcore
    tune`), among those a dedicated compute family (async compute on GPUs), else the first
    with compute; None when no family computes."""
    computing = [i for i, (flags, _) in enumerate(families) if flags & QUEUE_COMPUTE]
    if not computing:
        return None

    def rank(i: int) -> tuple[bool, bool]:
        flags, timestamp_bits = families[i]
        return timestamp_bits == 0, bool(flags & QUEUE_GRAPHICS)

    return min(computing, key=rank)  # stable: the first of equals


def compute_queue_family(ffi: Any, lib: Any, physical: Any, name: str) -> tuple[int, int]:
    """The queue family to compute on (:func:`choose_compute_family`) and its
    timestampValidBits."""
    count = ffi.new("uint32_t*")
    lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, count, ffi.NULL)
    props = ffi.new("VkQueueFamilyProperties[]", count[0])
    lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, count, props)
    families = [(props[i].queueFlags, props[i].timestampValidBits) for i in range(count[0])]
    index = choose_compute_family(families)
    if index is None:
        raise VulkanError(
            "vkGetPhysicalDeviceQueueFamilyProperties", 0, f"{name} has no compute queue"
        )
    return index, props[index].timestampValidBits


def device_extensions_for(info: DeviceInfo) -> list[str]:
    """The device extensions to enable: vkcore's own choice plus the memory budget."""
    enabled = enabled_device_extensions(info.extensions, info.api_version)
    if MEMORY_BUDGET in info.extensions and MEMORY_BUDGET not in enabled:
        enabled.append(MEMORY_BUDGET)
    return enabled


def create(ffi: Any, lib: Any, physical: Any, info: DeviceInfo) -> LogicalDevice:
    """vkCreateDevice with one compute queue and the 8-bit storage, int8, float16, int16,
    int64, float64 and integer dot product features wherever the device has them (the
    types a Program's shader may use, specialization constants included)."""
    keep = _vk.Keep()
    family, timestamp_bits = compute_queue_family(ffi, lib, physical, info.name)
    priority = keep.new("float[]", [1.0])
    queue_info = keep.struct(
        "VkDeviceQueueCreateInfo",
        queueFamilyIndex=family,
        queueCount=1,
        pQueuePriorities=priority,
    )
    extensions = device_extensions_for(info)
    f8 = fi8 = fdot = None
    if info.storage_buffer_8bit_access:
        f8 = keep.struct("VkPhysicalDevice8BitStorageFeatures", storageBuffer8BitAccess=1)
    if info.shader_int8 or info.shader_float16:
        fi8 = keep.struct(
            "VkPhysicalDeviceShaderFloat16Int8Features",
            shaderInt8=int(info.shader_int8),
            shaderFloat16=int(info.shader_float16),
        )
    if info.integer_dot_product:
        fdot = keep.struct(
            "VkPhysicalDeviceShaderIntegerDotProductFeatures", shaderIntegerDotProduct=1
        )
    features = keep.struct(
        "VkPhysicalDeviceFeatures",
        shaderFloat64=int(info.shader_float64),
        shaderInt64=int(info.shader_int64),
        shaderInt16=int(info.shader_int16),
    )
    create_info = keep.struct(
        "VkDeviceCreateInfo",
        pNext=keep.chain(f8, fi8, fdot),
        pEnabledFeatures=features,
        queueCreateInfoCount=1,
        pQueueCreateInfos=queue_info,
        enabledExtensionCount=len(extensions),
        ppEnabledExtensionNames=keep.strings(extensions),
    )
    out = ffi.new("VkDevice*")
    _vk.check(lib.vkCreateDevice(physical, create_info, ffi.NULL, out), "vkCreateDevice")
    queue = ffi.new("VkQueue*")
    lib.vkGetDeviceQueue(out[0], family, 0, queue)
    return LogicalDevice(out[0], queue[0], family, timestamp_bits, extensions)


def memory_budget(lib: Any, physical: Any, enabled: list[str]) -> list[tuple[int, int]] | None:
    """``(budget, usage)`` in bytes per heap (VK_EXT_memory_budget), or None where the
    extension is not enabled."""
    if MEMORY_BUDGET not in enabled:
        return None
    keep = _vk.Keep()
    budget = keep.struct("VkPhysicalDeviceMemoryBudgetPropertiesEXT")
    props = keep.struct("VkPhysicalDeviceMemoryProperties2", pNext=budget)
    lib.vkGetPhysicalDeviceMemoryProperties2(physical, props)
    count = props.memoryProperties.memoryHeapCount
    return [(int(budget.heapBudget[i]), int(budget.heapUsage[i])) for i in range(count)]
