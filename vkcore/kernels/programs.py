"""The built-in kernels' shaders as :class:`vkcore.Program`\\ s: one per variant and device.

Kernels are thin wrappers over the public compute API: each step they submit is
``program(...).record(...)``, exactly what a user's own Program records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vkcore.base.per_device import PerDeviceMap
from vkcore.compute.program import Program
from vkcore.device.device import Device

ProgramKey = tuple[Any, ...]
# Per device: the DeviceInfo the programs were made for, and named tables of them. A
# Program checks against the limits of the info it was made with, so another info (tests
# replace ``device.info`` to act as other GPUs) starts new tables.
_tables: PerDeviceMap[tuple[Any, dict[str, dict[Any, Program]]]] = PerDeviceMap()


def table(device: Device, name: str) -> dict[Any, Program]:
    """The table ``name`` of programs made on ``device`` for its current info: a kernel
    may keep its own, under a key cheaper to build than :func:`program`'s."""
    entry = _tables.get(device)
    if entry is None or entry[0] is not device.info:
        entry = _tables[device] = (device.info, {})
    return entry[1].setdefault(name, {})


def made(device: Device) -> dict[ProgramKey, Program]:
    """The programs :func:`program` made on ``device`` for its current info, by key
    (shader, defines, workgroup, spec constants, texel formats)."""
    return table(device, "programs")


def program(
    device: Device,
    shader: str,
    defines: Mapping[str, int | str],
    *,
    workgroup: int | None = None,
    spec: Mapping[str | int, int] | None = None,
    texel: Mapping[int, str] | None = None,
) -> Program:
    """``Program.builtin(shader, ...)`` on ``device``, made once per variant."""
    key = (
        shader,
        tuple(sorted(defines.items())),
        workgroup,
        tuple(sorted((spec or {}).items())),
        tuple(sorted((texel or {}).items())),
    )
    table = made(device)
    prog = table.get(key)
    if prog is None or prog.pipeline.handle is None:
        prog = table[key] = Program.builtin(
            shader, defines=defines, workgroup=workgroup, spec=spec, texel=texel, device=device
        )
    return prog
