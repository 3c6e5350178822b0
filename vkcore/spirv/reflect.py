"""What a compute shader's SPIR-V declares: descriptor bindings, push constants,
specialization constants and the local size, read from the module's own instructions.

A small reader of the decorations and types glslang emits, rather than SPIRV-Cross: an
installed wheel must reflect without any native tool, the reader is one walk over the
words (microseconds for vkcore's shaders, where starting a ``spirv-cross`` process costs
milliseconds), and a compute shader's interface needs only a handful of opcodes. What it
does not understand (descriptor arrays, nested push-constant structs, 64-bit or 8/16-bit
push members) it reports as such instead of guessing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from vkcore.spirv.reflect_element import element_of

# A size that specialization may change: an int, ("spec", SpecId) (that constant's value),
# or (operation, a, b) with an operation of SPEC_OPS' names; None where unknown.
Size = Any

# Opcodes
_OP_NAME, _OP_MEMBER_NAME, _OP_ENTRY_POINT, _OP_EXECUTION_MODE, _OP_FUNCTION = 5, 6, 15, 16, 54
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR = 20, 21, 22, 23
_OP_TYPE_MATRIX, _OP_TYPE_IMAGE, _OP_TYPE_SAMPLED_IMAGE, _OP_EXECUTION_MODE_ID = 24, 25, 27, 331
_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY, _OP_TYPE_STRUCT, _OP_TYPE_POINTER = 28, 29, 30, 32
_OP_CONSTANT, _OP_SPEC_TRUE, _OP_SPEC_FALSE, _OP_SPEC, _OP_SPEC_COMPOSITE = 43, 48, 49, 50, 51
_OP_SPEC_OP, _OP_COMPOSITE_EXTRACT, _OP_CAPABILITY = 52, 81, 17
_OP_CONSTANT_COMPOSITE, _OP_VARIABLE, _OP_DECORATE, _OP_MEMBER_DECORATE = 44, 59, 71, 72
_TYPE_OPS = frozenset(range(_OP_TYPE_BOOL, _OP_TYPE_POINTER + 1))  # OpTypeBool .. Pointer
_CONSTANT_OPS = frozenset((_OP_CONSTANT, _OP_CONSTANT_COMPOSITE, _OP_SPEC_TRUE, _OP_SPEC_FALSE))
_CONSTANT_OPS |= {_OP_SPEC, _OP_SPEC_COMPOSITE, _OP_SPEC_OP}
# The integer operations of OpSpecConstantOp an array length is made of (a workgroup
# array of ROWS * gl_WorkGroupSize.x), by opcode; an expression names them so.
SPEC_OPS = {128: "add", 130: "sub", 132: "mul", 134: "div", 135: "div", 137: "mod"}
SPEC_OPS |= {194: "shr", 196: "shl", 197: "or", 198: "xor", 199: "and"}
_CONVERSIONS = frozenset((113, 114))  # OpUConvert, OpSConvert: the value unchanged
# Decorations
_SPEC_ID, _BLOCK, _BUFFER_BLOCK, _ARRAY_STRIDE, _BUILTIN = 1, 2, 3, 6, 11
_NON_WRITABLE, _NON_READABLE, _BINDING, _DESCRIPTOR_SET, _OFFSET = 24, 25, 33, 34, 35
_WORKGROUP_SIZE, _LOCAL_SIZE, _LOCAL_SIZE_ID = 25, 17, 38  # a BuiltIn; execution modes
# Storage classes; the Dim of a texel buffer
_UNIFORM_CONSTANT, _UNIFORM, _PUSH_CONSTANT, _STORAGE_BUFFER, _DIM_BUFFER = 0, 2, 9, 12, 5
_WORKGROUP = 4

STORAGE_BUFFER = "storage_buffer"
UNIFORM_BUFFER = "uniform_buffer"
UNIFORM_TEXEL_BUFFER = "uniform_texel_buffer"
STORAGE_TEXEL_BUFFER = "storage_texel_buffer"


class ReflectionError(ValueError):
    """The module is not a compute shader this reader understands (says what is not)."""


@dataclass(frozen=True)
class Binding:
    """One descriptor binding. ``fixed_bytes`` is the block's size up to its runtime
    array (the whole block without one) and ``stride`` the runtime array's element
    stride (0 without one); texel buffers have neither. ``element``: the block's one scalar
    type as a numpy dtype name, "" if it mixes them (:mod:`vkcore.spirv.reflect_element`)."""

    set: int
    binding: int
    kind: str
    name: str
    readonly: bool
    writeonly: bool
    fixed_bytes: int = 0
    stride: int = 0
    used: bool = True  # named by some instruction in a function: statically used
    element: str = ""

    @property
    def writable(self) -> bool:
        return not self.readonly

    @property
    def access(self) -> str:
        """What a dispatch may do to the bound buffer, as the validation layer counts it:
        "none" (never named in the code), "read" (readonly) or "write"."""
        return "none" if not self.used else "read" if self.readonly else "write"


@dataclass(frozen=True)
class PushMember:
    """A push-constant block member: ``kind`` 'int', 'uint' or 'float' (32-bit), with
    ``count`` components (1 for a scalar, n for a vector or array)."""

    name: str
    offset: int
    kind: str
    count: int = 1

    @property
    def size(self) -> int:
        return 4 * self.count


@dataclass(frozen=True)
class SpecConstant:
    """A specialization constant: its SpecId, name, type ('bool', 'int', 'uint', 'float')
    of ``bits`` bits (8, 16, 32 or 64; a bool is a 32-bit VkBool32) and the shader's
    default value."""

    id: int
    name: str
    kind: str
    default: Any
    bits: int = 32


@dataclass(frozen=True)
class Interface:
    bindings: tuple[Binding, ...]
    push: tuple[PushMember, ...]
    push_size: int
    spec: tuple[SpecConstant, ...]
    local_size: tuple[int, int, int]
    # Per dimension, the SpecId that sets it (local_size_x_id), or None where fixed.
    local_size_ids: tuple[int | None, int | None, int | None]
    entry_point: str = "main"
    # Bytes of the Workgroup (``shared``) variables, at least: an int, or an expression of
    # specialization constants (:data:`Size`) where an array length depends on them;
    # None where a length is made by an operation this reader does not evaluate.
    shared_bytes: Size = 0
    # The OpCapability operands, in module order (some need a device feature).
    capabilities: tuple[int, ...] = ()


@dataclass
class _Module:
    names: dict[int, str] = field(default_factory=dict)
    member_names: dict[tuple[int, int], str] = field(default_factory=dict)
    decorations: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    member_decorations: dict[tuple[int, int], dict[int, list[int]]] = field(default_factory=dict)
    types: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # id -> (op, operands)
    constants: dict[int, tuple[int, int, list[int]]] = field(default_factory=dict)
    variables: list[tuple[int, int, int]] = field(default_factory=list)  # (type, id, class)
    # Per function: its LocalSize and LocalSizeId execution modes (a module may have
    # several entry points; the pipeline runs "main").
    local_sizes: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    local_size_id_sets: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    compute_entries: list[tuple[str, int]] = field(default_factory=list)  # (name, function)
    capabilities: list[int] = field(default_factory=list)
    used: set[int] = field(default_factory=set)  # ids the functions' instructions name


def _string(words: list[int]) -> str:
    raw = struct.pack(f"<{len(words)}I", *words)
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _parse(code: bytes) -> _Module:
    if len(code) < 20 or len(code) % 4:
        raise ReflectionError(f"SPIR-V of {len(code)} bytes: not whole 32-bit words")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    if words[0] != 0x07230203:
        raise ReflectionError(f"not SPIR-V (magic 0x{words[0]:08x}; big-endian is not read)")
    mod, at, in_functions = _Module(), 5, False
    while at < len(words):
        count, op = words[at] >> 16, words[at] & 0xFFFF
        if count == 0 or at + count > len(words):
            raise ReflectionError(f"SPIR-V instruction at word {at} runs past the end")
        in_functions = in_functions or op == _OP_FUNCTION
        # Every operand word in a function, literals too: a superset of the uses (a variable
        # reached through a parameter or OpArrayLength is still named), never missing one.
        if in_functions:
            mod.used.update(words[at + 1 : at + count])
        else:
            _record(mod, op, list(words[at + 1 : at + count]))
        at += count
    return mod


def _record(mod: _Module, op: int, args: list[int]) -> None:  # noqa: C901 - one opcode table
    if op == _OP_CAPABILITY and args:
        mod.capabilities.append(args[0])
    elif op == _OP_NAME:
        mod.names[args[0]] = _string(args[1:])
    elif op == _OP_MEMBER_NAME:
        mod.member_names[(args[0], args[1])] = _string(args[2:])
    elif op == _OP_DECORATE:
        mod.decorations.setdefault(args[0], {})[args[1]] = args[2:]
    elif op == _OP_MEMBER_DECORATE:
        mod.member_decorations.setdefault((args[0], args[1]), {})[args[2]] = args[3:]
    elif op == _OP_ENTRY_POINT and len(args) >= 3 and args[0] == 5:  # GLCompute
        mod.compute_entries.append((_string(args[2:]), args[1]))
    elif op in (_OP_EXECUTION_MODE, _OP_EXECUTION_MODE_ID) and len(args) >= 5:
        if args[1] == _LOCAL_SIZE:
            mod.local_sizes[args[0]] = (args[2], args[3], args[4])
        elif args[1] == _LOCAL_SIZE_ID:
            mod.local_size_id_sets[args[0]] = (args[2], args[3], args[4])
    elif op in _TYPE_OPS:
        mod.types[args[0]] = (op, args[1:])
    elif op in _CONSTANT_OPS:
        mod.constants[args[1]] = (op, args[0], args[2:])
    elif op == _OP_VARIABLE:
        mod.variables.append((args[0], args[1], args[2]))


def reflect(code: bytes) -> Interface:
    """The interface of a GLCompute SPIR-V module (``code``: its little-endian bytes)."""
    mod = _parse(code)
    if not mod.compute_entries:
        raise ReflectionError("the module has no GLCompute entry point")
    # The pipeline runs "main" (validation requires it); its execution modes only.
    entry, function = next(
        (e for e in mod.compute_entries if e[0] == "main"), mod.compute_entries[0]
    )
    spec = _spec_constants(mod)
    size, ids = _local_size(mod, function)
    push, push_size = _push_constants(mod)
    shared = _shared_bytes(mod)
    return Interface(
        bindings=_bindings(mod),
        push=push,
        push_size=push_size,
        spec=spec,
        local_size=size,
        local_size_ids=ids,
        entry_point=entry,
        shared_bytes=shared,
        capabilities=tuple(mod.capabilities),
    )


# --------------------------------------------------------------------------- types
def _scalar(mod: _Module, type_id: int) -> tuple[str, int]:
    """('int' | 'uint' | 'float' | 'bool', bits) of a scalar type."""
    op, args = mod.types[type_id]
    if op == _OP_TYPE_INT:
        return ("int" if args[1] else "uint"), args[0]
    if op == _OP_TYPE_FLOAT:
        return "float", args[0]
    if op == _OP_TYPE_BOOL:
        return "bool", 32
    raise ReflectionError(f"type %{type_id} is not a scalar")


def _constant_value(mod: _Module, const_id: int) -> int:
    op, _type, args = mod.constants[const_id]
    if op != _OP_CONSTANT:
        raise ReflectionError(f"%{const_id} is not a plain constant (array length?)")
    return args[0]


def _size_of(mod: _Module, type_id: int, stride: int = 0) -> int:
    """Bytes a value of ``type_id`` takes in a block (explicit layout: Offset/ArrayStride)."""
    op, args = mod.types[type_id]
    if op in (_OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_BOOL):
        return _scalar(mod, type_id)[1] // 8
    if op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
        return args[1] * _size_of(mod, args[0])
    if op == _OP_TYPE_ARRAY:
        stride = _decoration(mod, type_id, _ARRAY_STRIDE) or _size_of(mod, args[0])
        return stride * _constant_value(mod, args[1])
    if op == _OP_TYPE_STRUCT:
        ends = [
            _member_offset(mod, type_id, i) + _size_of(mod, member)
            for i, member in enumerate(args)
            if mod.types[member][0] != _OP_TYPE_RUNTIME_ARRAY
        ]
        return max(ends, default=0)
    raise ReflectionError(f"type %{type_id} (opcode {op}) has no size in a block")


def _decoration(mod: _Module, target: int, deco: int) -> int | None:
    values = mod.decorations.get(target, {}).get(deco)
    if values is None:
        return None
    return values[0] if values else 1


def _member_offset(mod: _Module, struct_id: int, index: int) -> int:
    offset = mod.member_decorations.get((struct_id, index), {}).get(_OFFSET)
    if offset is None:
        raise ReflectionError(f"member {index} of block %{struct_id} has no Offset")
    return offset[0]


def _pointee(mod: _Module, pointer_type: int) -> int:
    op, args = mod.types[pointer_type]
    if op != _OP_TYPE_POINTER:
        raise ReflectionError(f"%{pointer_type} is not a pointer type")
    return args[1]


# --------------------------------------------------------------------------- bindings
def _bindings(mod: _Module) -> tuple[Binding, ...]:
    out = []
    for type_id, var_id, storage in mod.variables:
        if storage not in (_UNIFORM_CONSTANT, _UNIFORM, _STORAGE_BUFFER):
            continue
        binding = _decoration(mod, var_id, _BINDING)
        if binding is None:
            continue
        target = _pointee(mod, type_id)
        if mod.types[target][0] in (_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY):
            raise ReflectionError(f"binding {binding} is an array of descriptors (not supported)")
        out.append(_binding(mod, var_id, storage, target, binding))
    out.sort(key=lambda b: (b.set, b.binding))
    return tuple(out)


def _binding(mod: _Module, var_id: int, storage: int, target: int, binding: int) -> Binding:
    dset = _decoration(mod, var_id, _DESCRIPTOR_SET) or 0
    op, args = mod.types[target]
    if op == _OP_TYPE_STRUCT:
        kind = STORAGE_BUFFER
        if storage == _UNIFORM and _decoration(mod, target, _BUFFER_BLOCK) is None:
            kind = UNIFORM_BUFFER
        readonly, writeonly = _block_access(mod, var_id, target, len(args))
        readonly = readonly or kind == UNIFORM_BUFFER  # a shader cannot write one
        fixed, stride = _block_extent(mod, target, args)
        name, used = mod.names.get(var_id) or mod.names.get(target, ""), var_id in mod.used
        element = element_of(mod.types, target)
        return Binding(dset, binding, kind, name, readonly, writeonly, fixed, stride, used, element)
    if op == _OP_TYPE_SAMPLED_IMAGE:
        op, args = mod.types[args[0]]
    if op == _OP_TYPE_IMAGE and args[1] == _DIM_BUFFER:
        sampled = args[5]  # 1: sampled (textureBuffer), 2: storage (imageBuffer)
        kind = UNIFORM_TEXEL_BUFFER if sampled == 1 else STORAGE_TEXEL_BUFFER
        readonly = sampled == 1 or _decoration(mod, var_id, _NON_WRITABLE) is not None
        writeonly = _decoration(mod, var_id, _NON_READABLE) is not None
        name, used = mod.names.get(var_id, ""), var_id in mod.used
        return Binding(dset, binding, kind, name, readonly, writeonly, used=used)
    raise ReflectionError(f"binding {binding}: a descriptor kind compute kernels here do not use")


def _block_access(mod: _Module, var_id: int, struct_id: int, members: int) -> tuple[bool, bool]:
    """readonly / writeonly: on the variable, or on every member of the block."""

    def everywhere(deco: int) -> bool:
        if _decoration(mod, var_id, deco) is not None:
            return True
        return members > 0 and all(
            deco in mod.member_decorations.get((struct_id, i), {}) for i in range(members)
        )

    return everywhere(_NON_WRITABLE), everywhere(_NON_READABLE)


def _block_extent(mod: _Module, struct_id: int, members: list[int]) -> tuple[int, int]:
    """(fixed bytes, runtime-array stride) of a buffer block."""
    if members and mod.types[members[-1]][0] == _OP_TYPE_RUNTIME_ARRAY:
        last = len(members) - 1
        runtime = members[-1]
        stride = _decoration(mod, runtime, _ARRAY_STRIDE)
        element = mod.types[runtime][1][0]
        return _member_offset(mod, struct_id, last), stride or _size_of(mod, element)
    return _size_of(mod, struct_id), 0


# --------------------------------------------------------------------------- push constants
def _push_constants(mod: _Module) -> tuple[tuple[PushMember, ...], int]:
    blocks = [_pointee(mod, t) for t, _v, storage in mod.variables if storage == _PUSH_CONSTANT]
    if not blocks:
        return (), 0
    struct_id = blocks[0]
    members = []
    for i, member in enumerate(mod.types[struct_id][1]):
        name = mod.member_names.get((struct_id, i), f"member{i}")
        kind, count = _push_type(mod, member, name)
        members.append(PushMember(name, _member_offset(mod, struct_id, i), kind, count))
    return tuple(members), _size_of(mod, struct_id)


def _push_type(mod: _Module, type_id: int, name: str) -> tuple[str, int]:
    op, args = mod.types[type_id]
    count = 1
    if op == _OP_TYPE_VECTOR:
        type_id, count = args[0], args[1]
    elif op == _OP_TYPE_ARRAY:
        stride = _decoration(mod, type_id, _ARRAY_STRIDE)
        type_id, count = args[0], _constant_value(mod, args[1])
        if stride not in (None, 4):
            raise ReflectionError(f"push member {name}: an array with stride {stride}")
    if mod.types[type_id][0] not in (_OP_TYPE_INT, _OP_TYPE_FLOAT):
        raise ReflectionError(f"push member {name}: only 32-bit scalars, vectors and arrays")
    kind, bits = _scalar(mod, type_id)
    if bits != 32:
        raise ReflectionError(f"push member {name}: {bits}-bit {kind} (only 32-bit)")
    return kind, count


# --------------------------------------------------------------------------- spec constants
def _spec_constants(mod: _Module) -> tuple[SpecConstant, ...]:
    out = []
    for const_id, (op, type_id, args) in mod.constants.items():
        spec_id = _decoration(mod, const_id, _SPEC_ID)
        if spec_id is None or op == _OP_SPEC_COMPOSITE:
            continue
        kind, bits = _scalar(mod, type_id)
        if op == _OP_SPEC_TRUE:
            default: Any = True
        elif op == _OP_SPEC_FALSE:
            default = False
        else:
            default = _literal(kind, bits, args)
        out.append(SpecConstant(spec_id, mod.names.get(const_id, ""), kind, default, bits))
    out.sort(key=lambda s: s.id)
    return tuple(out)


def _literal(kind: str, bits: int, words: list[int]) -> int | float:
    """A numeric literal of a scalar type: one word (narrower types in its low bits), or
    two, low-order word first, for a 64-bit type."""
    if bits not in (8, 16, 32, 64) or len(words) < (2 if bits == 64 else 1):
        raise ReflectionError(f"a {bits}-bit {kind} constant of {len(words)} words")
    raw = words[0] | (words[1] << 32 if bits == 64 else 0)
    raw &= (1 << bits) - 1
    if kind == "float":
        if bits == 8:
            raise ReflectionError("an 8-bit float constant")
        fmt = {16: "<e", 32: "<f", 64: "<d"}[bits]
        return float(struct.unpack(fmt, raw.to_bytes(bits // 8, "little"))[0])
    if kind == "int" and raw >> (bits - 1):
        return raw - (1 << bits)
    return raw


LocalIds = tuple[int | None, int | None, int | None]


def _local_size(mod: _Module, function: int) -> tuple[tuple[int, int, int], LocalIds]:
    """The local size of the entry point ``function`` and, per dimension, the SpecId that
    sets it (or None)."""
    for const_id, (_op, _type, args) in mod.constants.items():
        if _decoration(mod, const_id, _BUILTIN) == _WORKGROUP_SIZE:
            return _dimensions(mod, args[:3])
    if function in mod.local_size_id_sets:
        return _dimensions(mod, list(mod.local_size_id_sets[function]))
    if function not in mod.local_sizes:
        raise ReflectionError("the entry point declares no local size")
    return mod.local_sizes[function], (None, None, None)


def _dimensions(mod: _Module, const_ids: list[int]) -> tuple[tuple[int, int, int], LocalIds]:
    """Values and SpecIds of the three constants that make the local size."""
    x, y, z = (mod.constants[c][2][0] for c in const_ids)
    ix, iy, iz = (_decoration(mod, c, _SPEC_ID) for c in const_ids)
    return (x, y, z), (ix, iy, iz)


# --------------------------------------------------------------------------- shared memory
def _shared_bytes(mod: _Module) -> Size:
    """The Workgroup variables' bytes: the sum of their types' sizes without padding (no
    implementation takes less; explicit Offsets are followed where a block has them)."""
    total: Size = 0
    for type_id, _var, storage in mod.variables:
        if storage == _WORKGROUP:
            total = _combine("add", total, _natural_size(mod, _pointee(mod, type_id)))
    return total


def _natural_size(mod: _Module, type_id: int) -> Size:
    op, args = mod.types[type_id]
    if op in (_OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_BOOL):
        return _scalar(mod, type_id)[1] // 8
    if op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
        return _combine("mul", args[1], _natural_size(mod, args[0]))
    if op == _OP_TYPE_ARRAY:
        element = _decoration(mod, type_id, _ARRAY_STRIDE) or _natural_size(mod, args[0])
        return _combine("mul", _length(mod, args[1]), element)
    if op == _OP_TYPE_STRUCT:
        offsets = [
            _OFFSET in mod.member_decorations.get((type_id, i), {}) for i in range(len(args))
        ]
        if args and all(offsets):  # an explicit layout (workgroupMemoryExplicitLayout)
            return _size_of(mod, type_id)
        total: Size = 0
        for member in args:
            total = _combine("add", total, _natural_size(mod, member))
        return total
    raise ReflectionError(f"a Workgroup variable of type %{type_id} (opcode {op})")


def _length(mod: _Module, const_id: int) -> Size:
    """An array length: a constant, a specialization constant, or an integer expression
    of them (OpSpecConstantOp); None where it is made another way."""
    if const_id not in mod.constants:
        return None
    op, type_id, args = mod.constants[const_id]
    if op == _OP_CONSTANT:
        kind, bits = _scalar(mod, type_id)
        return int(_literal(kind, bits, args))
    if op == _OP_SPEC:
        spec_id = _decoration(mod, const_id, _SPEC_ID)
        return ("spec", spec_id) if spec_id is not None else None
    if op != _OP_SPEC_OP or not args:
        return None
    code, operands = args[0], args[1:]
    if code in _CONVERSIONS and len(operands) == 1:
        return _length(mod, operands[0])
    if code == _OP_COMPOSITE_EXTRACT and len(operands) == 2:  # gl_WorkGroupSize.x
        composite = mod.constants.get(operands[0])
        if composite is None or composite[0] not in (_OP_SPEC_COMPOSITE, _OP_CONSTANT_COMPOSITE):
            return None
        parts = composite[2]
        return _length(mod, parts[operands[1]]) if operands[1] < len(parts) else None
    if code in SPEC_OPS and len(operands) == 2:
        return _combine(SPEC_OPS[code], _length(mod, operands[0]), _length(mod, operands[1]))
    return None


def _combine(operation: str, a: Size, b: Size) -> Size:
    """``a operation b``, folded to an int when both are ints; None when either is."""
    if a is None or b is None:
        return None
    if isinstance(a, int) and isinstance(b, int):
        return evaluate((operation, a, b), {})
    if operation == "add" and (a == 0 or b == 0):
        return b if a == 0 else a
    return (operation, a, b)


def evaluate(size: Size, spec: dict[int, int]) -> int | None:
    """The value of a :data:`Size` with the specialization constants ``spec`` (SpecId ->
    value, every one the expression names); None for an unknown size or an operation
    that has no value (a division by zero)."""
    if size is None or isinstance(size, int):
        return size
    if size[0] == "spec":
        return int(spec[size[1]])
    a, b = evaluate(size[1], spec), evaluate(size[2], spec)
    if a is None or b is None:
        return None
    operation = size[0]
    if operation in ("div", "mod") and b == 0:
        return None
    if operation in ("shl", "shr") and not 0 <= b < 64:
        return None
    return {
        "add": lambda: a + b,
        "sub": lambda: a - b,
        "mul": lambda: a * b,
        "div": lambda: a // b,
        "mod": lambda: a % b,
        "shr": lambda: a >> b,
        "shl": lambda: a << b,
        "or": lambda: a | b,
        "xor": lambda: a ^ b,
        "and": lambda: a & b,
    }[operation]()
