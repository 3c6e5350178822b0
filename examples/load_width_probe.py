"""How fast can a compute shader read a storage buffer on this device? Load-only shaders.

    python examples/load_width_probe.py            # 16 MiB read by 64 workgroups of 8
    python examples/load_width_probe.py --int64    # also 64-bit loads (see below)
    python examples/load_width_probe.py --small    # 1 MiB (what the tests run)

Each variant XORs every 32-bit word of the buffer into one value per invocation, so it
does almost nothing but load. The variants differ only in how the loads are shaped:

* ``uint, lanes interleaved``: invocation i reads words i, i + 8, i + 16, ...
* ``uvec4, lanes interleaved``: the same with 16-byte loads;
* ``uvec4, own run``: each invocation reads its own contiguous run of uvec4s;
* ``uvec4, same address``: every invocation of a subgroup reads the same address (a
  driver that notices uniform addresses loads once and broadcasts);
* ``u64vec2 / u64vec4, own run``: 64-bit components (needs the shaderInt64 feature,
  which vkcore's device does not enable: run these without VKCORE_VALIDATION);
* ``uvec4 texel, interleaved``: the interleaved uvec4 reads through a uniform texel buffer
  (rgba32ui view), i.e. the driver's texture path.

On lavapipe (Mesa 22.3) the cost of a storage-buffer load grows with the number of 32-
or 64-bit components each invocation loads, not with the bytes, while texel fetches take
a vectorized path; the quantization kernels are shaped around both facts. Prints device
time and GB/s per variant (median of 7 rounds, the variants taking turns).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

SHADER = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : enable
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x_id = 0) in;
#if V == 7
layout(binding = 0) uniform utextureBuffer a_texels;
layout(std430, binding = 1) readonly buffer B { uvec4 a4[]; };
#elif WIDE
layout(std430, binding = 0) readonly buffer A { u64vec2 a2[]; };
layout(std430, binding = 1) readonly buffer B { u64vec4 a4[]; };
#else
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uvec4 a4[]; };
#endif
layout(std430, binding = 2) writeonly buffer O { uint o[]; };
layout(push_constant) uniform Push { uint words; } pc;  // words per workgroup
void main() {
    uint lane = gl_LocalInvocationID.x;
    uint base = gl_WorkGroupID.x * pc.words;
    uint acc = 0u;
#if V == 1
    for (uint i = lane; i < pc.words; i += 8u) acc ^= a[base + i];
#elif V == 2
    for (uint i = lane; i < pc.words / 4u; i += 8u) {
        uvec4 v = a4[base / 4u + i]; acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#elif V == 3
    uint per = pc.words / 32u;
    for (uint i = 0u; i < per; ++i) {
        uvec4 v = a4[base / 4u + lane * per + i]; acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#elif V == 4
    for (uint i = 0u; i < pc.words / 4u; i += 8u) {
        uvec4 v = a4[base / 4u + i]; acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#elif V == 5
    uint per = pc.words / 32u;
    u64vec2 x = u64vec2(0ul);
    for (uint i = 0u; i < per; ++i) x ^= a2[base / 4u + lane * per + i];
    acc = uint(x.x ^ x.y) ^ uint((x.x ^ x.y) >> 32);
#elif V == 6
    uint per = pc.words / 64u;
    u64vec4 x = u64vec4(0ul);
    for (uint i = 0u; i < per; ++i) x ^= a4[base / 8u + lane * per + i];
    uint64_t t = x.x ^ x.y ^ x.z ^ x.w;
    acc = uint(t) ^ uint(t >> 32);
#elif V == 7
    for (uint i = lane; i < pc.words / 4u; i += 8u) {
        uvec4 v = texelFetch(a_texels, int(base / 4u + i)); acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#endif
    o[gl_GlobalInvocationID.x] = acc;
}
"""

VARIANTS = [
    (1, "uint, lanes interleaved"),
    (2, "uvec4, lanes interleaved"),
    (3, "uvec4, own run"),
    (4, "uvec4, same address"),
    (5, "u64vec2, own run"),
    (6, "u64vec4, own run"),
    (7, "uvec4 texel, interleaved"),
]
LANES = 8
GROUPS = 64


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="1 MiB instead of 16 MiB")
    parser.add_argument("--int64", action="store_true", help="also the 64-bit load variants")
    args = parser.parse_args()
    if args.int64 and os.environ.get("VKCORE_VALIDATION", "0") not in ("", "0"):
        print("--int64 needs VKCORE_VALIDATION unset: vkcore does not enable shaderInt64")
        return 2
    import vkcore
    from vkcore.device.memory.buffer import Buffer

    dev = vkcore.default_device()
    nbytes = (1 if args.small else 16) << 20
    src = Buffer(dev, nbytes)
    src.write(np.arange(nbytes // 4, dtype=np.uint32))
    out = Buffer(dev, GROUPS * LANES * 4)
    words = nbytes // 4 // GROUPS
    print(f"{dev.info.name}: {nbytes >> 20} MiB read by {GROUPS} workgroups of {LANES}")
    steps = {}
    for v, label in VARIANTS:
        if (v in (5, 6) and not args.int64) or (
            v == 7 and "rgba32ui" not in dev.info.texel_formats
        ):
            continue
        prog = vkcore.Program(
            SHADER,
            defines={"V": v, "WIDE": int(v in (5, 6))},
            workgroup=LANES,
            texel={0: "rgba32ui"} if v == 7 else None,
            device=dev,
        )
        push = np.uint32(words).tobytes()
        steps[label] = [prog.record(src, src, out, groups=GROUPS, push=push)]
        dev.submitter.run(steps[label])  # warm-up: the driver compiles at first use
    seconds: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(7):  # round-robin, so a busy moment hits every variant alike
        for label, step in steps.items():
            seconds[label].append(dev.submitter.run(step) or float("nan"))
    for label, samples in seconds.items():
        t = statistics.median(samples)
        print(f"  {label:26s} {t * 1e3:7.2f} ms  {nbytes / t / 1e9:6.2f} GB/s")
    src.destroy()
    out.destroy()
    dev.check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
