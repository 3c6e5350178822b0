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
_programs: weakref.WeakKeyDictionary[Device, dict[ProgramKey, Program]] = per_device_map()


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
    table = _programs.setdefault(device, {})
    prog = table.get(key)
    if prog is None or prog.pipeline.handle is None:
        prog = table[key] = Program.builtin(
            shader, defines=defines, workgroup=workgroup, spec=spec, texel=texel, device=device
        )
    return prog
