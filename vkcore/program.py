"""Your own compute shaders on vkcore's device layer: :class:`Program`.

::

    prog = vkcore.Program(source)                         # GLSL text
    prog = vkcore.Program(path="blur.comp", include_dirs=["inc"], defines={"RADIUS": 4})
    prog = vkcore.Program(spirv=blob)                     # SPIR-V bytes
    prog(x, y, groups=(gx, 1, 1), n=1000, a=2.5)          # buffers in binding order

GLSL goes through the content-addressed SPIR-V cache (:func:`vkcore.spirv.compile_source`:
a second process with the same sources never runs the compiler), the pipeline through the
device's persisted pipeline cache; identical programs on one device share one pipeline.
What the shader declares is read from its SPIR-V (:mod:`vkcore.reflect`):
``prog.bindings``, ``prog.push``, ``prog.spec_constants``, ``prog.workgroup``.

Binding rules (descriptor set 0; a GLSL error is a :class:`vkcore.ShaderCompileError`):

* buffers are passed positionally in binding order: a :class:`vkcore.Tensor` (bound as
  it is) or a numpy array / array-like (uploaded for the call). A numpy array bound to a
  binding the shader may write (no ``readonly``) gets the result copied back into it after
  the dispatch, so it must be a writable C-contiguous ``numpy.ndarray``; ``readonly``
  bindings are only uploaded. Each buffer's byte size must cover the block's fixed part
  and, with a runtime array, add whole elements of its stride.
* storage blocks (``buffer``) and uniform blocks (``uniform``, at most 16 KiB: Vulkan's
  guaranteed maxUniformBufferRange) are bound whole; ``textureBuffer`` bindings (uniform
  texel buffers) need their view format at construction (``texel={binding: "r32f"}``);
  ``imageBuffer`` (storage texel buffers) is not supported.
* push constants by member name, with the member's reflected type (``int``/``uint``
  members take Python or numpy integers in range, ``float`` members any real number;
  vectors and arrays take a sequence of that many); ``push=bytes`` gives the block's
  bytes instead. Specialization constants by name (or SpecId) at construction;
  ``workgroup=`` sets the local-size ids (``layout(local_size_x_id = ...)``).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import reflect, spirv
from .buffer import Buffer
from .commands import Dispatch
from .device import Device, resolve
from .pipeline import Pipeline
from .pools import buffer_pool
from .tensor import Tensor

UNIFORM_BLOCK_LIMIT = 16384  # the minimum maxUniformBufferRange every Vulkan device offers
_DESCRIPTOR_TYPES = {reflect.STORAGE_BUFFER: 7, reflect.UNIFORM_BUFFER: 6}
_UNIFORM_TEXEL_BUFFER = 4
_TEXEL_BYTES = {"r32f": 4, "r32ui": 4, "rgba32f": 16, "rgba32ui": 16}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "uint": (0, 2**32 - 1)}
_PACK = {"int": "<i", "uint": "<I", "float": "<f"}


class Program:
    """A compute shader with its reflected interface and its pipeline on one device."""

    def __init__(
        self,
        source: str | None = None,
        *,
        path: str | Path | None = None,
        spirv: bytes | None = None,
        include_dirs: Sequence[str | Path] = (),
        defines: Mapping[str, int | str] | None = None,
        spec: Mapping[str | int, Any] | None = None,
        workgroup: int | Sequence[int] | None = None,
        texel: Mapping[int, str] | None = None,
        device: Device | None = None,
    ) -> None:
        self.device = resolve(device)
        self.code = _code(source, path, spirv, include_dirs, defines)
        try:
            self.interface = reflect.reflect(self.code.code)
        except reflect.ReflectionError as exc:
            raise ValueError(f"spirv: {exc}") from None
        self.name = self._display_name(source, path)
        self.bindings = self.interface.bindings
        self.push = self.interface.push
        self.spec_constants = self.interface.spec
        self._check_bindings()
        self.texel = _texel_formats(self.device, self.bindings, texel)
        self.spec = self._spec_values(spec, workgroup)
        self.workgroup = self._local_size()
        self._check_workgroup()
        self.pipeline = self._pipeline()
        self._push_struct = _scalar_block(self.push, self.interface.push_size)
        self._push_names = frozenset(m.name for m in self.push)
        self._max_groups_x = int(self.device.info.max_compute_work_group_count[0])
        self.max_binding = int(self.device.info.max_storage_buffer_range)

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of this device's latest submission (timestamps), if measured."""
        return self.device.submitter.last_device_seconds

    # ------------------------------------------------------------------ construction
    def _display_name(self, source: str | None, path: str | Path | None) -> str:
        if path is not None:
            return str(path)
        return "<spirv>" if source is None else "<string>"

    def _check_bindings(self) -> None:
        for b in self.bindings:
            if b.set != 0:
                raise ValueError(f"binding {b.binding} is in descriptor set {b.set}; use set 0")
            if b.kind == reflect.STORAGE_TEXEL_BUFFER:
                raise ValueError(
                    f"binding {b.binding} ({b.name}) is an imageBuffer (storage texel "
                    "buffer), which vkcore.Program does not support; use a storage buffer"
                )
        for b in self.bindings:
            if b.kind == reflect.UNIFORM_BUFFER and b.fixed_bytes > UNIFORM_BLOCK_LIMIT:
                raise ValueError(
                    f"binding {b.binding} ({b.name}) is a uniform block of {b.fixed_bytes} "
                    f"bytes, more than {UNIFORM_BLOCK_LIMIT} (Vulkan's guaranteed "
                    "maxUniformBufferRange); use a storage buffer"
                )
        numbers = [b.binding for b in self.bindings]
        if len(set(numbers)) != len(numbers):
            raise ValueError(f"two bindings share a number: {numbers}")

    def _spec_values(
        self, given: Mapping[str | int, Any] | None, workgroup: int | Sequence[int] | None
    ) -> dict[int, Any]:
        """SpecId -> value for every constant set by ``spec`` or ``workgroup``."""
        by_name = {c.name: c for c in self.spec_constants if c.name}
        by_id = {c.id: c for c in self.spec_constants}
        values: dict[int, Any] = {}
        for key, value in (given or {}).items():
            if isinstance(key, bool) or not isinstance(key, (str, int, np.integer)):
                raise TypeError(f"spec keys are names (str) or SpecIds (int), got {key!r}")
            const = by_name.get(key) if isinstance(key, str) else by_id.get(int(key))
            if const is not None and const.id in values:
                raise ValueError(f"spec: {key!r} sets SpecId {const.id} a second time")
            if const is None:
                known = sorted(by_name) or "none"
                raise ValueError(
                    f"spec: the shader has no specialization constant {key!r} (named ones: {known})"
                )
            values[const.id] = _spec_value(const, value)
        for dim, size in enumerate(_workgroup_dims(workgroup)):
            spec_id = self.interface.local_size_ids[dim]
            if size is None:
                continue
            if spec_id is None:
                raise ValueError(
                    f"workgroup: the shader fixes local_size_{'xyz'[dim]} "
                    f"= {self.interface.local_size[dim]}; declare local_size_{'xyz'[dim]}_id "
                    "to set it here"
                )
            if spec_id in values:
                raise ValueError(
                    f"workgroup and spec both set SpecId {spec_id} (local_size_{'xyz'[dim]}); "
                    "give it once"
                )
            values[spec_id] = size
        return values

    def _local_size(self) -> tuple[int, int, int]:
        ids, sizes = self.interface.local_size_ids, self.interface.local_size
        x, y, z = (
            int(self.spec.get(i, s)) if i is not None else s
            for i, s in zip(ids, sizes, strict=True)
        )
        return x, y, z

    def _check_workgroup(self) -> None:
        info = self.device.info
        for dim, (size, limit) in enumerate(
            zip(self.workgroup, info.max_compute_work_group_size, strict=True)
        ):
            if not 1 <= size <= limit:
                raise ValueError(
                    f"workgroup: local_size_{'xyz'[dim]} = {size} is outside 1..{limit} "
                    "(maxComputeWorkGroupSize)"
                )
        total = math.prod(self.workgroup)
        if total > info.max_compute_work_group_invocations:
            raise ValueError(
                f"workgroup: {self.workgroup} is {total} invocations, more than this device's "
                f"maxComputeWorkGroupInvocations ({info.max_compute_work_group_invocations})"
            )

    def _pipeline(self) -> Pipeline:
        layout = tuple(
            (
                b.binding,
                _UNIFORM_TEXEL_BUFFER if b.binding in self.texel else _DESCRIPTOR_TYPES[b.kind],
            )
            for b in self.bindings
        )
        return self.device.program_pipeline(
            self.code,
            self.name,
            bindings=layout,
            push_size=self.interface.push_size,
            spec=self.spec,
            texel=self.texel,
        )

    # ------------------------------------------------------------------ a dispatch
    def __call__(
        self,
        *buffers: Any,
        groups: int | Sequence[int] = 1,
        push: bytes | None = None,
        **values: Any,
    ) -> None:
        """Dispatch ``groups`` workgroups over ``buffers`` (binding order) with the push
        constants ``values`` (by member name) or ``push`` (the block's bytes)."""
        grid = self._grid(groups)
        push_bytes = self._push_bytes(push, values)
        if len(buffers) != len(self.bindings):
            raise TypeError(
                f"{self.name} takes {len(self.bindings)} buffers (bindings "
                f"{[b.binding for b in self.bindings]}), got {len(buffers)}"
            )
        args = [
            _Argument.of(self, b, x, i)
            for i, (b, x) in enumerate(zip(self.bindings, buffers, strict=True))
        ]
        dev = self.device
        pool = buffer_pool(dev)
        with dev.lock:
            dev.check()
            try:
                bound = [a.upload(pool) for a in args]
                dispatch = Dispatch(self.pipeline, tuple(bound), push_bytes, grid)
                dev.submitter.run([dispatch], read_seconds=False)  # read on demand
                for a in args:
                    a.copy_back()
            finally:
                for a in args:
                    a.give_back(pool)

    def _grid(self, groups: int | Sequence[int]) -> tuple[int, int, int]:
        if type(groups) is int and 1 <= groups <= self._max_groups_x:  # the common case
            return groups, 1, 1
        dims = _ints(groups, "groups")
        if not 1 <= len(dims) <= 3 or any(
            isinstance(g, bool) or not isinstance(g, (int, np.integer)) for g in dims
        ):
            raise TypeError(f"groups must be an int or 1 to 3 ints, got {groups!r}")
        dims += [1] * (3 - len(dims))
        limits = self.device.info.max_compute_work_group_count
        for dim, (g, limit) in enumerate(zip(dims, limits, strict=True)):
            if not 1 <= g <= limit:
                raise ValueError(
                    f"groups[{dim}] = {g} is outside 1..{limit} (maxComputeWorkGroupCount)"
                )
        return int(dims[0]), int(dims[1]), int(dims[2])

    def _push_bytes(self, push: bytes | None, values: Mapping[str, Any]) -> bytes:
        size = self.interface.push_size
        if push is not None:
            if values:
                raise TypeError("give push constants by name or as push=bytes, not both")
            if not isinstance(push, (bytes, bytearray)) or len(push) != size:
                got = len(push) if isinstance(push, (bytes, bytearray)) else type(push).__name__
                raise ValueError(f"push must be {size} bytes (the push-constant block), got {got}")
            return bytes(push)
        if self._push_struct is not None and values.keys() == self._push_names:
            fast = self._pack_scalars(values)
            if fast is not None:
                return fast
        members = {m.name: m for m in self.push}
        unknown = sorted(set(values) - set(members))
        if unknown:
            raise TypeError(
                f"{self.name} has no push constant {unknown[0]!r} "
                f"(it has {sorted(members) or 'none'})"
            )
        missing = sorted(set(members) - set(values))
        if missing:
            raise TypeError(f"{self.name}: push constant {missing[0]!r} is missing")
        if self._push_struct is not None:  # scalars only: one pack of the whole block
            return self._push_struct.pack(*(_member_value(m, values[m.name]) for m in self.push))
        block = bytearray(size)
        for m in self.push:
            block[m.offset : m.offset + m.size] = _pack_member(m, values[m.name])
        return bytes(block)

    def _pack_scalars(self, values: Mapping[str, Any]) -> bytes | None:
        """The block packed in one call, or None where a value needs the checked path
        (a bool, a wrong type, an int out of range: that path names the problem)."""
        items = [values[m.name] for m in self.push]
        if any(type(v) is bool for v in items):
            return None
        assert self._push_struct is not None
        try:
            return self._push_struct.pack(*items)
        except (struct.error, OverflowError, TypeError):
            return None

    def __repr__(self) -> str:
        shape = f"bindings={len(self.bindings)}, workgroup={self.workgroup}"
        return f"vkcore.Program({self.name}, {shape})"


