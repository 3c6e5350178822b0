"""Recorded properties of real Vulkan devices (one JSON file each, naming its source report).

``load(name)`` returns the parsed file; ``memory(record)`` its memory types and heaps as
:mod:`vkcore.device.placement` plain data; ``device_info(record)`` a :class:`vkcore.DeviceInfo`
(fields the report lacks are 0, False or empty: unknown, never guessed); ``NAMES`` lists
every recorded device.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from vkcore.device import placement
from vkcore.device.device import Device
from vkcore.device.info import (
    STAGE_COMPUTE,
    SUBGROUP_ARITHMETIC,
    SUBGROUP_BASIC,
    TEXEL_FORMATS,
    DeviceInfo,
)

from . import gpuinfo

HERE = Path(__file__).resolve().parent
NAMES = sorted(p.stem for p in HERE.glob("*.json"))

_TYPES = {"DISCRETE_GPU": "discrete", "INTEGRATED_GPU": "integrated", "CPU": "cpu"}
_DRIVERS = {f"DRIVER_ID_{name}": value for value, name in gpuinfo.DRIVER_IDS.items()}
# vkcore's name of each texel format -> the Vulkan name the records use.
TEXEL_FORMAT_NAMES = {name: gpuinfo.TEXEL_FORMATS[code] for name, code in TEXEL_FORMATS.items()}
# Memory types no buffer is placed in (names as the records spell them).
NOT_FOR_BUFFERS = {"LAZILY_ALLOCATED", "PROTECTED", "DEVICE_COHERENT_AMD", "DEVICE_UNCACHED_AMD"}
_SUBGROUP_OPS = {"BASIC": SUBGROUP_BASIC, "VOTE": 0x2, "ARITHMETIC": SUBGROUP_ARITHMETIC}
_SUBGROUP_OPS |= {"BALLOT": 0x8, "SHUFFLE": 0x10, "SHUFFLE_RELATIVE": 0x20, "CLUSTERED": 0x40}
_SUBGROUP_OPS |= {"QUAD": 0x80}


# DeviceInfo field -> the Vulkan limit of descriptor counts a record may hold (the
# reports converted by gpuinfo.py carry them; the vulkaninfo texts taken so far do not).
DESCRIPTOR_LIMIT_NAMES = {
    "max_per_stage_descriptor_storage_buffers": "maxPerStageDescriptorStorageBuffers",
    "max_per_stage_descriptor_uniform_buffers": "maxPerStageDescriptorUniformBuffers",
    "max_per_stage_descriptor_sampled_images": "maxPerStageDescriptorSampledImages",
    "max_per_stage_descriptor_storage_images": "maxPerStageDescriptorStorageImages",
    "max_per_stage_resources": "maxPerStageResources",
    "max_descriptor_set_storage_buffers": "maxDescriptorSetStorageBuffers",
    "max_descriptor_set_uniform_buffers": "maxDescriptorSetUniformBuffers",
    "max_descriptor_set_sampled_images": "maxDescriptorSetSampledImages",
    "max_descriptor_set_storage_images": "maxDescriptorSetStorageImages",
}


def load(name: str) -> dict[str, Any]:
    return json.loads((HERE / f"{name}.json").read_text())


def memory(
    record: dict[str, Any],
) -> tuple[list[placement.MemoryType], list[placement.MemoryHeap]]:
    heaps = [
        placement.MemoryHeap(
            h["size"], placement.HEAP_DEVICE_LOCAL if "DEVICE_LOCAL" in h["flags"] else 0
        )
        for h in record["memory_heaps"]
    ]
    types = [
        placement.MemoryType(i, placement.flags_of(t["flags"]), t["heap_index"])
        for i, t in enumerate(record["memory_types"])
    ]
    return types, heaps


def _api(text: str) -> int:
    major, minor, patch = (int(v) for v in text.split("."))
    return major << 22 | minor << 12 | patch


def _bits(names: list[str], table: dict[str, int]) -> int:
    out = 0
    for n in names:
        out |= table.get(n, 0)
    return out


def largest_heap_with(record: dict[str, Any], *flags: str) -> int:
    """The largest heap (of more than 0 bytes) holding a memory type with all ``flags``
    that buffers can be placed in; 0 when there is none."""
    heaps = record["memory_heaps"]
    return max(
        (
            heaps[t["heap_index"]]["size"]
            for t in record["memory_types"]
            if set(flags) <= set(t["flags"]) and not NOT_FOR_BUFFERS & set(t["flags"])
        ),
        default=0,
    )


def _uuid(record: dict[str, Any], key: str) -> bytes:
    return uuid.UUID(record[key]).bytes if key in record else bytes(16)  # unknown: zeros


def _texel_formats(record: dict[str, Any]) -> frozenset[str]:
    """vkcore's names of the formats the record reads as uniform texel buffers (empty when
    unknown: vulkaninfo's text report has no format table)."""
    offered = set(record.get("uniform_texel_buffer_formats", ()))
    return frozenset(name for name, vk_name in TEXEL_FORMAT_NAMES.items() if vk_name in offered)


