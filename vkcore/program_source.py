"""Where a :class:`vkcore.Program` comes from (GLSL text, a file with includes, or SPIR-V
bytes) and the checks of its construction arguments (workgroup, texel formats)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import reflect, spirv, spirv_entry
from .device import Device
from .program_args import TEXEL_BYTES


def spirv_of(
    source: str | None,
    path: str | Path | None,
    blob: bytes | None,
    include_dirs: Sequence[str | Path],
    defines: Mapping[str, int | str] | None,
) -> spirv.Spirv:
    given = [
        name for name, v in (("source", source), ("path", path), ("spirv", blob)) if v is not None
    ]
    if len(given) != 1:
        raise TypeError(f"give exactly one of source, path or spirv, got {given or 'none'}")
    if blob is not None:
        if defines or include_dirs:
            raise TypeError("defines and include_dirs apply to GLSL, not to spirv=")
        if not isinstance(blob, (bytes, bytearray)):
            raise TypeError(f"spirv must be bytes, got {type(blob).__name__}")
        try:
            spirv_entry.check_spirv(bytes(blob))
        except Exception as exc:  # noqa: BLE001 - cachefs.EntryError: say it as a bad argument
            raise ValueError(f"spirv is not a usable compute module: {exc}") from None
        key = hashlib.sha256(bytes(blob)).hexdigest()[:32]
        return spirv.Spirv(bytes(blob), "given", 0.0, key)
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"path: no shader file {file}")
        return spirv.compile_source(
            file.read_text(),
            name=str(file),
            include_dirs=[file.parent, *include_dirs],
            defines=defines,
        )
    if not isinstance(source, str):
        raise TypeError(f"source must be GLSL text (str), got {type(source).__name__}")
    return spirv.compile_source(source, include_dirs=include_dirs, defines=defines)


def workgroup_dims(workgroup: int | Sequence[int] | None) -> list[int | None]:
    if workgroup is None:
        return [None, None, None]
    dims = ints(workgroup, "workgroup")
    if not 1 <= len(dims) <= 3 or any(
        isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in dims
    ):
        raise TypeError(f"workgroup must be an int or 1 to 3 ints, got {workgroup!r}")
    return [int(d) for d in dims] + [None] * (3 - len(dims))


def ints(value: Any, name: str) -> list[Any]:
    """``value`` as a list of its items (one int, or a sequence), else a TypeError."""
    if isinstance(value, (int, np.integer)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or 1 to 3 ints, got {value!r}") from None


def texel_formats(
    device: Device, bindings: Sequence[reflect.Binding], texel: Mapping[int, str] | None
) -> dict[int, str]:
    formats = dict(texel or {})
    texel_bindings = {b.binding for b in bindings if b.kind == reflect.UNIFORM_TEXEL_BUFFER}
    for number in sorted(set(formats) - texel_bindings):
        raise ValueError(f"texel: binding {number} is not a textureBuffer of the shader")
    for number in sorted(texel_bindings):
        fmt = formats.get(number)
        if fmt is None:
            raise ValueError(
                f"texel: binding {number} is a textureBuffer; give its view format, e.g. "
                f"texel={{{number}: 'rgba32f'}} (one of {sorted(TEXEL_BYTES)})"
            )
        if fmt not in device.info.texel_formats:
            raise ValueError(
                f"texel: format {fmt!r} for binding {number} is not readable as a uniform "
                f"texel buffer on this device (it offers {sorted(device.info.texel_formats)})"
            )
    return formats
