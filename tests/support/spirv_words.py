"""Reading the kernels' SPIR-V in tests: instructions, every declared variant compiled
once, and which programs the kernels ask a device for."""

from __future__ import annotations

import os
import struct
from concurrent.futures import ThreadPoolExecutor
from functools import cache

from vkcore import spirv
from vkcore.kernels import programs


def instructions(code: bytes) -> list[tuple[int, tuple[int, ...]]]:
    """(opcode, operand words) of every instruction after the SPIR-V header."""
    words = struct.unpack(f"<{len(code) // 4}I", code)
    out, at = [], 5
    while at < len(words):
        count, op = words[at] >> 16, words[at] & 0xFFFF
        out.append((op, words[at + 1 : at + count]))
        at += count
    return out


@cache
def declared_spirv() -> list[tuple[str, dict, bytes]]:
    """(shader, defines, SPIR-V) of every declared variant, compiled on every core once."""
    declared = spirv.variants()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        codes = list(pool.map(lambda v: spirv.get(*v).code, declared))
    return [(n, d, code) for (n, d), code in zip(declared, codes, strict=True)]


def recording(device, monkeypatch) -> list[tuple[str, dict]]:
    """(shader, defines) of every program the kernels ask ``device`` for from now on."""
    asked: list[tuple[str, dict]] = []
    real = programs.program

    def program(dev, shader, defines, **kw):
        if dev is device:
            asked.append((shader, dict(defines)))
        return real(dev, shader, defines, **kw)

    monkeypatch.setattr(programs, "program", program)
    return asked
