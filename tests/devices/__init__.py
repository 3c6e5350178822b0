"""Recorded properties of real Vulkan devices (one JSON file each, naming its source report).

``load(name)`` returns the parsed file; ``memory(record)`` its memory types and heaps as
:mod:`vkcore.placement` plain data; ``NAMES`` lists every recorded device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vkcore import placement

HERE = Path(__file__).resolve().parent
NAMES = sorted(p.stem for p in HERE.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    return json.loads((HERE / f"{name}.json").read_text())


def memory(record: dict[str, Any]) -> tuple[list[placement.MemoryType], list[placement.MemoryHeap]]:
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
