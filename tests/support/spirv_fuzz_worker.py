"""Runs damaged SPIR-V through ``vkcore.Program(spirv=...)``, each module in a forked
child (tests/spirv/test_spirv_validation.py):

    python spirv_fuzz_worker.py fuzz SEED COUNT   # COUNT seeded mutations of a valid module
    python spirv_fuzz_worker.py examples          # the named damages of EXAMPLES

The parent imports vkcore and makes no device; each child makes one, builds the Program
and runs it once. One line per module: ``<name> <kind> ran``, ``... refused <validator>``
(vkcore.InvalidSpirvError), ``... raised <exception>: <message>`` or ``... signal <n>
CRASH``, each after ``result: ``; then ``OK`` when no child died of a signal.
``VKCORE_SPIRV_VAL=0`` selects the structural checks.
"""

from __future__ import annotations

import os
import random
import struct
import sys

import numpy as np

import vkcore
from vkcore.spirv import compile_source

# Every kind of binding the reflection reads, push constants, a spec constant, a builtin.
SHADER = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int REPEAT = 2;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(std140, binding = 2) uniform U { vec4 scale; } u;
layout(push_constant) uniform P { float a; uint n; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    float v = x[i];
    for (int r = 0; r < REPEAT; ++r) v = v * pc.a + u.scale.x;
    y[i] = v;
}
"""
_OP_DECORATE, _OP_MEMBER_DECORATE = 71, 72
RESULT = "result: "  # leads each module's line (a layer may print lines of its own)


def valid_module() -> bytes:
    return compile_source(SHADER).code


def instructions(words: list[int]) -> list[tuple[int, int]]:
    """(start, word count) of each instruction of a well-formed module."""
    out, at = [], 5
    while at < len(words):
        count = words[at] >> 16
        out.append((at, count))
        at += count
    return out


def mutate(code: bytes, seed: int) -> tuple[str, bytes]:
    """One seeded mutation of ``code``: (what was done, the bytes)."""
    rng = random.Random(seed)
    words = list(struct.unpack(f"<{len(code) // 4}I", code))
    spans = instructions(words)
    decorations = [
        (a, c) for a, c in spans if words[a] & 0xFFFF in (_OP_DECORATE, _OP_MEMBER_DECORATE)
    ]
    kind = rng.choice(
        ["decoration", "decoration", "word", "byte", "truncate", "duplicate", "count", "drop"]
    )
    if kind == "decoration":
        at, count = rng.choice(decorations)
        slot = at + rng.randrange(1, count)
        words[slot] = rng.choice(
            [0, 1, 2, 3, 6, 11, 24, 25, 33, 34, 35, words[slot] + 1, rng.getrandbits(32)]
        )
    elif kind == "word":
        words[rng.randrange(len(words))] = rng.getrandbits(32)
    elif kind == "byte":
        raw = bytearray(struct.pack(f"<{len(words)}I", *words))
        raw[rng.randrange(len(raw))] ^= rng.randrange(1, 256)
        return kind, bytes(raw)
    elif kind == "truncate":
        return kind, code[: rng.randrange(len(code))]
    elif kind == "duplicate":
        at, count = rng.choice(spans)
        where = rng.choice(spans)[0]
        words[where:where] = words[at : at + count]
    elif kind == "count":
        at, count = rng.choice(spans)
        words[at] = (rng.randrange(0, count + 3) << 16) | (words[at] & 0xFFFF)
    else:
        at, count = rng.choice(spans)
        del words[at : at + count]
    return kind, struct.pack(f"<{len(words)}I", *words)


def run_one(code: bytes) -> str:
    """Build and run the Program of ``code`` on a fresh device: what happened."""
    with vkcore.Device() as dev:
        try:
            prog = vkcore.Program(spirv=code, device=dev)
            buffers = []
            for b in prog.bindings:
                size = b.fixed_bytes + 64 * max(b.stride, 4)
                buffers.append(np.zeros(max(size, 16) // 4, np.float32))
            prog(*buffers, groups=1, push=bytes(prog.interface.push_size))
            dev.check()
        except vkcore.InvalidSpirvError as exc:
            return f"refused {exc.validator.split()[0]}"
        except Exception as exc:  # noqa: BLE001 - any clear Python error is an answer
            return f"raised {type(exc).__name__}: {str(exc)[:100]!r}"
    return "ran"


def _words(code: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(code) // 4}I", code))


def _pack(words: list[int]) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def _find(words: list[int], op: int, *operands: int) -> int:
    """The start of the first instruction ``op`` whose operands begin with ``operands``
    (None matches any word)."""
    for at, _ in instructions(words):
        if words[at] & 0xFFFF == op and all(
            want is None or words[at + 1 + n] == want for n, want in enumerate(operands)
        ):
            return at
    raise LookupError(f"no opcode {op} with {operands}")


def _set(code: bytes, op: int, operands: tuple, slot: int, value: int) -> bytes:
    words = _words(code)
    words[_find(words, op, *operands) + slot] = value
    return _pack(words)


def _drop(code: bytes, op: int) -> bytes:
    return _drop_at(code, _find(_words(code), op))


def _drop_at(code: bytes, at: int) -> bytes:
    words = _words(code)
    del words[at : at + (words[at] >> 16)]
    return _pack(words)


def _block_moved(code: bytes) -> bytes:
    """The Block decoration of the uniform block moved onto another block."""
    words = _words(code)
    blocks = [
        at
        for at, _ in instructions(words)
        if words[at] & 0xFFFF == _OP_DECORATE and words[at + 2] == 2
    ]
    words[blocks[-1] + 1] = words[blocks[0] + 1]
    return _pack(words)


_BUILTIN, _BINDING, _GLOBAL_ID, _CLIP_DISTANCE, _OP_NAME, _OP_LOAD = 11, 33, 28, 3, 5, 61
EXAMPLES = {
    # one decoration changed (each crashed lavapipe unchecked)
    "builtin_changed": lambda c: _set(
        c, _OP_DECORATE, (None, _BUILTIN, _GLOBAL_ID), 3, _CLIP_DISTANCE
    ),
    "block_moved": _block_moved,
    "builtin_dropped": lambda c: _drop_at(c, _find(_words(c), _OP_DECORATE, None, _BUILTIN)),
    "binding_on_an_undefined_id": lambda c: _set(
        c, _OP_DECORATE, (None, _BINDING), 1, _words(c)[3] - 1
    ),
    "name_beyond_the_bound": lambda c: _set(c, _OP_NAME, (), 1, 2_444_712_010),
    "a_load_dropped": lambda c: _drop(c, _OP_LOAD),
    # truncated
    "header_only_in_part": lambda c: c[:12],
    "cut_mid_word": lambda c: c[:-6],
    "cut_mid_instruction": lambda c: c[: 4 * (_find(_words(c), _OP_LOAD) + 2)],
    "last_instruction_cut": lambda c: c[:-4],
    # wrong magic
    "wrong_magic": lambda c: _pack([0x07230204, *_words(c)[1:]]),
    "byte_swapped": lambda c: b"".join(c[i : i + 4][::-1] for i in range(0, len(c), 4)),
    # bad word counts
    "count_zero": lambda c: _set(c, _OP_DECORATE, (), 0, 71),
    "count_past_the_end": lambda c: _pack(_words(c)[:-1] + [(9 << 16) | 56]),
    "count_too_short": lambda c: _set(c, _OP_DECORATE, (None, _BINDING), 0, (2 << 16) | 71),
    "count_too_long": lambda c: _set(c, _OP_DECORATE, (None, _BINDING), 0, (5 << 16) | 71),
}


def _in_child(name: str, what: str, code: bytes) -> bool:
    """Run ``code`` in a forked child and print what happened; False if it died."""
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            print(f"{RESULT}{name} {what} {run_one(code)}", flush=True)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        print(f"{RESULT}{name} {what} signal {os.WTERMSIG(status)} CRASH", flush=True)
        return False
    return True


def main() -> int:
    code = valid_module()
    assert run_one(code) == "ran", "the unmutated module must run"
    if sys.argv[1] == "examples":
        modules = [(name, "example", damage(code)) for name, damage in EXAMPLES.items()]
    else:
        first, count = int(sys.argv[2]), int(sys.argv[3])
        modules = [(str(seed), *mutate(code, seed)) for seed in range(first, first + count)]
    crashed = sum(not _in_child(name, what, mutated) for name, what, mutated in modules)
    print("OK" if not crashed else f"FAIL: {crashed} crashed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
