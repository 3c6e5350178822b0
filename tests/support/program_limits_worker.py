"""Run by tests/compute/test_program_limits.py in a fresh process: a Program whose
interface is past one of the device's limits (argv[1], the scenario), built and
dispatched. Past such a limit a driver may crash the process (a 64 KiB push block and 40
storage buffers did on lavapipe), so the caller reads the exit status; otherwise this
prints ``REFUSED <message>`` for the ValueError expected, or ``RAN`` when the dispatch
went through.
"""

from __future__ import annotations

import sys

import numpy as np

import vkcore


def buffers_source(count: int, kind: str) -> str:
    """A shader with ``count`` bindings of ``kind`` ("buffer" or "uniform"), all used."""
    decls = "".join(
        f"layout(std430, binding = {i}) buffer B{i} {{ float v{i}[]; }};\n"
        if kind == "buffer"
        else f"layout(std140, binding = {i}) uniform U{i} {{ vec4 u{i}; }};\n"
        for i in range(count)
    )
    out = f"layout(std430, binding = {count}) buffer O {{ float o[]; }};\n"
    reads = " + ".join(f"v{i}[0]" if kind == "buffer" else f"u{i}.x" for i in range(count))
    head = "#version 450\nlayout(local_size_x = 1) in;\n"
    return f"{head}{decls}{out}void main() {{ o[0] = {reads}; }}\n"


def scenario_source(name: str, info: vkcore.DeviceInfo) -> tuple[str, int]:
    """The shader of a scenario and how many buffers it binds."""
    if name == "push_64k":
        return (
            "#version 450\nlayout(local_size_x = 1) in;\n"
            "layout(push_constant) uniform P { float a[16384]; } pc;\n"
            "layout(std430, binding = 0) buffer O { float o[]; };\n"
            "void main() { o[0] = pc.a[16383]; }\n",
            1,
        )
    if name == "storage_40":
        return buffers_source(40, "buffer"), 41
    if name == "uniform_over":
        n = info.max_per_stage_descriptor_uniform_buffers + 1
        return buffers_source(n, "uniform"), n + 1
    if name == "shared_over":
        floats = info.max_compute_shared_memory_size // 4 + 1
        return (
            "#version 450\nlayout(local_size_x = 1) in;\n"
            f"shared float s[{floats}];\n"
            "layout(std430, binding = 0) buffer O { float o[]; };\n"
            f"void main() {{ s[{floats - 1}] = 1.0; barrier(); o[0] = s[{floats - 1}]; }}\n",
            1,
        )
    raise SystemExit(f"unknown scenario {name!r}")


def main() -> None:
    device = vkcore.Device()
    source, count = scenario_source(sys.argv[1], device.info)
    try:
        prog = vkcore.Program(source, device=device)
        buffers = [np.zeros(4, np.float32) for _ in range(count)]
        push = {"a": np.zeros(16384, np.float32)} if prog.push else {}
        prog(*buffers, **push)
    except ValueError as exc:
        print(f"REFUSED {exc}", flush=True)
    else:
        print("RAN", flush=True)
    device.close()


if __name__ == "__main__":
    main()