# ---------------------------------------------------------------------- arguments
class _Argument:
    """One positional buffer of a call: a Tensor bound as is, or a numpy array staged in a
    pooled buffer (copied back after the dispatch when the binding is writable)."""

    def __init__(
        self,
        binding: reflect.Binding,
        tensor: Tensor | None,
        array: np.ndarray | None,
        write_back: bool,
    ) -> None:
        self.binding = binding
        self.tensor = tensor
        self.array = array
        self.write_back = write_back
        self.staged: Buffer | None = None

    @classmethod
    def of(cls, prog: Program, b: reflect.Binding, x: Any, index: int) -> _Argument:
        plain = type(x) is np.ndarray and x.flags.c_contiguous and x.dtype != object
        if (
            plain
            and _size_problem(prog, b, x.nbytes) is None
            and (x.flags.writeable or not b.writable)
        ):
            return cls(b, None, x, b.writable)  # the common case: nothing to say
        what = f"buffer {index} (binding {b.binding}{' ' + b.name if b.name else ''})"
        if isinstance(x, Tensor):
            if x.device is not prog.device:
                raise ValueError(f"{what} is a Tensor on another device")
            if x.buffer is None or not x.buffer.alive:
                raise ValueError(f"{what} is an empty or released Tensor")
            _check_size(prog, b, x.buffer.nbytes, what)
            return cls(b, x, None, False)
        if b.writable:
            if not isinstance(x, np.ndarray):
                raise TypeError(
                    f"{what} is written by the shader: pass a numpy array (or a Tensor) "
                    f"to take the result, got {type(x).__name__}"
                )
            if not x.flags.writeable or not x.flags.c_contiguous:
                raise ValueError(
                    f"{what} is written by the shader: the numpy array must be writable "
                    "and C-contiguous to take the result"
                )
            arr = x
        else:
            if isinstance(x, (str, bytes, bytearray, memoryview)):
                raise TypeError(
                    f"{what} must be a numpy array or a vkcore.Tensor, got {type(x).__name__}"
                )
            try:
                arr = np.ascontiguousarray(x)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{what} must be a numpy array or a vkcore.Tensor: {exc}") from None
            if arr.dtype == object:
                raise TypeError(f"{what} must be a numeric numpy array or a vkcore.Tensor")
        _check_size(prog, b, arr.nbytes, what)
        return cls(b, None, arr, b.writable)

    def upload(self, pool: Any) -> Buffer:
        if self.tensor is not None:
            assert self.tensor.buffer is not None
            return self.tensor.buffer
        assert self.array is not None
        self.staged = pool.acquire(self.array.nbytes)
        self.staged.write(self.array)
        return self.staged

    def copy_back(self) -> None:
        if self.write_back and self.staged is not None and self.array is not None:
            self.staged.read(self.array)

    def give_back(self, pool: Any) -> None:
        if self.staged is not None:
            pool.release(self.staged)
            self.staged = None


