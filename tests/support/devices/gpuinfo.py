"""A Vulkan Hardware Database report (vulkan.gpuinfo.org's JSON, as its API serves it) as a
recorded device of this folder: the same keys as the files taken from ``vulkaninfo`` text.

    python tests/support/devices/gpuinfo.py REPORT.json --source "where it came from" > NAME.json

Every value is copied from the report; only its encoding changes: bit masks become the
Vulkan names of their bits (a bit without a name here stays as its hex value), hex
strings become integers, UUID byte arrays the dashed form ``vulkaninfo`` prints. A value
the report lacks is left out, never filled in. The report's format table is cut down to
the uniform-texel-buffer support of the formats vkcore reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

MEMORY_TYPE_BITS = {0x1: "DEVICE_LOCAL", 0x2: "HOST_VISIBLE", 0x4: "HOST_COHERENT"}
MEMORY_TYPE_BITS |= {0x8: "HOST_CACHED", 0x10: "LAZILY_ALLOCATED", 0x20: "PROTECTED"}
MEMORY_TYPE_BITS |= {0x40: "DEVICE_COHERENT_AMD", 0x80: "DEVICE_UNCACHED_AMD"}
MEMORY_TYPE_BITS |= {0x100: "RDMA_CAPABLE_NV"}
HEAP_BITS = {0x1: "DEVICE_LOCAL", 0x2: "MULTI_INSTANCE"}
QUEUE_BITS = {0x1: "GRAPHICS", 0x2: "COMPUTE", 0x4: "TRANSFER", 0x8: "SPARSE_BINDING"}
QUEUE_BITS |= {0x10: "PROTECTED", 0x20: "VIDEO_DECODE_KHR", 0x40: "VIDEO_ENCODE_KHR"}
QUEUE_BITS |= {0x100: "OPTICAL_FLOW_NV"}
SUBGROUP_OPERATION_BITS = {0x1: "BASIC", 0x2: "VOTE", 0x4: "ARITHMETIC", 0x8: "BALLOT"}
SUBGROUP_OPERATION_BITS |= {0x10: "SHUFFLE", 0x20: "SHUFFLE_RELATIVE", 0x40: "CLUSTERED"}
SUBGROUP_OPERATION_BITS |= {0x80: "QUAD", 0x100: "PARTITIONED_NV", 0x200: "ROTATE_KHR"}
SUBGROUP_OPERATION_BITS |= {0x400: "ROTATE_CLUSTERED_KHR"}
STAGE_BITS = {0x1: "VERTEX", 0x2: "TESSELLATION_CONTROL", 0x4: "TESSELLATION_EVALUATION"}
STAGE_BITS |= {0x8: "GEOMETRY", 0x10: "FRAGMENT", 0x20: "COMPUTE", 0x40: "TASK_EXT"}
STAGE_BITS |= {0x80: "MESH_EXT", 0x100: "RAYGEN_KHR", 0x200: "ANY_HIT_KHR"}
STAGE_BITS |= {0x400: "CLOSEST_HIT_KHR", 0x800: "MISS_KHR", 0x1000: "INTERSECTION_KHR"}
STAGE_BITS |= {0x2000: "CALLABLE_KHR", 0x4000: "SUBPASS_SHADING_HUAWEI"}
STAGE_BITS |= {0x80000: "CLUSTER_CULLING_HUAWEI"}
DRIVER_IDS = {1: "AMD_PROPRIETARY", 2: "AMD_OPEN_SOURCE", 3: "MESA_RADV"}
DRIVER_IDS |= {4: "NVIDIA_PROPRIETARY", 5: "INTEL_PROPRIETARY_WINDOWS"}
DRIVER_IDS |= {6: "INTEL_OPEN_SOURCE_MESA", 7: "IMAGINATION_PROPRIETARY"}
DRIVER_IDS |= {8: "QUALCOMM_PROPRIETARY", 9: "ARM_PROPRIETARY", 10: "GOOGLE_SWIFTSHADER"}
DRIVER_IDS |= {11: "GGP_PROPRIETARY", 12: "BROADCOM_PROPRIETARY", 13: "MESA_LLVMPIPE"}
DRIVER_IDS |= {14: "MOLTENVK", 15: "COREAVI_PROPRIETARY", 16: "JUICE_PROPRIETARY"}
DRIVER_IDS |= {17: "VERISILICON_PROPRIETARY", 18: "MESA_TURNIP", 19: "MESA_V3DV"}
DRIVER_IDS |= {20: "MESA_PANVK", 21: "SAMSUNG_PROPRIETARY", 22: "MESA_VENUS"}
DRIVER_IDS |= {23: "MESA_DOZEN", 24: "MESA_NVK", 25: "IMAGINATION_OPEN_SOURCE_MESA"}
DRIVER_IDS |= {26: "MESA_HONEYKRISP", 27: "VULKAN_SC_EMULATION_ON_VULKAN"}
# The formats vkcore reads as uniform texel buffers (vkcore.device.info.TEXEL_FORMATS).
TEXEL_FORMATS = {98: "VK_FORMAT_R32_UINT", 100: "VK_FORMAT_R32_SFLOAT"}
TEXEL_FORMATS |= {107: "VK_FORMAT_R32G32B32A32_UINT", 109: "VK_FORMAT_R32G32B32A32_SFLOAT"}
UNIFORM_TEXEL_BUFFER = 0x8

LIMITS = [
    "maxComputeWorkGroupCount",
    "maxComputeWorkGroupSize",
    "maxComputeWorkGroupInvocations",
    "maxComputeSharedMemorySize",
    "maxStorageBufferRange",
    "maxUniformBufferRange",
    "maxTexelBufferElements",
    "maxPushConstantsSize",
    "minStorageBufferOffsetAlignment",
    "minTexelBufferOffsetAlignment",
    "nonCoherentAtomSize",
    "timestampComputeAndGraphics",
    "timestampPeriod",
    "maxBoundDescriptorSets",
    "maxPerStageDescriptorStorageBuffers",
    "maxPerStageDescriptorUniformBuffers",
    "maxPerStageDescriptorSampledImages",
    "maxPerStageDescriptorStorageImages",
    "maxPerStageResources",
    "maxDescriptorSetStorageBuffers",
    "maxDescriptorSetUniformBuffers",
    "maxDescriptorSetSampledImages",
    "maxDescriptorSetStorageImages",
]
FLOAT_CONTROLS = [
    "shaderRoundingModeRTEFloat32",
    "shaderRoundingModeRTZFloat32",
    "shaderDenormPreserveFloat32",
    "shaderDenormFlushToZeroFloat32",
    "shaderSignedZeroInfNanPreserveFloat32",
]
DOT_PRODUCT = [
    "integerDotProduct4x8BitPackedSignedAccelerated",
    "integerDotProduct4x8BitPackedUnsignedAccelerated",
    "integerDotProduct4x8BitPackedMixedSignednessAccelerated",
    "integerDotProduct8BitSignedAccelerated",
]
SIZE_CONTROL = ["minSubgroupSize", "maxSubgroupSize", "maxComputeWorkgroupSubgroups"]
# Each feature, with the structures (report section, else extension) that may hold it.
FEATURES = {
    "shaderInt8": ("core12", "VK_KHR_shader_float16_int8"),
    "shaderInt16": ("features",),
    "shaderInt64": ("features",),
    "shaderFloat16": ("core12", "VK_KHR_shader_float16_int8"),
    "storageBuffer8BitAccess": ("core12", "VK_KHR_8bit_storage"),
    "storageBuffer16BitAccess": ("core11", "VK_KHR_16bit_storage"),
    "uniformAndStorageBuffer8BitAccess": ("core12", "VK_KHR_8bit_storage"),
    "shaderIntegerDotProduct": ("core13", "VK_KHR_shader_integer_dot_product"),
    "subgroupSizeControl": ("core13", "VK_EXT_subgroup_size_control"),
    "computeFullSubgroups": ("core13", "VK_EXT_subgroup_size_control"),
}


class ReportError(ValueError):
    """The file is not a report this converter can read (says what is wrong)."""


def names(mask: Any, table: dict[int, str]) -> list[str]:
    mask = integer(mask)
    if mask < 0:
        raise ValueError(f"a bit mask must be 0 or more, got {mask}")
    out = [name for bit, name in table.items() if mask & bit]
    unnamed = mask & ~sum(table)
    if unnamed:
        out.append(f"0x{unnamed:x}")
    return out


def integer(value: Any) -> int:
    """A count or size as the report stores it: a number, or a hex or decimal string."""
    if isinstance(value, str):
        return int(value, 0)
    return int(value)


def _uuid(octets: list[int]) -> str:
    return str(uuid.UUID(bytes=bytes(octets)))


def _truth(value: Any) -> bool:
    return value in (1, True, "true", "1")


def _extended(report: dict[str, Any], kind: str, extension: str | None = None) -> dict[str, Any]:
    """name -> value of the report's extension structures (``deviceproperties2`` or
    ``devicefeatures2``), optionally of one extension."""
    out: dict[str, Any] = {}
    for entry in report.get("extended", {}).get(kind, []):
        if extension is None or entry.get("extension") == extension:
            out.setdefault(entry["name"], entry.get("value", entry.get("supported")))
    return out


def _core(report: dict[str, Any], section: str, part: str) -> dict[str, Any]:
    block = report.get(section)
    return block.get(part, {}) if isinstance(block, dict) else {}


def _property(report: dict[str, Any], section: str, extension: str, name: str) -> Any:
    core = _core(report, section, "properties")
    if name in core:
        return core[name]
    return _extended(report, "deviceproperties2", extension).get(name)


def _pick(report: dict[str, Any], section: str, extension: str, keys: list[str]) -> dict:
    found = {k: _property(report, section, extension, k) for k in keys}
    return {k: v for k, v in found.items() if v is not None}


def memory(report: dict[str, Any]) -> dict[str, Any]:
    mem = report["memory"]
    return {
        "memory_heaps": [
            {"size": integer(h["size"]), "flags": names(h["flags"], HEAP_BITS)}
            for h in mem["memoryHeaps"]
        ],
        "memory_types": [
            {
                "heap_index": integer(t["heapIndex"]),
                "flags": names(t["propertyFlags"], MEMORY_TYPE_BITS),
            }
            for t in mem["memoryTypes"]
        ],
    }


def limits(report: dict[str, Any]) -> dict[str, Any]:
    lim = report["properties"]["limits"]
    out: dict[str, Any] = {}
    for key in LIMITS:
        if lim.get(key) is None:  # not reported (some reports store a null)
            continue
        value = lim[key]
        if key == "timestampComputeAndGraphics":
            out[key] = _truth(value)
        elif key == "timestampPeriod":
            out[key] = float(value)
        elif isinstance(value, list):
            out[key] = [integer(v) for v in value]
        else:
            out[key] = integer(value)
    allocation = _property(report, "core11", "VK_KHR_maintenance3", "maxMemoryAllocationSize")
    if allocation is not None:
        out["maxMemoryAllocationSize"] = integer(allocation)
    return out


def subgroup(report: dict[str, Any]) -> dict[str, Any]:
    sub = report["properties"].get("subgroupProperties")
    if not sub:
        return {}
    return {
        "subgroup": {
            "subgroupSize": integer(sub["subgroupSize"]),
            "supportedStages": names(sub["supportedStages"], STAGE_BITS),
            "supportedOperations": names(sub["supportedOperations"], SUBGROUP_OPERATION_BITS),
            "quadOperationsInAllStages": _truth(sub["quadOperationsInAllStages"]),
        }
    }


def subgroup_size_control(report: dict[str, Any]) -> dict[str, Any]:
    ext = "VK_EXT_subgroup_size_control"
    found = {k: integer(v) for k, v in _pick(report, "core13", ext, SIZE_CONTROL).items()}
    stages = _property(report, "core13", ext, "requiredSubgroupSizeStages")
    if stages is not None:
        found["requiredSubgroupSizeStages"] = names(integer(stages), STAGE_BITS)
    return {"subgroup_size_control": found} if found else {}


def features(report: dict[str, Any]) -> dict[str, bool]:
    out = {}
    for name, (section, *extension) in FEATURES.items():
        core = report["features"] if section == "features" else _core(report, section, "features")
        value = core.get(name)
        if value is None and extension:
            value = _extended(report, "devicefeatures2", extension[0]).get(name)
        if value is not None:
            out[name] = _truth(value)
    return out


def texel_formats(report: dict[str, Any]) -> dict[str, Any]:
    table = report.get("formats")
    if not table:
        return {}
    found = [
        TEXEL_FORMATS[fmt]
        for fmt, props in table
        if fmt in TEXEL_FORMATS and integer(props.get("bufferFeatures", 0)) & UNIFORM_TEXEL_BUFFER
    ]
    return {"uniform_texel_buffer_formats": sorted(found)}


def record(report: Any, source: str) -> dict[str, Any]:
    """The recorded device of ``report``; ReportError naming what is missing or malformed
    when it is not a report (a report is untrusted input: nothing wrong goes through)."""
    try:
        return _record(report, source)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ReportError(f"not a usable report ({type(exc).__name__}: {exc})") from None


def _record(report: dict[str, Any], source: str) -> dict[str, Any]:
    props = report["properties"]
    out: dict[str, Any] = {
        "source": source,
        "device_name": props["deviceName"],
        "vendor_id": props["vendorID"],
        "device_id": props["deviceID"],
        "device_type": props["deviceTypeText"],
        "api_version": props["apiVersionText"],
        "driver_version": props["driverVersion"],
    }
    driver = _pick(report, "core12", "VK_KHR_driver_properties", ["driverName", "driverInfo"])
    renamed = {"driverName": "driver_name", "driverInfo": "driver_info"}
    out |= {renamed[k]: v for k, v in driver.items()}
    out |= memory(report) | {"limits": limits(report)}
    out["queue_families"] = [
        {
            "flags": names(q["queueFlags"], QUEUE_BITS),
            "count": integer(q["queueCount"]),
            "timestamp_valid_bits": integer(q["timestampValidBits"]),
        }
        for q in report.get("queues", [])
    ]
    out |= subgroup(report) | subgroup_size_control(report)
    floats = _pick(report, "core12", "VK_KHR_shader_float_controls", FLOAT_CONTROLS)
    out["float_controls"] = {k: _truth(v) for k, v in floats.items()}
    dots = _pick(report, "core13", "VK_KHR_shader_integer_dot_product", DOT_PRODUCT)
    out["integer_dot_product"] = {k: _truth(v) for k, v in dots.items()}
    out["features"] = features(report)
    host = _property(report, "", "VK_EXT_external_memory_host", "minImportedHostPointerAlignment")
    if host is not None:
        out["external_memory_host"] = {"minImportedHostPointerAlignment": integer(host)}
    out["device_extensions"] = sorted(e["extensionName"] for e in report.get("extensions", []))
    out |= texel_formats(report)
    if "pipelineCacheUUID" in props:
        out["pipeline_cache_uuid"] = _uuid(props["pipelineCacheUUID"])
    device_uuid = _property(report, "core11", "VK_KHR_external_memory_capabilities", "deviceUUID")
    if device_uuid is not None:
        out["device_uuid"] = _uuid(device_uuid)
    driver_id = _property(report, "core12", "VK_KHR_driver_properties", "driverID")
    if isinstance(driver_id, str) and driver_id in DRIVER_IDS.values():
        out["driver_id"] = "DRIVER_ID_" + driver_id  # older reports store the enum's name
    elif driver_id is not None and integer(driver_id) in DRIVER_IDS:
        out["driver_id"] = "DRIVER_ID_" + DRIVER_IDS[integer(driver_id)]
    return {k: v for k, v in out.items() if v not in ({}, [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="a vulkan.gpuinfo.org JSON report")
    parser.add_argument("--source", required=True, help="where the report came from")
    args = parser.parse_args(argv)
    try:
        with open(args.report, encoding="utf-8") as f:
            converted = record(json.load(f), args.source)
    except (OSError, ValueError) as exc:  # unreadable, not JSON, not UTF-8, not a report
        print(f"gpuinfo: {args.report}: {exc}", file=sys.stderr)
        return 2
    json.dump(converted, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
