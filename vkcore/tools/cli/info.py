"""``vkcore info``: the devices, the chosen one, its cache-key fields, features and memory."""

from __future__ import annotations

import argparse
import json
from typing import Any

from vkcore.device import placement
from vkcore.device.device import Device, devices
from vkcore.device.info import DeviceInfo
from vkcore.device.instance import ENUMERATE_PORTABILITY_BIT, PORTABILITY_ENUMERATION
from vkcore.device.placement import HEAP_FLAG_NAMES
from vkcore.kernels import variants


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="list devices and show the chosen one's properties")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    infos = devices()
    with Device(args.device, pipeline_cache=False) as dev:
        chosen = dev.info
        extensions = list(dev.enabled_extensions)
        setup = _setup(dev)
        setup["exactness"] = variants.exactness(chosen)
    if args.json:
        print(
            json.dumps(
                {
                    "devices": [i.to_dict() for i in infos],
                    "chosen": chosen.to_dict(),
                    "enabled_extensions": extensions,  # the device's
                    **setup,
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
    _describe_setup(setup)
    return 0


def flag_names(mask: int, names: dict[str, int]) -> list[str]:
    """The names of the bits set in ``mask`` (unknown bits as hex)."""
    out = [name for name, bit in names.items() if mask & bit]
    rest = mask & ~sum(names.values())
    return out + ([f"0x{rest:x}"] if rest else [])


def _setup(dev: Device) -> dict[str, Any]:
    """Instance and device extensions, memory heaps and types, the placement a buffer of
    each purpose really got here (a small buffer is made for each), and the budget."""
    instance = dev.instance
    heaps = [
        {"index": i, "size": h.size, "flags": flag_names(h.flags, HEAP_FLAG_NAMES)}
        for i, h in enumerate(dev.memory_heaps)
    ]
    types = [
        {"index": t.index, "heap": t.heap_index, "flags": flag_names(t.flags, placement.FLAG_NAMES)}
        for t in dev.memory_types
    ]
    budget = dev.memory_budget()
    return {
        "instance": {
            "enabled_extensions": list(instance.enabled_extensions),
            "create_flags": instance.create_flags,
            "portability_enumeration": PORTABILITY_ENUMERATION in instance.enabled_extensions
            and bool(instance.create_flags & ENUMERATE_PORTABILITY_BIT),
        },
        "device_extensions": list(dev.enabled_extensions),
        "memory": {
            "heaps": heaps,
            "types": types,
            "non_coherent_atom_size": dev.info.non_coherent_atom_size,
            "force_staging": dev.force_staging,
            "placement": {p: _placement_of(dev, p) for p in placement.PURPOSES},
            "budget": (
                [
                    {"heap": i, "budget": b, "usage": u, "size": dev.memory_heaps[i].size}
                    for i, (b, u) in enumerate(budget)
                ]
                if budget is not None
                else "not available"
            ),
        },
    }


def _placement_of(dev: Device, purpose: str) -> dict[str, Any]:
    from vkcore.device.memory.buffer import Buffer

    buf = Buffer(dev, 256, purpose=purpose)
    try:
        choice = buf.choice
        assert choice is not None
        t = dev.memory_types[choice.type_index]
        limit = buf.read_in_place_max if choice.mapped else 0
        return {
            "type_index": choice.type_index,
            "heap": t.heap_index,
            "heap_size": dev.memory_heaps[t.heap_index].size,
            "flags": flag_names(t.flags, placement.FLAG_NAMES),
            "mapped": choice.mapped,
            "staged": not choice.mapped,
            "coherent": choice.coherent,
            # Host reads larger than this are staged through cached memory; None: any size.
            "reads_in_place_up_to": None if limit == placement.NO_LIMIT else limit,
        }
    finally:
        buf.destroy()


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
    _rows(rows)


def _describe_setup(setup: dict[str, Any]) -> None:
    inst, mem = setup["instance"], setup["memory"]
    rows: list[tuple[str, Any]] = [
        ("instance extensions", ", ".join(inst["enabled_extensions"]) or "none"),
        ("instance create flags", f"0x{inst['create_flags']:x}"),
        ("portability enumeration", "on" if inst["portability_enumeration"] else "off"),
        ("device extensions", ", ".join(setup["device_extensions"]) or "none"),
    ]
    for h in mem["heaps"]:
        rows.append((f"heap {h['index']}", f"{h['size'] >> 20} MiB {'|'.join(h['flags'])}"))
    for t in mem["types"]:
        rows.append((f"memory type {t['index']}", f"heap {t['heap']} {'|'.join(t['flags'])}"))
    for purpose, p in mem["placement"].items():
        how = "mapped" if p["mapped"] else "device-local, through staging"
        rows.append((f"placement {purpose}", f"type {p['type_index']} (heap {p['heap']}), {how}"))
    exact = setup["exactness"]
    rows.append(
        (
            "rounding mode RTE",
            "requested"
            if exact["rounding_mode_rte_requested"]
            else "not supported: dequantize and integer-mode y within one rounding per step",
        )
    )
    rows.append(
        (
            "subgroup reductions",
            "yes" if exact["subgroup_reductions"] else "no: shared-memory reductions",
        )
    )
    budget = mem["budget"]
    if isinstance(budget, str):
        rows.append(("memory budget", f"{budget} (no VK_EXT_memory_budget)"))
    else:
        for b in budget:
            used, avail = b["usage"] >> 20, b["budget"] >> 20
            rows.append((f"heap {b['heap']} budget", f"{used} MiB used of {avail} MiB"))
    _rows(rows)


def _rows(rows: list[tuple[str, Any]]) -> None:
    width = 28
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
