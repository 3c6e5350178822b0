"""Adversarial checks of vkcore.Program (README "Your own shaders") through its public API.

Each test states the behaviour the README promises.
"""

from __future__ import annotations

import numpy as np
import pytest

import vkcore

SCALE = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 4) const float BIAS = 0.5;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; int k; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) y[i] = pc.a * x[i] + float(pc.k) + BIAS;
}
"""


@pytest.fixture
def prog(device):
    return vkcore.Program(SCALE, workgroup=64, device=device)


def test_the_documented_call_and_its_errors(prog):
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    prog(x, y, groups=2, a=2.0, n=100, k=-3)
    assert np.array_equal(y, 2 * x - 3 + np.float32(0.5))
    with pytest.raises(TypeError, match="takes 2 buffers"):
        prog(x, groups=2, a=1.0, n=1, k=0)
    # float x[] holds float32: a uint8 Tensor is refused (a uint8 array is converted)
    with pytest.raises(TypeError, match="buffer 0 .*float32"):
        prog(vkcore.asarray(np.zeros(3, np.uint8), device=prog.device), y, a=1.0, n=1, k=0)
    with pytest.raises(ValueError, match="C-contiguous"):
        prog(x, np.zeros(200, np.float32)[::2], a=1.0, n=1, k=0)
    with pytest.raises(TypeError, match="'n' is an uint"):
        prog(x, y, a=1.0, n=1.0, k=0)
    with pytest.raises(ValueError, match="'k' \\(int\\) must be in"):
        prog(x, y, a=1.0, n=1, k=2**31)
    with pytest.raises(TypeError, match="'k' is missing"):
        prog(x, y, a=1.0, n=1)
    with pytest.raises(ValueError, match="maxComputeWorkGroupCount"):
        prog(x, y, groups=(1, 2**20), a=1.0, n=1, k=0)
    with pytest.raises(ValueError, match="push must be 12 bytes"):
        prog(x, y, push=b"\0" * 8)
    # A non-contiguous readonly input is uploaded as its contiguous copy.
    prog(np.arange(200, dtype=np.float32)[::2], y, groups=2, a=1.0, n=100, k=0)
    assert np.array_equal(y, np.arange(0, 200, 2, dtype=np.float32) + np.float32(0.5))


def test_spec_constants_and_workgroup_are_checked(device):
    p = vkcore.Program(SCALE, spec={"BIAS": 2.0, 0: 32}, device=device)
    assert p.workgroup == (32, 1, 1)
    with pytest.raises(ValueError, match="no specialization constant 'NOPE'"):
        vkcore.Program(SCALE, spec={"NOPE": 1}, device=device)
    with pytest.raises(ValueError, match="maxComputeWorkGroupSize"):
        vkcore.Program(SCALE, workgroup=10**6, device=device)
    with pytest.raises(ValueError, match="local_size_y"):
        vkcore.Program(SCALE, workgroup=(64, 2), device=device)


def test_a_tensor_of_another_device_is_refused(prog):
    other = vkcore.Device()
    try:
        t = vkcore.asarray(np.ones(64, np.float32), device=other)
        with pytest.raises(ValueError, match="another device"):
            prog(t, np.zeros(64, np.float32), a=1.0, n=64, k=0)
        del t
    finally:
        other.close()


def test_glsl_errors_name_the_included_file_and_line(device, tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "helper.glsl").write_text(
        "// helper\nfloat helper(float v) {\n    return v * undefined_thing;\n}\n"
    )
    main = tmp_path / "main.comp"
    main.write_text(
        "#version 450\n#extension GL_GOOGLE_include_directive : require\n"
        'layout(local_size_x = 1) in;\n#include "helper.glsl"\n'
        "layout(std430, binding = 0) buffer Y { float y[]; };\n"
        "void main() { y[0] = helper(1.0); }\n"
    )
    with pytest.raises(vkcore.ShaderCompileError) as info:
        vkcore.Program(path=main, include_dirs=[tmp_path / "inc"], device=device)
    assert any(m.startswith(f"{tmp_path / 'inc' / 'helper.glsl'}:3:") for m in info.value.messages)


def test_uniform_block_and_struct_stride(device):
    src = """#version 450
layout(local_size_x = 1) in;
struct S { vec3 p; float w; };
layout(std140, binding = 0) uniform U { vec4 a[4]; float s; } u;
layout(std430, binding = 2) buffer B { uint count; S items[]; };
void main() { items[0].w = u.a[3].x * u.s + float(count); }
"""
    p = vkcore.Program(src, device=device)
    assert [b.binding for b in p.bindings] == [0, 2]
    ub = np.zeros(17, np.float32)
    ub[12], ub[16] = 3.0, 10.0
    out = np.zeros(8, np.float32)  # count + pad (16 bytes), one 16-byte item
    out.view(np.uint32)[0] = 5
    p(ub, out)
    assert out[7] == 35.0
    with pytest.raises(ValueError, match="fixed part \\(68 bytes\\)"):
        p(np.zeros(16, np.float32), out)
    limit = device.info.max_uniform_buffer_range  # a bound uniform buffer: at most this
    with pytest.raises(ValueError, match=f"maxUniformBufferRange, {limit}"):
        p(np.zeros(limit // 4 + 1, np.float32), out)
    with pytest.raises(ValueError, match="whole elements of 16 bytes"):
        p(ub, np.zeros(6, np.float32))


# --------------------------------------------------------------------------- defects
@pytest.mark.parametrize("value", [1e39, 1e300, 10**400], ids=["1e39", "1e300", "10**400"])
def test_a_float_push_constant_beyond_float32_is_taken_or_named(prog, value):
    """README: 'float members any real number'. A real number beyond float32's range must be
    taken (as float32 does: inf) or refused by an error naming the member 'a'; it raises a
    bare OverflowError ('float too large to pack with f format') that names nothing."""
    x = np.ones(4, np.float32)
    y = np.zeros(4, np.float32)
    try:
        prog(x, y, a=value, n=4, k=0)
    except (TypeError, ValueError) as exc:
        assert "'a'" in str(exc)
    else:
        assert np.all(np.isinf(y))


def test_a_float_spec_constant_beyond_float32_is_taken_or_named(device):
    """README: specialization constants are 'type- and range-checked'; 1e39 for the float
    constant BIAS raises a bare OverflowError instead of a ValueError naming BIAS."""
    try:
        vkcore.Program(SCALE, spec={"BIAS": 1e39}, device=device)
    except (TypeError, ValueError) as exc:
        assert "BIAS" in str(exc)