def _size_problem(prog: Program, b: reflect.Binding, nbytes: int) -> str | None:
    """What is wrong with a buffer of ``nbytes`` for binding ``b``, or None if it fits
    (the binding rules of the module docstring, in this one place)."""
    if nbytes == 0:
        return "empty (a Vulkan buffer holds at least one byte)"
    fmt = prog.texel.get(b.binding)
    if fmt is not None:
        texel = _TEXEL_BYTES[fmt]
        return (
            None
            if nbytes % texel == 0
            else f"{nbytes} bytes is not whole {fmt} texels ({texel} bytes)"
        )
    if nbytes < b.fixed_bytes:
        return f"{nbytes} bytes is smaller than the block's fixed part ({b.fixed_bytes} bytes)"
    if b.stride and (nbytes - b.fixed_bytes) % b.stride:
        return (
            f"{nbytes} bytes is not the block's {b.fixed_bytes} fixed bytes plus whole "
            f"elements of {b.stride} bytes"
        )
    limit = UNIFORM_BLOCK_LIMIT if b.kind == reflect.UNIFORM_BUFFER else prog.max_binding
    if nbytes > limit:
        return f"{nbytes} bytes is more than one binding may cover ({limit} bytes)"
    return None


def _check_size(prog: Program, b: reflect.Binding, nbytes: int, what: str) -> None:
    problem = _size_problem(prog, b, nbytes)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")


