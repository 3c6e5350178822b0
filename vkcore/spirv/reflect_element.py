"""The element type of a buffer block: the one scalar type every member is made of.

A :class:`vkcore.Program` converts a numpy argument to the element type of its binding
(``float x[]`` takes float32, ``uvec4 s[]`` uint32, ``double d[]`` float64) and refuses a
Tensor of another dtype. A block that mixes scalar types (``uint n; float x[];``), or
holds a bool or a pointer, has no element type: it takes the bytes of the array given.
"""

from __future__ import annotations

from collections.abc import Mapping

_OP_TYPE_INT, _OP_TYPE_FLOAT, _OP_TYPE_VECTOR, _OP_TYPE_MATRIX = 21, 22, 23, 24
_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY, _OP_TYPE_STRUCT = 28, 29, 30
_CONTAINERS = frozenset((_OP_TYPE_VECTOR, _OP_TYPE_MATRIX, _OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY))
ELEMENTS = frozenset(
    f"{kind}{bits}"
    for kind, widths in (
        ("int", (8, 16, 32, 64)),
        ("uint", (8, 16, 32, 64)),
        ("float", (16, 32, 64)),
    )
    for bits in widths
)


def element_of(types: Mapping[int, tuple[int, list[int]]], type_id: int) -> str:
    """The numpy dtype name ("float32", "uint8", ...) of the scalar type that makes up
    the type ``type_id`` (``types``: id -> (opcode, operands) of the module's type
    instructions), or "" when there is not exactly one."""
    found: set[str] = set()
    todo = [type_id]
    while todo and len(found) < 2:
        op, args = types[todo.pop()]
        if op == _OP_TYPE_INT:
            found.add(f"{'int' if args[1] else 'uint'}{args[0]}")
        elif op == _OP_TYPE_FLOAT:
            found.add(f"float{args[0]}")
        elif op == _OP_TYPE_STRUCT:
            todo += args
        elif op in _CONTAINERS:
            todo.append(args[0])
        else:  # bool, pointer, ...: no numpy dtype stands for it in a block
            return ""
    name = found.pop() if len(found) == 1 else ""
    return name if name in ELEMENTS else ""
