"""Shader interfaces reflected when the wheel was built, shipped next to its SPIR-V.

``setup.py`` reflects every declared variant of vkcore's own shaders and writes
``vkcore/spirv/interfaces.json``: the SHA-256 of each module's words -> its interface
(:mod:`vkcore.spirv.reflect`'s dataclasses as plain JSON). :meth:`vkcore.Program.builtin` takes
an interface from there only for exactly the words it was reflected from, and only after
every field has been checked; anything else (no file, a damaged one, a module it does not
list) falls back to reflecting the words at run time, with one warning for a bad file.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from vkcore.spirv import reflect
from vkcore.spirv.reflect_element import ELEMENTS

log = logging.getLogger("vkcore")
FILE_NAME = "interfaces.json"
FORMAT = 5  # 2: bindings say whether the code uses them; 3: and their element type;
# 4: specialization constants' bits, the shared-memory size; 5: the capabilities
_KINDS = frozenset(
    {
        reflect.STORAGE_BUFFER,
        reflect.UNIFORM_BUFFER,
        reflect.UNIFORM_TEXEL_BUFFER,
        reflect.STORAGE_TEXEL_BUFFER,
    }
)
_PUSH_KINDS = frozenset({"int", "uint", "float"})
_SPEC_KINDS = frozenset({"bool", "int", "uint", "float"})
_INT_BITS = (8, 16, 32, 64)
_SIZE_OPERATIONS = frozenset(reflect.SPEC_OPS.values())


def digest(code: bytes) -> str:
    return hashlib.sha256(code).hexdigest()


def to_json(iface: reflect.Interface) -> dict[str, Any]:
    return {
        "bindings": [
            [
                b.set,
                b.binding,
                b.kind,
                b.name,
                b.readonly,
                b.writeonly,
                b.fixed_bytes,
                b.stride,
                b.used,
                b.element,
            ]
            for b in iface.bindings
        ],
        "push": [[m.name, m.offset, m.kind, m.count] for m in iface.push],
        "push_size": iface.push_size,
        "spec": [[c.id, c.name, c.kind, c.default, c.bits] for c in iface.spec],
        "local_size": list(iface.local_size),
        "local_size_ids": list(iface.local_size_ids),
        "entry_point": iface.entry_point,
        "shared_bytes": iface.shared_bytes,
        "capabilities": list(iface.capabilities),
    }


def write(path: Path, interfaces: dict[str, reflect.Interface]) -> None:
    """Write ``interfaces`` (SPIR-V digest -> interface) as the shipped file (build time)."""
    body = {"format": FORMAT, "modules": {k: to_json(v) for k, v in sorted(interfaces.items())}}
    path.write_text(json.dumps(body, sort_keys=True) + "\n")


def shipped(code: bytes, folder: Path) -> reflect.Interface | None:
    """The shipped interface of module ``code`` from ``folder``, or None (reflect it)."""
    entry = _load(folder).get(digest(code))
    if entry is None:
        return None
    try:
        return from_json(entry)
    except (TypeError, ValueError, KeyError) as exc:
        log.warning("shipped interface of a SPIR-V module ignored (reflecting it): %s", exc)
        return None


@functools.cache
def _load(folder: Path) -> dict[str, Any]:
    path = folder / FILE_NAME
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("%s ignored (shader interfaces are reflected instead): %s", path, exc)
        return {}
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        log.warning("%s ignored: not format %d", path, FORMAT)
        return {}
    modules = body.get("modules")
    if not isinstance(modules, dict):
        log.warning("%s ignored: no 'modules' table", path)
        return {}
    return modules


def from_json(entry: Any) -> reflect.Interface:
    """An :class:`reflect.Interface` from its JSON form, every field checked."""
    if not isinstance(entry, dict):
        raise TypeError("an interface entry must be an object")
    return reflect.Interface(
        bindings=tuple(_binding(b) for b in _list(entry["bindings"])),
        push=tuple(_push(m) for m in _list(entry["push"])),
        push_size=_uint(entry["push_size"]),
        spec=tuple(_spec(c) for c in _list(entry["spec"])),
        local_size=_dims(entry["local_size"]),
        local_size_ids=_ids(entry["local_size_ids"]),
        entry_point=_str(entry["entry_point"]),
        shared_bytes=_size(entry["shared_bytes"]),
        capabilities=tuple(_uint(c) for c in _list(entry["capabilities"])),
    )


def _binding(raw: Any) -> reflect.Binding:
    set_, binding, kind, name, readonly, writeonly, fixed, stride, used, element = _list(raw, 10)
    if kind not in _KINDS:
        raise ValueError(f"unknown binding kind {kind!r}")
    if element != "" and element not in ELEMENTS:
        raise ValueError(f"unknown element type {element!r}")
    return reflect.Binding(
        _uint(set_),
        _uint(binding),
        kind,
        _str(name),
        _bool(readonly),
        _bool(writeonly),
        _uint(fixed),
        _uint(stride),
        _bool(used),
        _str(element),
    )


def _push(raw: Any) -> reflect.PushMember:
    name, offset, kind, count = _list(raw, 4)
    if kind not in _PUSH_KINDS:
        raise ValueError(f"unknown push member type {kind!r}")
    if _uint(count) < 1:
        raise ValueError("a push member has at least one component")
    return reflect.PushMember(_str(name), _uint(offset), kind, count)


def _spec(raw: Any) -> reflect.SpecConstant:
    spec_id, name, kind, default, bits = _list(raw, 5)
    if kind not in _SPEC_KINDS:
        raise ValueError(f"unknown specialization constant type {kind!r}")
    if bits not in ((32,) if kind == "bool" else (16, 32, 64) if kind == "float" else _INT_BITS):
        raise ValueError(f"a {kind} specialization constant of {bits!r} bits")
    number = bool if kind == "bool" else float if kind == "float" else int
    if type(default) is not number and not (number is float and type(default) is int):
        raise TypeError(f"specialization constant default {default!r} is not a {kind}")
    return reflect.SpecConstant(_uint(spec_id), _str(name), kind, default, bits)


def _size(raw: Any) -> reflect.Size:
    """A :data:`reflect.Size` from JSON (lists for its tuples), every node checked."""
    if raw is None:
        return None
    if type(raw) is int:
        if raw < 0:
            raise ValueError(f"a size of {raw} bytes")
        return raw
    node = _list(raw)
    if len(node) == 2 and node[0] == "spec":
        return ("spec", _uint(node[1]))
    if len(node) == 3 and node[0] in _SIZE_OPERATIONS:
        return (node[0], _size(node[1]), _size(node[2]))
    raise ValueError(f"not a size expression: {raw!r}")


def _dims(raw: Any) -> tuple[int, int, int]:
    x, y, z = (_uint(v) for v in _list(raw, 3))
    if min(x, y, z) < 1:
        raise ValueError("a local size is at least 1 in every dimension")
    return x, y, z


def _ids(raw: Any) -> tuple[int | None, int | None, int | None]:
    x, y, z = (None if v is None else _uint(v) for v in _list(raw, 3))
    return x, y, z


def _list(raw: Any, length: int | None = None) -> list[Any]:
    if not isinstance(raw, list) or (length is not None and len(raw) != length):
        raise TypeError(f"expected a list{f' of {length}' if length else ''}, got {raw!r}")
    return raw


def _uint(raw: Any) -> int:
    if type(raw) is not int or not 0 <= raw < 2**32:
        raise ValueError(f"expected an int in 0..2^32-1, got {raw!r}")
    return raw


def _bool(raw: Any) -> bool:
    if type(raw) is not bool:
        raise TypeError(f"expected a bool, got {raw!r}")
    return raw


def _str(raw: Any) -> str:
    if type(raw) is not str:
        raise TypeError(f"expected a string, got {raw!r}")
    return raw