def device_info(record: dict[str, Any]) -> DeviceInfo:
    lim, sub = record["limits"], record.get("subgroup", {})
    feats = record.get("features", {})
    size_control = record.get("subgroup_size_control", {})
    floats = record.get("float_controls", {})
    dot = record.get("integer_dot_product", {})
    exts = frozenset(record.get("device_extensions", ()))
    types, heaps = memory(record)
    return DeviceInfo(
        index=0,
        name=record["device_name"],
        device_type=_TYPES.get(record.get("device_type", ""), "other"),
        vendor_id=record["vendor_id"],
        device_id=record["device_id"],
        driver_version=int(record.get("driver_version", 0)),
        api_version=_api(record["api_version"]),
        pipeline_cache_uuid=_uuid(record, "pipeline_cache_uuid"),
        device_uuid=_uuid(record, "device_uuid"),
        driver_id=_DRIVERS.get(record.get("driver_id", ""), 0),
        driver_name=record.get("driver_name", ""),
        driver_info=record.get("driver_info", ""),
        subgroup_size=sub.get("subgroupSize", 0),
        max_storage_buffer_range=lim["maxStorageBufferRange"],
        max_memory_allocation_size=lim.get("maxMemoryAllocationSize", 0),
        max_compute_work_group_count=tuple(lim["maxComputeWorkGroupCount"]),
        max_compute_work_group_size=tuple(lim["maxComputeWorkGroupSize"]),
        max_compute_work_group_invocations=lim["maxComputeWorkGroupInvocations"],
        max_push_constants_size=lim.get("maxPushConstantsSize", 128),
        min_storage_buffer_offset_alignment=lim.get("minStorageBufferOffsetAlignment", 256),
        timestamp_period=float(lim.get("timestampPeriod", 0.0)),
        timestamp_compute_and_graphics=bool(lim.get("timestampComputeAndGraphics", False)),
        shader_int8=bool(feats.get("shaderInt8", False)),
        storage_buffer_8bit_access=bool(feats.get("storageBuffer8BitAccess", False)),
        integer_dot_product=bool(feats.get("shaderIntegerDotProduct", False)),
        integer_dot_product_8bit_accelerated=bool(
            dot.get("integerDotProduct4x8BitPackedSignedAccelerated")
            or dot.get("integerDotProduct8BitSignedAccelerated")
        ),
        external_memory_host="VK_EXT_external_memory_host" in exts,
        min_imported_host_pointer_alignment=record.get("external_memory_host", {}).get(
            "minImportedHostPointerAlignment", 0
        ),
        pipeline_creation_feedback="VK_EXT_pipeline_creation_feedback" in exts,
        extensions=exts,
        max_texel_buffer_elements=lim.get("maxTexelBufferElements", 0),
        texel_formats=_texel_formats(record),
        memory_heaps=tuple((h.size, h.flags) for h in heaps),
        memory_types=tuple((t.flags, t.heap_index) for t in types),
        non_coherent_atom_size=lim.get("nonCoherentAtomSize", 0),
        max_compute_shared_memory_size=lim.get("maxComputeSharedMemorySize", 0),
        subgroup_supported_operations=_bits(sub.get("supportedOperations", []), _SUBGROUP_OPS),
        subgroup_supported_stages=STAGE_COMPUTE
        if "COMPUTE" in sub.get("supportedStages", [])
        else 0,
        subgroup_size_control=bool(feats.get("subgroupSizeControl", False)),
        min_subgroup_size=size_control.get("minSubgroupSize", 0),
        max_subgroup_size=size_control.get("maxSubgroupSize", 0),
        rounding_mode_rte_float32=bool(floats.get("shaderRoundingModeRTEFloat32", False)),
        denorm_preserve_float32=bool(floats.get("shaderDenormPreserveFloat32", False)),
        denorm_flush_to_zero_float32=bool(floats.get("shaderDenormFlushToZeroFloat32", False)),
        max_uniform_buffer_range=lim.get("maxUniformBufferRange", 0),
        max_bound_descriptor_sets=lim.get("maxBoundDescriptorSets", 0),
        **{field: lim.get(name, 0) for field, name in DESCRIPTOR_LIMIT_NAMES.items()},
        shader_int64=bool(feats.get("shaderInt64", False)),
        shader_int16=bool(feats.get("shaderInt16", False)),
        shader_float16=bool(feats.get("shaderFloat16", False)),
    )


class RecordedDevice(Device):
    """A Device with no Vulkan objects, for decisions that read only ``device.info`` (and
    keep per-device state): it is never opened, so there is nothing to close."""

    def __init__(self, name: str) -> None:  # noqa: D107 - deliberately not Device.__init__
        self.name = name
        self.info = device_info(load(name))
        self._state: dict[Any, Any] = {}
        self._closed = True

    def __repr__(self) -> str:
        return f"<recorded {self.name}>"
