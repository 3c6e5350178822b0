"""Runs mutated SPIR-V through ``vkcore.Program(spirv=...)``, each in a forked child
(tests/spirv/test_spirv_validation.py): ``python spirv_fuzz_worker.py SEED COUNT``.

The parent imports vkcore and makes no device; each child makes one, builds the Program
from one mutation of a valid module and runs it once. It prints one line per mutation,
``<seed> <what> ran|refused|raised <exception> | signal <n>``, then ``OK`` when no child
died of a signal. ``VKCORE_SPIRV_VAL=0`` selects the structural checks.
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
    decorations = [(a, c) for a, c in spans if words[a] & 0xFFFF in (_OP_DECORATE, _OP_MEMBER_DECORATE)]
    kind = rng.choice(["decoration", "decoration", "word", "byte", "truncate", "duplicate", "count", "drop"])
    if kind == "decoration":
        at, count = rng.choice(decorations)
        slot = at + rng.randrange(1, count)
        words[slot] = rng.choice([0, 1, 2, 3, 6, 11, 24, 25, 33, 34, 35, words[slot] + 1, rng.getrandbits(32)])
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
        except vkcore.InvalidSpirvError:
            return "refused"
        except Exception as exc:  # noqa: BLE001 - any clear Python error is an answer
            return f"raised {type(exc).__name__}: {str(exc)[:100]!r}"
    return "ran"


def main() -> int:
    first, count = int(sys.argv[1]), int(sys.argv[2])
    code = valid_module()
    assert run_one(code) == "ran", "the unmutated module must run"
    crashed = 0
    for seed in range(first, first + count):
        what, mutated = mutate(code, seed)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                print(f"{seed} {what} {run_one(mutated)}", flush=True)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            crashed += 1
            print(f"{seed} {what} signal {os.WTERMSIG(status)} CRASH", flush=True)
    print("OK" if not crashed else f"FAIL: {crashed} crashed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