def _pack_member(m: reflect.PushMember, value: Any) -> bytes:
    items = (
        [value]
        if m.count == 1
        else list(np.asarray(value).reshape(-1))
        if _is_sequence(value)
        else None
    )
    if items is None or len(items) != m.count:
        raise TypeError(f"push constant {m.name!r} takes {m.count} {m.kind} values, got {value!r}")
    return b"".join(struct.pack(_PACK[m.kind], _member_value(m, v)) for v in items)


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


def _member_value(m: reflect.PushMember, v: Any, what: str = "") -> int | float:
    """``v`` checked against the member's type (``what`` names it in errors)."""
    what = what or f"push constant {m.name!r}"
    if m.kind == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{what} is a float, got {type(v).__name__}")
        # inf and NaN are float32 values; a finite number beyond float32 is not.
        too_big = abs(int(v)) > _FLOAT32_MAX if isinstance(v, (int, np.integer)) else False
        f = math.inf if too_big else float(v)
        if too_big or (math.isfinite(f) and abs(f) > _FLOAT32_MAX):
            raise ValueError(f"{what} (float32) must be within +-{_FLOAT32_MAX:.8g}, got {v}")
        return f
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} is an {m.kind}, got {type(v).__name__} {v!r}")
    lo, hi = _INT_RANGE[m.kind]
    if not lo <= int(v) <= hi:
        raise ValueError(f"{what} ({m.kind}) must be in {lo}..{hi}, got {v}")
    return int(v)


