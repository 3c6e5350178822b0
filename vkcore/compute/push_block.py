"""A push-constant block packed from values by member name, checked against the types
reflected from the shader (:mod:`vkcore.spirv.reflect`), and specialization constant values."""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vkcore.errors import shown
from vkcore.spirv import reflect

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "uint": (0, 2**32 - 1)}
_PACK = {"int": "<i", "uint": "<I", "float": "<f"}


class PushBlock:
    """The push-constant block of one shader: its members, size and a fast packer."""

    def __init__(self, members: Sequence[reflect.PushMember], size: int, name: str) -> None:
        self.members = tuple(members)
        self.size = size
        self.name = name  # the program's, for messages
        self._struct = _scalar_block(self.members, size)
        self._names = frozenset(m.name for m in self.members)

    def pack(self, push: bytes | None, values: Mapping[str, Any]) -> bytes:
        """The block's bytes from ``push`` (given whole) or ``values`` (by member name)."""
        size = self.size
        if push is not None:
            if values:
                raise TypeError("give push constants by name or as push=bytes, not both")
            if not isinstance(push, (bytes, bytearray)) or len(push) != size:
                got = len(push) if isinstance(push, (bytes, bytearray)) else type(push).__name__
                raise ValueError(f"push must be {size} bytes (the push-constant block), got {got}")
            return bytes(push)
        if self._struct is not None and values.keys() == self._names:
            fast = self._pack_scalars(values)
            if fast is not None:
                return fast
        members = {m.name: m for m in self.members}
        unknown = sorted(set(values) - set(members))
        if unknown:
            raise TypeError(
                f"{self.name} has no push constant {shown(unknown[0])} "
                f"(it has {sorted(members) or 'none'})"
            )
        missing = sorted(set(members) - set(values))
        if missing:
            raise TypeError(f"{self.name}: push constant {missing[0]!r} is missing")
        if self._struct is not None:  # scalars only: one pack of the whole block
            return self._struct.pack(*(member_value(m, values[m.name]) for m in self.members))
        block = bytearray(size)
        for m in self.members:
            block[m.offset : m.offset + m.size] = _pack_member(m, values[m.name])
        return bytes(block)

    def _pack_scalars(self, values: Mapping[str, Any]) -> bytes | None:
        """The block packed in one call, or None where a value needs the checked path
        (a bool, a wrong type, an int out of range: that path names the problem)."""
        items = [values[m.name] for m in self.members]
        if any(type(v) is bool for v in items):
            return None
        assert self._struct is not None
        try:
            return self._struct.pack(*items)
        except (struct.error, OverflowError, TypeError):
            return None


def _pack_member(m: reflect.PushMember, value: Any) -> bytes:
    items = (
        [value]
        if m.count == 1
        else list(np.asarray(value).reshape(-1))
        if _is_sequence(value)
        else None
    )
    if items is None or len(items) != m.count:
        raise TypeError(
            f"push constant {m.name!r} takes {m.count} {m.kind} values, got {shown(value)}"
        )
    return b"".join(struct.pack(_PACK[m.kind], member_value(m, v)) for v in items)


def _scalar_block(members: Sequence[reflect.PushMember], size: int) -> struct.Struct | None:
    """A struct.Struct packing the whole block when every member is a scalar, else None."""
    if any(m.count != 1 for m in members):
        return None
    fmt, at = "<", 0
    for m in sorted(members, key=lambda m: m.offset):
        fmt += "x" * (m.offset - at) + _PACK[m.kind][1]
        at = m.offset + 4
    fmt += "x" * (size - at)
    if sorted(members, key=lambda m: m.offset) != list(members):
        return None  # declared out of offset order: the per-member path keeps it simple
    return struct.Struct(fmt)


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


def member_value(m: reflect.PushMember, v: Any, what: str = "") -> int | float:
    """``v`` checked against the member's type (``what`` names it in errors)."""
    what = what or f"push constant {m.name!r}"
    if m.kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{what} is a float, got {type(v).__name__}")
        # inf and NaN are float32 values; a finite number beyond float32 is not.
        too_big = abs(int(v)) > _FLOAT32_MAX if isinstance(v, (int, np.integer)) else False
        f = math.inf if too_big else float(v)
        if too_big or (math.isfinite(f) and abs(f) > _FLOAT32_MAX):
            limit = repr(float(_FLOAT32_MAX))  # every digit: 3.4028235e38 is beyond it
            raise ValueError(f"{what} (float32) must be within +-{limit}, got {shown(v)}")
        return f
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} is an {m.kind}, got {type(v).__name__} {shown(v)}")
    lo, hi = _INT_RANGE[m.kind]
    if not lo <= int(v) <= hi:
        raise ValueError(f"{what} ({m.kind}) must be in {lo}..{hi}, got {shown(v)}")
    return int(v)


_SPEC_FORMATS = {("int", 8): "<b", ("int", 16): "<h", ("int", 32): "<i", ("int", 64): "<q"}
_SPEC_FORMATS |= {("uint", 8): "<B", ("uint", 16): "<H", ("uint", 32): "<I", ("uint", 64): "<Q"}
_SPEC_FORMATS |= {("float", 16): "<e", ("float", 32): "<f", ("float", 64): "<d"}
_SPEC_FORMATS |= {("bool", 32): "<I"}  # a VkBool32
_FLOAT_MAX = {16: float(np.finfo(np.float16).max), 32: _FLOAT32_MAX}


def spec_value(const: reflect.SpecConstant, value: Any) -> int | float | bool:
    """``value`` checked against the constant's type and width (an int in its range, a
    real number within a float type's finite range, or inf or NaN; a bool for a bool)."""
    label = f"spec: {const.name or f'SpecId {const.id}'}"
    kind, bits = const.kind, const.bits
    type_name = f"{'an' if kind in ('int', 'uint') else 'a'} {kind}"
    if kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{label} is a bool, got {type(value).__name__}")
        return bool(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{label} is {type_name}, got {type(value).__name__}")
        finite_max = _FLOAT_MAX.get(bits, float(np.finfo(np.float64).max))
        try:
            number = float(value)
        except OverflowError:  # an int beyond float64
            number = math.inf
        # inf and NaN are values of every float type; a finite number beyond its range is not
        beyond = abs(number) > finite_max and (
            math.isfinite(number) or isinstance(value, (int, np.integer))
        )
        if beyond:
            raise ValueError(
                f"{label} ({kind}{bits}) must be within +-{float(finite_max)!r}, got {shown(value)}"
            )
        return number
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{label} is {type_name}, got {type(value).__name__} {shown(value)}")
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if kind == "int" else (0, 2**bits - 1)
    if not lo <= int(value) <= hi:
        raise ValueError(f"{label} ({kind}{bits}) must be in {lo}..{hi}, got {shown(value)}")
    return int(value)


def spec_bytes(const: reflect.SpecConstant, value: Any) -> bytes:
    """The bytes of a checked value (:func:`spec_value`) as the pipeline takes them: the
    constant's own width (8 bytes for a double or a 64-bit int), little-endian."""
    fmt = _SPEC_FORMATS.get((const.kind, const.bits))
    if fmt is None:
        raise ValueError(f"spec: {const.name or const.id} is a {const.bits}-bit {const.kind}")
    return struct.pack(fmt, spec_value(const, value))
