"""Shaders the adversarial Program and sequence tests share (their fixtures are in
conftest.py)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

# y = a * x over n floats (binding 0 read, binding 1 written)
SCALE = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = pc.a * x[i]; }
"""

# y[i] = x[i] word for word (the bytes of any array, as uint words)
COPY_WORDS = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = x[i]; }
"""


def groups_for(n: int) -> int:
    return -(-n // 64)


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Start a thread per target and join them all, with a short switch interval so the
    threads interleave often."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=t) for t in targets]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
