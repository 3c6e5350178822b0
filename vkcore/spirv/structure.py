"""The structural checks of users' SPIR-V where ``spirv-val`` is not installed: a subset of
what it checks, chosen to refuse what crashes a driver at pipeline creation or dispatch
(one walk over the words; the list is in docs/programs.md#validation).

Anything this reader does not know in the module's declarations (an unknown decoration,
an instruction out of its section) is refused rather than passed on: where ``spirv-val``
is absent, vkcore cannot tell a rare valid module from a damaged one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

MAGIC = 0x07230203
MAX_ID_BOUND = 4_194_304  # above the Vulkan minimum of maxIdBound... never needed by shaders

# Opcodes
_NOP, _UNDEF, _SOURCE_CONTINUED, _SOURCE, _SOURCE_EXTENSION, _NAME, _MEMBER_NAME = (
    0,
    1,
    2,
    3,
    4,
    5,
    6,
)
_STRING, _LINE, _EXTENSION, _EXT_INST_IMPORT, _EXT_INST, _MEMORY_MODEL = 7, 8, 10, 11, 12, 14
_ENTRY_POINT, _EXECUTION_MODE, _CAPABILITY = 15, 16, 17
_TYPE_VOID, _TYPE_BOOL, _TYPE_INT, _TYPE_FLOAT, _TYPE_VECTOR, _TYPE_MATRIX = 19, 20, 21, 22, 23, 24
_TYPE_IMAGE, _TYPE_SAMPLER, _TYPE_SAMPLED_IMAGE, _TYPE_ARRAY, _TYPE_RUNTIME_ARRAY = (
    25,
    26,
    27,
    28,
    29,
)
_TYPE_STRUCT, _TYPE_POINTER, _TYPE_FUNCTION, _TYPE_FORWARD_POINTER = 30, 32, 33, 39
_CONSTANT_TRUE, _CONSTANT_FALSE, _CONSTANT, _CONSTANT_COMPOSITE, _CONSTANT_NULL = 41, 42, 43, 44, 46
_SPEC_TRUE, _SPEC_FALSE, _SPEC, _SPEC_COMPOSITE, _SPEC_OP = 48, 49, 50, 51, 52
_FUNCTION, _FUNCTION_PARAMETER, _FUNCTION_END, _VARIABLE = 54, 55, 56, 59
_DECORATE, _MEMBER_DECORATE, _DECORATION_GROUP, _GROUP_DECORATE, _GROUP_MEMBER_DECORATE = (
    71,
    72,
    73,
    74,
    75,
)
_LABEL, _NO_LINE, _MODULE_PROCESSED, _EXECUTION_MODE_ID, _DECORATE_ID = 248, 317, 330, 331, 332
_DECORATE_STRING, _MEMBER_DECORATE_STRING = 5632, 5633

# The section of the module's logical layout each declaration belongs to (the SPIR-V
# spec's order); every other opcode belongs in a function body.
_SECTION = {_CAPABILITY: 0, _EXTENSION: 1, _EXT_INST_IMPORT: 2, _MEMORY_MODEL: 3}
_SECTION |= {_ENTRY_POINT: 4, _EXECUTION_MODE: 5, _EXECUTION_MODE_ID: 5}
_SECTION |= dict.fromkeys(
    (_SOURCE_CONTINUED, _SOURCE, _SOURCE_EXTENSION, _NAME, _MEMBER_NAME, _STRING), 6
)
_SECTION[_MODULE_PROCESSED] = 6
_SECTION |= dict.fromkeys(
    (_DECORATE, _MEMBER_DECORATE, _DECORATION_GROUP, _GROUP_DECORATE, _GROUP_MEMBER_DECORATE), 7
)
_SECTION |= {_DECORATE_ID: 7, _DECORATE_STRING: 7, _MEMBER_DECORATE_STRING: 7}
_TYPES = frozenset(range(_TYPE_VOID, _TYPE_FORWARD_POINTER + 1)) - {34, 35, 36, 37, 38}
_CONSTANTS = frozenset(range(_CONSTANT_TRUE, _SPEC_OP + 1)) - {45, 47}
_SECTION |= dict.fromkeys(_TYPES | _CONSTANTS, 8)
_FUNCTIONS = 9
_ANYWHERE = frozenset((_NOP, _LINE, _NO_LINE))
_ALSO_IN_FUNCTIONS = frozenset((_UNDEF, _VARIABLE, _EXT_INST))  # global or local
_STRINGS_AT = {_EXTENSION: 1, _EXT_INST_IMPORT: 2, _ENTRY_POINT: 3, _NAME: 2, _MEMBER_NAME: 3}
_STRINGS_AT |= {_STRING: 2, _SOURCE_EXTENSION: 1, _MODULE_PROCESSED: 1}

# Word counts: (least, most) with the opcode word; None: any length from the least.
_COUNTS: dict[int, tuple[int, int | None]] = {
    _CAPABILITY: (2, 2),
    _EXTENSION: (2, None),
    _EXT_INST_IMPORT: (3, None),
    _MEMORY_MODEL: (3, 3),
    _ENTRY_POINT: (4, None),
    _EXECUTION_MODE: (3, None),
    _EXECUTION_MODE_ID: (3, None),
    _NAME: (3, None),
    _MEMBER_NAME: (4, None),
    _STRING: (3, None),
    _SOURCE: (3, None),
    _DECORATE: (3, None),
    _MEMBER_DECORATE: (4, None),
    _DECORATE_ID: (3, None),
    _DECORATION_GROUP: (2, 2),
    _GROUP_DECORATE: (2, None),
    _GROUP_MEMBER_DECORATE: (2, None),
    _TYPE_VOID: (2, 2),
    _TYPE_BOOL: (2, 2),
    _TYPE_INT: (4, 4),
    _TYPE_FLOAT: (3, 3),
    _TYPE_VECTOR: (4, 4),
    _TYPE_MATRIX: (4, 4),
    _TYPE_IMAGE: (9, 10),
    _TYPE_SAMPLER: (2, 2),
    _TYPE_SAMPLED_IMAGE: (3, 3),
    _TYPE_ARRAY: (4, 4),
    _TYPE_RUNTIME_ARRAY: (3, 3),
    _TYPE_STRUCT: (2, None),
    _TYPE_POINTER: (4, 4),
    _TYPE_FUNCTION: (3, None),
    _TYPE_FORWARD_POINTER: (3, 3),
    _CONSTANT_TRUE: (3, 3),
    _CONSTANT_FALSE: (3, 3),
    _CONSTANT: (4, None),
    _CONSTANT_COMPOSITE: (3, None),
    _CONSTANT_NULL: (3, 3),
    _SPEC_TRUE: (3, 3),
    _SPEC_FALSE: (3, 3),
    _SPEC: (4, None),
    _SPEC_COMPOSITE: (3, None),
    _SPEC_OP: (4, None),
    _VARIABLE: (4, 5),
    _FUNCTION: (5, 5),
    _FUNCTION_PARAMETER: (3, 3),
    _FUNCTION_END: (1, 1),
    _LABEL: (2, 2),
    _UNDEF: (3, 3),
    _EXT_INST: (5, None),
    _NO_LINE: (1, 1),
    _LINE: (4, 4),
}

# The function-body instructions these checks know, by the kind of each operand word:
# T result type, R result id, i an id, l a literal; the last letter repeats to the end
# (so "TRi" is a result then any number of ids). Any other opcode in a body is refused.
_BODY: dict[int, str] = {_NOP: "l", _LINE: "ill", _NO_LINE: "l", _FUNCTION_END: "l"}
_BODY |= {_UNDEF: "TR", _VARIABLE: "TRli", _EXT_INST: "TRili", _LABEL: "R"}
_BODY |= {_FUNCTION_PARAMETER: "TR", 57: "TRi"}  # OpFunctionCall
_BODY |= {61: "TRil", 62: "iil", 63: "iil", 65: "TRi", 66: "TRi", 67: "TRi", 68: "TRil"}
_BODY |= {77: "TRi", 78: "TRi", 79: "TRiil", 80: "TRi", 81: "TRil", 82: "TRiil", 83: "TRi"}
_BODY |= {84: "TRi", 86: "TRi", 95: "TRiili", 98: "TRiili", 99: "iiili", 100: "TRi"}
_BODY |= {104: "TRi", 103: "TRi"}  # OpImageQuerySize(Lod)
_BODY |= dict.fromkeys(range(109, 125), "TRi")  # conversions, OpBitcast
_BODY |= dict.fromkeys(range(126, 153), "TRi")  # arithmetic
_BODY |= dict.fromkeys(range(154, 192), "TRi")  # relational and logical
_BODY |= dict.fromkeys(range(194, 206), "TRi")  # bit operations
_BODY |= {224: "iii", 225: "ii", 227: "TRi", 228: "i"}  # barriers, atomic load and store
_BODY |= dict.fromkeys(range(229, 243), "TRi")  # atomics
_BODY |= {245: "TRi", 246: "iil", 247: "il", 249: "i", 250: "iiil", 251: "iip"}
_BODY |= {252: "l", 253: "l", 254: "i", 255: "l"}
_BODY |= {333: "TRi", 334: "TRi", 335: "TRi", 336: "TRi", 337: "TRi", 338: "TRi"}
_BODY |= {339: "TRi", 340: "TRi", 341: "TRi", 342: "TRili", 343: "TRi", 344: "TRi"}
_BODY |= dict.fromkeys(range(345, 349), "TRi")  # shuffles
_BODY |= dict.fromkeys(range(349, 365), "TRili")  # reductions and scans
_BODY |= {365: "TRi", 366: "TRi"}  # quad operations
_BODY |= {4450: "TRiil", 4451: "TRiil", 4452: "TRiil"}  # integer dot products
_BODY |= {4453: "TRiiil", 4454: "TRiiil", 4455: "TRiiil", 5056: "TRi"}
_TERMINATORS = frozenset((249, 250, 251, 252, 253, 254, 255, 4416))
_ACCESS_CHAINS = frozenset((65, 66))


def _counts(opcodes: Iterable[int], least: int, most: int | None) -> None:
    for op in opcodes:
        _COUNTS[op] = (least, most)


# Word counts of the body instructions (an operand cut off or added crashes a driver).
_counts(range(109, 125), 4, 4)  # conversions: one operand
_counts(range(126, 153), 5, 5)  # arithmetic: two
_counts((126, 127), 4, 4)  # negations: one
_counts(range(154, 192), 5, 5)  # relational and logical: two
_counts((154, 155, 156, 157, 158, 159, 160, 168), 4, 4)  # one
_counts((169,), 6, 6)  # OpSelect
_counts(range(194, 200), 5, 5)  # shifts, and, or, xor
_counts((200, 204, 205), 4, 4)
_counts((201,), 7, 7)
_counts((202, 203), 6, 6)
_counts((61,), 4, 7)  # OpLoad
_counts((62,), 3, 6)  # OpStore
_counts((63,), 3, 7)  # OpCopyMemory
_counts((65, 66), 4, None)  # access chains
_counts((67,), 5, None)
_counts((68,), 5, 5)  # OpArrayLength
_counts((77,), 5, 5)
_counts((78,), 6, 6)
_counts((79,), 5, None)
_counts((80,), 3, None)
_counts((81,), 5, None)
_counts((82,), 6, None)
_counts((83, 84, 100, 103, 104), 4, 4)
_counts((86,), 5, 5)
_counts((95, 98), 5, None)
_counts((99,), 4, None)
_counts((57,), 4, None)  # OpFunctionCall
_counts((224,), 4, 4)
_counts((225,), 3, 3)
_counts((227,), 6, 6)
_counts((228,), 5, 5)
_counts(range(229, 243), 7, 7)  # atomics with a value
_counts((230, 231), 9, 9)  # compare-exchange
_counts((232, 233), 6, 6)  # increment, decrement
_counts((245,), 5, None)  # OpPhi
_counts((246,), 4, None)
_counts((247,), 3, 3)
_counts((249,), 2, 2)
_counts((250,), 4, 6)
_counts((251,), 3, None)
_counts((252, 253, 255), 1, 1)
_counts((254,), 2, 2)
_counts((333,), 4, 4)
_counts((334, 335, 336, 338, 339, 340, 343, 344), 5, 5)
_counts((337, 341, 342, 345, 346, 347, 348, 365, 366), 6, 6)
_counts(range(349, 365), 6, 7)
_counts((4450, 4451, 4452), 5, 6)
_counts((4453, 4454, 4455), 6, 7)
_counts((5056,), 4, 4)

# Decorations vkcore accepts here, and their extra literal or id operands (None: a string).
_DECORATIONS: dict[int, int | None] = {
    0: 0,  # RelaxedPrecision
    1: 1,  # SpecId
    2: 0,  # Block
    3: 0,  # BufferBlock
    4: 0,  # RowMajor
    5: 0,  # ColMajor
    6: 1,  # ArrayStride
    7: 1,  # MatrixStride
    11: 1,  # BuiltIn
    18: 0,  # Invariant
    19: 0,  # Restrict
    20: 0,  # Aliased
    21: 0,  # Volatile
    22: 0,  # Constant
    23: 0,  # Coherent
    24: 0,  # NonWritable
    25: 0,  # NonReadable
    26: 0,  # Uniform
    27: 1,  # UniformId
    33: 1,  # Binding
    34: 1,  # DescriptorSet
    35: 1,  # Offset
    39: 1,  # FPRoundingMode
    40: 1,  # FPFastMathMode
    42: 0,  # NoContraction
    44: 1,  # Alignment
    45: 1,  # MaxByteOffset
    4469: 0,  # NoSignedWrap
    4470: 0,  # NoUnsignedWrap
    5300: 0,  # NonUniform
    5355: 0,  # RestrictPointer
    5356: 0,  # AliasedPointer
    5634: 1,  # CounterBuffer
    5635: None,  # UserSemantic
    5636: None,  # UserTypeGOOGLE
}
_SPEC_ID, _BLOCK, _BUFFER_BLOCK, _ARRAY_STRIDE, _MATRIX_STRIDE, _BUILTIN = 1, 2, 3, 6, 7, 11
_BINDING, _DESCRIPTOR_SET, _OFFSET = 33, 34, 35
# Built-ins a compute shader may read: NumWorkgroups .. LocalInvocationIndex, the
# subgroup ones, the subgroup masks.
_COMPUTE_BUILTINS = frozenset((24, 25, 26, 27, 28, 29, 36, 38, 40, 41)) | frozenset(
    range(4416, 4421)
)
_GL_COMPUTE, _LOGICAL = 5, 0
_MEMORY_MODELS = frozenset((1, 3))  # GLSL450, Vulkan
_DESCRIPTOR_CLASSES = frozenset((0, 2, 12))  # UniformConstant, Uniform, StorageBuffer
_BLOCK_CLASSES = frozenset((2, 9, 12))  # Uniform, PushConstant, StorageBuffer
_LOCAL_SIZE, _LOCAL_SIZE_ID = 17, 38


class StructureError(ValueError):
    """The module fails one of the structural checks (the message says which)."""


@dataclass
class _Module:
    words: tuple[int, ...]
    bound: int
    defs: dict[int, int] = field(default_factory=dict)  # result id -> word index
    ops: dict[int, int] = field(default_factory=dict)  # result id -> opcode
    decorations: list[tuple[int, int, int]] = field(default_factory=list)  # (at, op, count)
    entry_points: list[tuple[int, int]] = field(default_factory=list)
    modes: list[tuple[int, int]] = field(default_factory=list)
    uses: list[tuple[int, int, bool]] = field(default_factory=list)  # (at, id, is a type)
    chains: list[tuple[int, int]] = field(default_factory=list)  # access chains (at, count)
    in_block: bool = False  # after an OpLabel, before its block's terminator

    def at(self, index: int) -> int:
        return self.words[index]

    def define(self, result: int, at: int, op: int) -> None:
        self.check_id(result, at, "result id")
        if result in self.defs:
            raise StructureError(f"instruction at word {at} defines id {result} a second time")
        self.defs[result] = at
        self.ops[result] = op

    def check_id(self, value: int, at: int, what: str) -> None:
        if not 0 < value < self.bound:
            raise StructureError(
                f"instruction at word {at}: {what} {value} is outside the id bound {self.bound}"
            )

    def op_of(self, ident: int) -> int | None:
        return self.ops.get(ident)


def check(code: bytes, max_minor: int = 6) -> None:
    """Refuse ``code`` unless it passes every structural check (:class:`StructureError`
    naming the first failure); ``max_minor``: the newest SPIR-V 1.x the device takes."""
    module = _header(code, max_minor)
    _walk(module)
    _check_uses(module)
    _check_access_chains(module)
    _check_decorations(module)
    _check_blocks(module)
    _check_entry_points(module)
    check_compute_interface(code)


def check_compute_interface(code: bytes) -> None:
    """What spirv-val passes and a driver still fails or crashes on: whole words; an
    ``OpEntryPoint GLCompute "main"`` (the name every pipeline runs); Input and Output
    variables that are built-ins (decorated BuiltIn, or a struct whose members are):
    Vulkan gives a compute shader no other, and one crashed lavapipe. For a module that
    is otherwise well formed (one walk of its declarations)."""
    if len(code) % 4 or len(code) < 20:  # (spirv-val passes a module with a partial word)
        raise StructureError(f"{len(code)} bytes: not whole 32-bit words, or no 5-word header")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    builtin, members, io, types, at = set(), set(), [], {}, 5
    main = False
    while at < len(words):
        count, op = words[at] >> 16, words[at] & 0xFFFF
        if op == _FUNCTION or count == 0:
            break
        operands = words[at + 1 : at + count]
        if op == _ENTRY_POINT and len(operands) >= 3 and operands[0] == _GL_COMPUTE:
            raw = struct.pack(f"<{len(operands) - 2}I", *operands[2:])
            main = main or raw.partition(b"\0")[0] == b"main"
        if op == _DECORATE and len(operands) >= 2 and operands[1] == _BUILTIN:
            builtin.add(operands[0])
        elif op == _MEMBER_DECORATE and len(operands) >= 3 and operands[2] == _BUILTIN:
            members.add(operands[0])
        elif op == _TYPE_POINTER and len(operands) == 3:
            types[operands[0]] = operands[2]
        elif op == _VARIABLE and len(operands) >= 3 and operands[2] in (1, 3):  # Input, Output
            io.append((operands[1], operands[0], at))
        at += count
    for variable, pointer, where in io:
        if variable not in builtin and types.get(pointer) not in members:
            raise StructureError(
                f"variable {variable} (word {where}) is a shader input or output that is "
                "not a built-in: a compute shader has no others"
            )
    if not main:  # (spirv-val passes any entry point; the pipeline runs "main")
        raise StructureError('no OpEntryPoint GLCompute named "main"')


def _header(code: bytes, max_minor: int) -> _Module:
    if len(code) % 4 or len(code) < 20:
        raise StructureError(f"{len(code)} bytes: not whole 32-bit words, or no 5-word header")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    magic, version, _generator, bound, schema = words[:5]
    if magic != MAGIC:
        swapped = " (big-endian words: give little-endian)" if magic == 0x03022307 else ""
        raise StructureError(f"magic number 0x{magic:08x}, not 0x{MAGIC:08x}{swapped}")
    major, minor = (version >> 16) & 0xFF, (version >> 8) & 0xFF
    if version & 0xFF0000FF or major != 1 or minor > max_minor:
        raise StructureError(
            f"version word 0x{version:08x}: this device takes SPIR-V 1.0 to 1.{max_minor}"
        )
    if not 0 < bound <= MAX_ID_BOUND:
        raise StructureError(f"id bound {bound} is outside 1..{MAX_ID_BOUND}")
    if schema != 0:
        raise StructureError(f"schema word {schema}, not 0")
    return _Module(words, bound)


def _walk(m: _Module) -> None:
    """Every instruction within the words, of a valid length, in its section and (in a
    function body) one these checks know; results defined once."""
    words, at, state = m.words, 5, _Order()
    while at < len(words):
        count, op = words[at] >> 16, words[at] & 0xFFFF
        if count == 0:
            raise StructureError(f"a word count of 0 at word {at}")
        if at + count > len(words):
            raise StructureError(
                f"instruction at word {at} (opcode {op}) has {count} words: past the end "
                f"of the {len(words)}-word module"
            )
        _check_count(op, count, at)
        if op in _STRINGS_AT:
            _check_string(words, at, count, _STRINGS_AT[op])
        state.place(op, at)
        if op == _MEMORY_MODEL:
            _check_memory_model(words, at)
        if state.section == _FUNCTIONS:
            _body(m, op, at, count)
        else:
            _define(m, op, at, count)
        at += count
    state.finish()


class _Order:
    """The logical layout: sections in order, one memory model, functions not nested,
    the module ending with OpFunctionEnd."""

    def __init__(self) -> None:
        self.section, self.in_function, self.models, self.last = 0, False, 0, -1

    def place(self, op: int, at: int) -> None:
        self.last = op
        if op in _ANYWHERE:
            return
        wanted = _SECTION.get(op, _FUNCTIONS)
        if op in _ALSO_IN_FUNCTIONS:
            wanted = _FUNCTIONS if self.section == _FUNCTIONS else 8
        if wanted < self.section:
            raise StructureError(
                f"instruction at word {at} (opcode {op}) is out of the module's order"
            )
        self.section = wanted
        self.models += op == _MEMORY_MODEL
        if op == _FUNCTION:
            if self.in_function:
                raise StructureError(f"OpFunction at word {at} inside another function")
            self.in_function = True
        elif op == _FUNCTION_END:
            if not self.in_function:
                raise StructureError(f"OpFunctionEnd at word {at} outside a function")
            self.in_function = False
        elif wanted == _FUNCTIONS and not self.in_function:
            raise StructureError(f"instruction at word {at} (opcode {op}) outside a function")

    def finish(self) -> None:
        if self.models != 1:
            raise StructureError(f"{self.models} OpMemoryModel instructions, not one")
        if self.last != _FUNCTION_END:
            raise StructureError("the module does not end with OpFunctionEnd (cut short?)")


def _check_memory_model(words: tuple[int, ...], at: int) -> None:
    if words[at + 1] != _LOGICAL or words[at + 2] not in _MEMORY_MODELS:
        raise StructureError(
            f"memory model ({words[at + 1]}, {words[at + 2]}) at word {at}: "
            "Vulkan takes Logical addressing with GLSL450 or Vulkan memory"
        )


def _body(m: _Module, op: int, at: int, count: int) -> None:
    """A function-body instruction (OpFunction included): its result defined, its id
    operands kept for :func:`_check_uses`."""
    if op == _FUNCTION:
        _define(m, op, at, count)
        return
    _check_block(m, op, at)
    if op in _ACCESS_CHAINS:
        m.chains.append((at, count))
    kinds = _BODY.get(op)
    if kinds is None:
        raise StructureError(
            f"instruction at word {at}: opcode {op} is not one vkcore's structural checks "
            "know (install spirv-val to validate such a module)"
        )
    for n in range(1, count):
        kind = kinds[min(n - 1, len(kinds) - 1)]
        value = m.words[at + n]
        if kind == "R":
            m.define(value, at, op)
        elif kind == "T":
            m.uses.append((at, value, True))
        elif kind == "i" or (kind == "p" and (n - len(kinds)) % 2):
            m.uses.append((at, value, False))


def _check_block(m: _Module, op: int, at: int) -> None:
    """Instructions of a function come in blocks: an OpLabel, then ends in a terminator."""
    if op in _ANYWHERE or op == _FUNCTION_PARAMETER:
        return
    if op == _FUNCTION_END:
        if m.in_block:
            raise StructureError(f"the block before word {at} ends without a terminator")
    elif op == _LABEL:
        if m.in_block:
            raise StructureError(f"OpLabel at word {at} starts a block inside another block")
        m.in_block = True
    elif not m.in_block:
        raise StructureError(f"instruction at word {at} (opcode {op}) is outside a block")
    elif op in _TERMINATORS:
        m.in_block = False


def _check_access_chains(m: _Module) -> None:
    """An access chain walks its base's pointee type: struct members by constants in
    range, arrays, vectors and matrices by their elements, and nothing further."""
    words = m.words
    for at, count in m.chains:
        pointer = _type_of(m, words[at + 3], at)
        if m.op_of(pointer) != _TYPE_POINTER:
            raise StructureError(f"access chain at word {at}: its base is not a pointer")
        current = words[m.defs[pointer] + 3]
        for index in words[at + 4 : at + count]:
            index_type = _type_of(m, index, at)
            if m.op_of(index_type) != _TYPE_INT:
                raise StructureError(f"access chain at word {at}: index {index} is no integer")
            current = _element(m, current, index, at)
        result = words[at + 1]
        storage = words[m.defs[pointer] + 2]
        if m.op_of(result) != _TYPE_POINTER or words[m.defs[result] + 2 : m.defs[result] + 4] != (
            storage,
            current,
        ):
            raise StructureError(
                f"access chain at word {at}: its result type is not a pointer to the type "
                "it selects, in its base's storage class"
            )


def _type_of(m: _Module, ident: int, at: int) -> int:
    op = m.op_of(ident)
    if op is None or op in _TYPES or op == _LABEL:
        raise StructureError(f"instruction at word {at}: {ident} is not a value")
    return m.words[m.defs[ident] + 1]


def _element(m: _Module, type_id: int, index: int, at: int) -> int:
    """The type ``index`` selects in ``type_id`` (an access chain at word ``at``)."""
    words, op = m.words, m.op_of(type_id)
    if op is None:
        raise StructureError(f"access chain at word {at}: type {type_id} is never defined")
    where = m.defs[type_id]
    if op == _TYPE_STRUCT:
        members = (words[where] >> 16) - 2
        const = m.defs.get(index)
        value = words[const + 3] if const is not None and m.op_of(index) == _CONSTANT else None
        if value is None or value >= members:
            raise StructureError(
                f"access chain at word {at}: member index {index} is not a constant below "
                f"the struct's {members} members"
            )
        return words[where + 2 + value]
    if op in (_TYPE_ARRAY, _TYPE_RUNTIME_ARRAY, _TYPE_VECTOR, _TYPE_MATRIX):
        return words[where + 2]
    raise StructureError(f"access chain at word {at} indexes into a type with no parts")


def _check_uses(m: _Module) -> None:
    """Every id a body instruction uses is defined in the module; result types are types."""
    for at, value, is_type in m.uses:
        m.check_id(value, at, "operand id")
        op = m.op_of(value)
        if op is None:
            raise StructureError(
                f"instruction at word {at} uses id {value}, which is never defined"
            )
        if is_type and op not in _TYPES:
            raise StructureError(f"instruction at word {at}: result type {value} is not a type")


def _check_count(op: int, count: int, at: int) -> None:
    least, most = _COUNTS.get(op, (1, None))
    if count < least or (most is not None and count > most):
        raise StructureError(f"instruction at word {at} (opcode {op}) has {count} words")


def _check_string(words: tuple[int, ...], at: int, count: int, first: int) -> None:
    if first >= count:
        raise StructureError(f"instruction at word {at} has no room for its string")
    raw = struct.pack(f"<{count - first}I", *words[at + first : at + count])
    if b"\0" not in raw:
        raise StructureError(f"the string of the instruction at word {at} has no terminating NUL")


def _record(m: _Module, op: int, at: int, count: int) -> bool:
    """Keep decorations, entry points and execution modes for the checks after the walk."""
    if op in (_DECORATE, _MEMBER_DECORATE, _DECORATE_ID, _DECORATE_STRING):
        m.decorations.append((at, op, count))
    elif op == _ENTRY_POINT:
        m.entry_points.append((at, count))
    elif op in (_EXECUTION_MODE, _EXECUTION_MODE_ID):
        m.modes.append((at, count))
    else:
        return False
    return True


def _define(m: _Module, op: int, at: int, count: int) -> None:
    words = m.words
    if _record(m, op, at, count):
        return
    if op in (_EXT_INST_IMPORT, _DECORATION_GROUP, _STRING, _LABEL) or op in _TYPES:
        if op != _TYPE_FORWARD_POINTER:
            m.define(words[at + 1], at, op)
        if op in _TYPES:
            _check_type(m, op, at, count)
    elif op in _CONSTANTS or op in (_VARIABLE, _FUNCTION, _FUNCTION_PARAMETER, _UNDEF):
        _check_typed(m, at, words[at + 1])
        m.define(words[at + 2], at, op)
        if op == _VARIABLE:
            pointer = m.defs[words[at + 1]]
            if m.op_of(words[at + 1]) != _TYPE_POINTER or words[pointer + 2] != words[at + 3]:
                raise StructureError(
                    f"OpVariable at word {at}: its type is not a pointer of its storage class"
                )
        _constant_uses(m, op, at, count)
        if op == _FUNCTION and m.op_of(words[at + 4]) != _TYPE_FUNCTION:
            raise StructureError(f"OpFunction at word {at}: operand 4 is not a function type")
    elif op in (_NAME, _MEMBER_NAME):
        m.uses.append((at, words[at + 1], False))


def _constant_uses(m: _Module, op: int, at: int, count: int) -> None:
    """The ids a composite constant, a variable's initializer or a specialization
    operation (its operands as the operation's own) use."""
    kinds = {_CONSTANT_COMPOSITE: "i", _SPEC_COMPOSITE: "i", _VARIABLE: "i"}.get(op)
    first = 4 if op == _VARIABLE else 3
    if op == _SPEC_OP:
        inner = _BODY.get(m.words[at + 3])
        if inner is None or not inner.startswith("TR"):
            raise StructureError(f"OpSpecConstantOp at word {at}: operation {m.words[at + 3]}")
        kinds, first = inner[2:] or "l", 4
    if kinds is None:
        return
    for n in range(first, count):
        if kinds[min(n - first, len(kinds) - 1)] == "i":
            m.uses.append((at, m.words[at + n], False))


def _check_typed(m: _Module, at: int, type_id: int) -> None:
    m.check_id(type_id, at, "result type")
    if m.op_of(type_id) not in _TYPES:
        raise StructureError(f"instruction at word {at}: result type {type_id} is not a type")


def _check_type(m: _Module, op: int, at: int, count: int) -> None:
    """A type's operands are types (or a constant length) declared before it."""
    words = m.words
    if op in (_TYPE_VECTOR, _TYPE_MATRIX, _TYPE_ARRAY, _TYPE_RUNTIME_ARRAY, _TYPE_SAMPLED_IMAGE):
        parts = [words[at + 2]]
    elif op in (_TYPE_STRUCT, _TYPE_FUNCTION):
        parts = list(words[at + 2 : at + count])
    elif op == _TYPE_POINTER:
        parts = []  # its pointee may be forward-declared (OpTypeForwardPointer)
        m.check_id(words[at + 3], at, "pointee type")
    elif op == _TYPE_IMAGE:
        parts = [words[at + 2]]
    else:
        parts = []
    for part in parts:
        m.check_id(part, at, "operand type")
        if m.op_of(part) not in _TYPES:
            raise StructureError(f"type at word {at}: operand {part} is not a type declared before")
    if op == _TYPE_VECTOR and not 2 <= words[at + 3] <= 4:
        raise StructureError(f"vector type at word {at} has {words[at + 3]} components")
    if op == _TYPE_ARRAY:
        length = words[at + 3]
        m.check_id(length, at, "array length")
        if m.op_of(length) not in _CONSTANTS:
            raise StructureError(f"array type at word {at}: its length is not a constant")


def _check_decorations(m: _Module) -> None:
    """Each decoration known, of its length, on an id the module defines, of a kind it
    applies to; no decoration given twice to one target."""
    words, seen = m.words, set()
    for at, op, count in m.decorations:
        member = op in (_MEMBER_DECORATE,)
        target = words[at + 1]
        m.check_id(target, at, "decoration target")
        if target not in m.defs:
            raise StructureError(f"decoration at word {at}: target {target} is never defined")
        first = at + (3 if member else 2)
        if first >= at + count:
            raise StructureError(f"decoration at word {at} has no decoration word")
        kind, extra = words[first], at + count - first - 1
        if kind not in _DECORATIONS:
            raise StructureError(
                f"decoration {kind} at word {at} is not one vkcore's checks know "
                "(install spirv-val to validate such a module)"
            )
        wanted = _DECORATIONS[kind]
        if wanted is not None and extra != wanted:
            raise StructureError(f"decoration {kind} at word {at} has {extra} operands")
        key = (target, words[at + 2] if member else None, kind)
        if key in seen:
            raise StructureError(f"decoration {kind} at word {at} is given twice to {target}")
        seen.add(key)
        _check_target(m, at, member, target, kind, words[first + 1] if extra else None)


def _check_member(m: _Module, at: int, member: bool, target: int, kind: int) -> None:
    """A member decoration names a member of a struct; Offset and MatrixStride are only
    member decorations."""
    if member:
        index = m.words[at + 2]
        members = (m.words[m.defs[target]] >> 16) - 2
        if m.op_of(target) != _TYPE_STRUCT or index >= members:
            raise StructureError(
                f"member decoration at word {at}: member {index} of {target}, which is not "
                "a struct member"
            )
    elif kind in (_OFFSET, _MATRIX_STRIDE):
        raise StructureError(f"decoration {kind} at word {at} is not on a struct member")


def _check_target(
    m: _Module, at: int, member: bool, target: int, kind: int, value: int | None
) -> None:
    target_op = m.op_of(target)
    _check_member(m, at, member, target, kind)
    if kind in (_BINDING, _DESCRIPTOR_SET):
        variable = m.defs[target]
        if target_op != _VARIABLE or m.words[variable + 3] not in _DESCRIPTOR_CLASSES:
            raise StructureError(
                f"Binding/DescriptorSet at word {at} is not on a descriptor variable"
            )
    elif kind in (_BLOCK, _BUFFER_BLOCK) and target_op != _TYPE_STRUCT:
        raise StructureError(f"Block/BufferBlock at word {at} is not on a struct type")
    elif kind == _ARRAY_STRIDE and target_op not in (
        _TYPE_ARRAY,
        _TYPE_RUNTIME_ARRAY,
        _TYPE_POINTER,
    ):
        raise StructureError(f"ArrayStride at word {at} is not on an array or pointer type")
    elif kind == _ARRAY_STRIDE and not value:
        raise StructureError(f"ArrayStride at word {at} is 0")
    elif kind == _SPEC_ID and target_op not in (_SPEC_TRUE, _SPEC_FALSE, _SPEC):
        raise StructureError(f"SpecId at word {at} is not on a scalar specialization constant")
    elif kind == _BUILTIN:
        if value not in _COMPUTE_BUILTINS:
            raise StructureError(f"BuiltIn {value} at word {at} is not a compute shader's")
        if not member and target_op not in (_VARIABLE, _SPEC_COMPOSITE, _CONSTANT_COMPOSITE):
            raise StructureError(f"BuiltIn at word {at} is not on a variable or a constant")
        if not member:
            _check_builtin_type(m, at, target, value)


def _check_blocks(m: _Module) -> None:
    """A buffer or push-constant variable points (through arrays) at a struct decorated
    Block or BufferBlock."""
    words = m.words
    blocks = {
        words[at + 1]
        for at, op, _ in m.decorations
        if op == _DECORATE and words[at + 2] in (_BLOCK, _BUFFER_BLOCK)
    }
    for ident, op in m.ops.items():
        at = m.defs[ident]
        if op != _VARIABLE or words[at + 3] not in _BLOCK_CLASSES:
            continue
        pointee = words[m.defs[words[at + 1]] + 3]
        while m.op_of(pointee) in (_TYPE_ARRAY, _TYPE_RUNTIME_ARRAY):
            pointee = words[m.defs[pointee] + 2]
        if m.op_of(pointee) != _TYPE_STRUCT or pointee not in blocks:
            raise StructureError(
                f"variable {ident} (word {at}) is a buffer or push constant whose type is "
                "not a struct decorated Block or BufferBlock"
            )


def _check_builtin_type(m: _Module, at: int, target: int, builtin: int) -> None:
    """A built-in's type: 32-bit integers, 3 of them for the ids and sizes, 4 for the
    subgroup masks, 1 for the others."""
    words, where = m.words, m.defs[target]
    type_id = words[where + 1]
    if m.op_of(target) == _VARIABLE:
        type_id = words[m.defs[type_id] + 3]  # the pointee
    width = 3 if builtin <= 28 else 4 if builtin >= 4416 else 1
    scalar = type_id
    if width > 1:
        if m.op_of(type_id) != _TYPE_VECTOR or words[m.defs[type_id] + 3] != width:
            scalar = 0
        else:
            scalar = words[m.defs[type_id] + 2]
    if m.op_of(scalar) != _TYPE_INT or words[m.defs[scalar] + 2] != 32:
        raise StructureError(
            f"BuiltIn {builtin} at word {at}: its type is not {width} 32-bit integer(s)"
        )


def _check_entry_points(m: _Module) -> None:
    """A GLCompute entry point "main" on a function of the module, its interface variables
    defined, and its execution modes on entry points."""
    words, compute, functions = m.words, False, set()
    for at, count in m.entry_points:
        model, function = words[at + 1], words[at + 2]
        if m.op_of(function) != _FUNCTION:
            raise StructureError(f"OpEntryPoint at word {at} names {function}, not a function")
        raw = struct.pack(f"<{count - 3}I", *words[at + 3 : at + count])
        name, _, rest = raw.partition(b"\0")
        name_words = (len(name) + 4) // 4
        for ident in words[at + 3 + name_words : at + count]:
            m.check_id(ident, at, "interface id")
            if m.op_of(ident) != _VARIABLE:
                raise StructureError(f"OpEntryPoint at word {at}: interface {ident} is no variable")
        functions.add(function)
        compute = compute or (model == _GL_COMPUTE and name == b"main")
    if not compute:
        raise StructureError('no OpEntryPoint GLCompute named "main"')
    for at, count in m.modes:
        if words[at + 1] not in functions:
            raise StructureError(f"execution mode at word {at} is not on an entry point")
        mode = words[at + 2]
        if mode == _LOCAL_SIZE and (count != 6 or 0 in words[at + 3 : at + 6]):
            raise StructureError(f"LocalSize at word {at} is not three sizes of at least 1")
        if mode == _LOCAL_SIZE_ID:
            for ident in words[at + 3 : at + count]:
                m.check_id(ident, at, "local size id")
                if m.op_of(ident) not in _CONSTANTS:
                    raise StructureError(f"LocalSizeId at word {at}: {ident} is not a constant")
