"""Where a :class:`vkcore.Program` comes from (GLSL text, a file with includes, or SPIR-V
bytes) and the checks of its construction arguments (workgroup, texel formats)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vkcore import spirv
from vkcore.compute.program_args import TEXEL_BYTES
from vkcore.compute.push_block import spec_bytes, spec_value
from vkcore.device.device import Device
from vkcore.errors import cut, shown
from vkcore.spirv import reflect, validate


def spirv_of(
    source: str | None,
    path: str | Path | None,
    blob: bytes | None,
    include_dirs: Sequence[str | Path],
    defines: Mapping[str, int | str] | None,
    api_version: int,
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
            raise TypeError(
                f"spirv must be bytes or a bytearray (of a numpy array: its .tobytes()), "
                f"got {type(blob).__name__}"
            )
        validate.check(bytes(blob), api_version)  # (docs/programs.md#validation)
        key = hashlib.sha256(bytes(blob)).hexdigest()[:32]
        return spirv.Spirv(bytes(blob), "given", 0.0, key)
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text() if file.is_file() else None
        except OSError as exc:  # a name too long, unreadable: the error, the name cut short
            raise OSError(exc.errno, f"path: {exc.strerror}", cut(str(file))) from None
        if text is None:
            raise FileNotFoundError(f"path: no shader file {shown(str(file))}")
        return spirv.compile_source(
            text,
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
        raise TypeError(f"workgroup must be an int or 1 to 3 ints, got {shown(workgroup)}")
    return [int(d) for d in dims] + [None] * (3 - len(dims))


def ints(value: Any, name: str) -> list[Any]:
    """``value`` as a list of its items (one int, or a sequence), else a TypeError."""
    if isinstance(value, (int, np.integer)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or 1 to 3 ints, got {shown(value)}") from None


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
                f"texel: format {shown(fmt)} for binding {number} is not readable as a uniform "
                f"texel buffer on this device (it offers {sorted(device.info.texel_formats)})"
            )
    return formats


def check_bindings(bindings: Sequence[reflect.Binding]) -> None:
    """Refuse what vkcore.Program cannot bind (other sets, imageBuffer, a binding number
    used twice); the device's limits are :mod:`vkcore.compute.program_limits`'."""
    for b in bindings:
        if b.set != 0:
            raise ValueError(f"binding {b.binding} is in descriptor set {b.set}; use set 0")
        if b.kind == reflect.STORAGE_TEXEL_BUFFER:
            raise ValueError(
                f"binding {b.binding} ({b.name}) is an imageBuffer (storage texel "
                "buffer), which vkcore.Program does not support; use a storage buffer"
            )
    numbers = [b.binding for b in bindings]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"two bindings share a number: {numbers}")


def spec_values(
    interface: reflect.Interface,
    given: Mapping[str | int, Any] | None,
    workgroup: int | Sequence[int] | None,
) -> dict[int, Any]:
    """SpecId -> value for every constant set by ``spec`` or ``workgroup``."""
    by_name = {c.name: c for c in interface.spec if c.name}
    by_id = {c.id: c for c in interface.spec}
    values: dict[int, Any] = {}
    for key, value in (given or {}).items():
        if isinstance(key, bool) or not isinstance(key, (str, int, np.integer)):
            raise TypeError(f"spec keys are names (str) or SpecIds (int), got {shown(key)}")
        const = by_name.get(key) if isinstance(key, str) else by_id.get(int(key))
        if const is not None and const.id in values:
            raise ValueError(f"spec: {shown(key)} sets SpecId {const.id} a second time")
        if const is None:
            known = sorted(by_name) or "none"
            raise ValueError(
                f"spec: the shader has no specialization constant {shown(key)} "
                f"(named ones: {known})"
            )
        values[const.id] = spec_value(const, value)
    for dim, size in enumerate(workgroup_dims(workgroup)):
        spec_id = interface.local_size_ids[dim]
        if size is None:
            continue
        if spec_id is None:
            raise ValueError(
                f"workgroup: the shader fixes local_size_{'xyz'[dim]} "
                f"= {interface.local_size[dim]}; declare local_size_{'xyz'[dim]}_id "
                "to set it here"
            )
        if spec_id in values:
            raise ValueError(
                f"workgroup and spec both set SpecId {spec_id} (local_size_{'xyz'[dim]}); "
                "give it once"
            )
        values[spec_id] = size
    return values


def spec_data(interface: reflect.Interface, values: Mapping[int, Any]) -> dict[int, bytes]:
    """SpecId -> the bytes the pipeline takes for each set constant (its type's width)."""
    by_id = {c.id: c for c in interface.spec}
    local = reflect.SpecConstant(0, "", "uint", 0)  # a LocalSizeId naming no SpecConstant
    return {i: spec_bytes(by_id.get(i, local), v) for i, v in values.items()}


def local_size(interface: reflect.Interface, spec: Mapping[int, Any]) -> tuple[int, int, int]:
    """The local size in effect: the shader's, with the ids ``spec`` sets replaced."""
    ids, sizes = interface.local_size_ids, interface.local_size
    x, y, z = (int(spec.get(i, s)) if i is not None else s for i, s in zip(ids, sizes, strict=True))
    return x, y, z
