"""A user's program (vkcore.Program) on the per-call overhead row: a tiny dispatch, numpy
in and out, against resubmitting its own recording."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.harness import Comparison, call_against_floor

TINY = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = pc.a * x[i]; }
"""


def tiny_program_overhead(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """256 floats through a two-binding program with two push constants."""
    prog = vkcore.Program(TINY, device=dev)
    x = rng.standard_normal(256, dtype=np.float32)
    y = np.empty_like(x)
    floor, calls = call_against_floor(dev, lambda: prog(x, y, groups=4, a=2.0, n=256), repeats)
    yield Comparison(
        "program_tiny_overhead",
        "tiny vkcore.Program call vs resubmit floor (wall)",
        (256,),
        "wall",
        "resubmit prerecorded",
        "Program(numpy)",
        floor,
        calls,
        overhead=True,
    )