# ---------------------------------------------------------------------- construction helpers
def _code(
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
            spirv.check_spirv(bytes(blob))
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


def _workgroup_dims(workgroup: int | Sequence[int] | None) -> list[int | None]:
    if workgroup is None:
        return [None, None, None]
    dims = _ints(workgroup, "workgroup")
    if not 1 <= len(dims) <= 3 or any(
        isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in dims
    ):
        raise TypeError(f"workgroup must be an int or 1 to 3 ints, got {workgroup!r}")
    return [int(d) for d in dims] + [None] * (3 - len(dims))


def _ints(value: Any, name: str) -> list[Any]:
    """``value`` as a list of its items (one int, or a sequence), else a TypeError."""
    if isinstance(value, (int, np.integer)):
        return [value]
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or 1 to 3 ints, got {value!r}") from None


def _spec_value(const: reflect.SpecConstant, value: Any) -> int | float:
    """The value as the pipeline takes it: ints as their 32-bit pattern, floats as float."""
    label = const.name or f"SpecId {const.id}"
    if const.kind == "bool":
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"spec: {label} is a bool, got {type(value).__name__}")
        return int(bool(value))
    member = reflect.PushMember(label, 0, const.kind)
    number = _member_value(member, value, f"spec: {label}")
    if const.kind == "int":
        return struct.unpack("<I", struct.pack("<i", int(number)))[0]
    return number


def _texel_formats(
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
                f"texel={{{number}: 'rgba32f'}} (one of {sorted(_TEXEL_BYTES)})"
            )
        if fmt not in device.info.texel_formats:
            raise ValueError(
                f"texel: format {fmt!r} for binding {number} is not readable as a uniform "
                f"texel buffer on this device (it offers {sorted(device.info.texel_formats)})"
            )
    return formats
