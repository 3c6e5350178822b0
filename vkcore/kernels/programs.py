"""The built-in kernels' shaders as :class:`vkcore.Program`\\ s: one per variant and device.

Kernels are thin wrappers over the public compute API: each step they submit is
``program(...).record(...)``, exactly what a user's own Program records.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from ..device import Device
from ..per_device import per_device_map
from ..program import Program

ProgramKey = tuple[Any, ...]
# Per device: the DeviceInfo the programs were made for, and the programs. A Program
# checks against the limits of the info it was made with, so another info (tests
# replace ``device.info`` to act as other GPUs) starts a new table.
_programs: weakref.WeakKeyDictionary[Device, tuple[Any, dict[ProgramKey, Program]]] = (
    per_device_map()
)


def made(device: Device) -> dict[ProgramKey, Program]:
    """The programs made so far on ``device`` for its current info, by key (shader,
    defines, workgroup, spec constants, texel formats)."""
    entry = _programs.get(device)
    if entry is None or entry[0] is not device.info:
        entry = _programs[device] = (device.info, {})
    return entry[1]


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
