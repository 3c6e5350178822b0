"""``vkcore info``: the devices, the chosen one, its cache-key fields and features."""

from __future__ import annotations

import argparse
import json

from ..device import Device, devices
from ..instance import DeviceInfo


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="list devices and show the chosen one's properties")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    infos = devices()
    with Device(args.device, pipeline_cache=False) as dev:
        chosen = dev.info
        extensions = dev.enabled_extensions
    if args.json:
        print(
            json.dumps(
                {
                    "devices": [i.to_dict() for i in infos],
                    "chosen": chosen.to_dict(),
                    "enabled_extensions": extensions,
                },
                indent=2,
            )
        )
        return 0
    for info in infos:
        mark = "*" if info.index == chosen.index else " "
        print(
            f"{mark} {info.index}: {info.name} "
            f"({info.device_type}, {info.driver_name} {info.driver_info})"
        )
    print()
    _describe(chosen)
    return 0


def _describe(info: DeviceInfo) -> None:
    d = info.to_dict()
    rows = [
        ("device", info.name),
        ("type", info.device_type),
        ("vendorID", d["vendor_id_hex"]),
        ("deviceID", d["device_id_hex"]),
        ("driverVersion", f"{info.driver_version} ({d['driver_version_string']})"),
        ("pipelineCacheUUID", d["pipeline_cache_uuid"]),
        ("deviceUUID", d["device_uuid"]),
        ("driverID", f"{info.driver_id} ({info.driver_id_name})"),
        ("driver", f"{info.driver_name} / {info.driver_info}"),
        ("apiVersion", d["api_version_string"]),
        ("pointer size", d["pointer_size"]),
        ("subgroup size", info.subgroup_size),
        ("maxStorageBufferRange", info.max_storage_buffer_range),
        ("maxComputeWorkGroupCount", info.max_compute_work_group_count),
        ("maxComputeWorkGroupSize", info.max_compute_work_group_size),
        ("timestampPeriod (ns)", info.timestamp_period),
        ("shaderInt8", info.shader_int8),
        ("storageBuffer8BitAccess", info.storage_buffer_8bit_access),
        ("shaderIntegerDotProduct", info.integer_dot_product),
        ("int8 dot product accelerated", info.integer_dot_product_8bit_accelerated),
        ("pipeline creation feedback", info.pipeline_creation_feedback),
        ("external memory host", info.external_memory_host),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
