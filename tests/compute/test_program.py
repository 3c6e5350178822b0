"""vkcore.Program: users' own compute shaders on the device layer, and reflection."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from repo_paths import REPO

import vkcore
from vkcore import spirv
from vkcore.spirv import reflect

SCALE = """#version 450
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int REPEAT = 1;
layout(constant_id = 2) const float OFFSET = 0.0;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { float a; uint n; int shift; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n) return;
    float v = x[i];
    for (int r = 0; r < REPEAT; ++r) v = v * pc.a;
    y[i] = v + OFFSET + float(pc.shift);
}
"""

# A block with a fixed part (a header of 16 bytes) before its runtime array of vec2.
HEADER = """#version 450
layout(local_size_x = 8) in;
layout(std430, binding = 0) buffer D { uint count; uint pad0; uint pad1; uint pad2; vec2 v[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < count) v[i] = v[i].yx;
}
"""


def _scale(device, **kw):
    return vkcore.Program(SCALE, device=device, **kw)


def test_glsl_from_a_string_with_spec_constants_and_numpy_write_back(device):
    prog = _scale(device, spec={"REPEAT": 3, "OFFSET": 0.5}, workgroup=32)
    assert prog.workgroup == (32, 1, 1)
    assert [b.binding for b in prog.bindings] == [0, 1]
    assert [(b.readonly, b.writeonly) for b in prog.bindings] == [(True, False), (False, True)]
    assert [(m.name, m.offset, m.kind) for m in prog.push] == [
        ("a", 0, "float"),
        ("n", 4, "uint"),
        ("shift", 8, "int"),
    ]
    named = {c.name: (c.id, c.kind, c.default) for c in prog.spec_constants if c.name}
    assert named == {"REPEAT": (1, "int", 1), "OFFSET": (2, "float", 0.0)}
    x = np.arange(100, dtype=np.float32)
    before = x.copy()
    y = np.full(100, -1, np.float32)
    prog(x, y, groups=4, a=2.0, n=100, shift=-3)
    np.testing.assert_array_equal(y, x * 8 + np.float32(0.5) - 3)
    np.testing.assert_array_equal(x, before)  # readonly bindings are only uploaded


def test_tensors_in_and_out(device):
    prog = _scale(device, workgroup=64)
    x = np.linspace(-1, 1, 300, dtype=np.float32)
    t = vkcore.asarray(x, device=device)
    out = vkcore.Tensor.empty((300,), np.float32, device)
    prog(t, out, groups=(5, 1, 1), a=3.0, n=300, shift=0)
    np.testing.assert_array_equal(out.numpy(), x * np.float32(3))


def test_a_file_with_includes_and_defines(device, tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "ops.glsl").write_text("float op(float v) { return v * float(FACTOR) + 1.0; }\n")
    (tmp_path / "local.glsl").write_text("const uint LANES = 16;\n")
    src = tmp_path / "apply.comp"
    src.write_text(
        "#version 450\n#extension GL_GOOGLE_include_directive : require\n"
        '#include "local.glsl"\n#include "ops.glsl"\n'
        "layout(local_size_x = LANES) in;\n"
        "layout(std430, binding = 0) buffer D { float d[]; };\n"
        "void main() { d[gl_GlobalInvocationID.x] = op(d[gl_GlobalInvocationID.x]); }\n"
    )
    prog = vkcore.Program(path=src, include_dirs=[inc], defines={"FACTOR": 4}, device=device)
    assert prog.workgroup == (16, 1, 1) and prog.bindings[0].readonly is False
    d = np.arange(32, dtype=np.float32)
    prog(d, groups=2)
    np.testing.assert_array_equal(d, np.arange(32, dtype=np.float32) * 4 + 1)
    # The key covers the included files: changing one gives another SPIR-V.
    key = prog.code.key
    (inc / "ops.glsl").write_text("float op(float v) { return v - 1.0; }\n")
    again = vkcore.Program(path=src, include_dirs=[inc], defines={"FACTOR": 4}, device=device)
    assert again.code.key != key
    prog2 = vkcore.Program(path=src, include_dirs=[inc], defines={"FACTOR": 4}, device=device)
    assert prog2.pipeline is again.pipeline


def test_spirv_bytes_and_shared_pipelines(device):
    first = _scale(device, workgroup=16)
    same = _scale(device, workgroup=16)
    assert same.pipeline is first.pipeline
    other = _scale(device, workgroup=32)
    assert other.pipeline is not first.pipeline
    from_blob = vkcore.Program(spirv=first.code.code, workgroup=16, device=device)
    assert from_blob.push == first.push and from_blob.bindings == first.bindings
    x = np.ones(16, np.float32)
    y = np.zeros(16, np.float32)
    from_blob(x, y, a=5.0, n=16, shift=1)
    np.testing.assert_array_equal(y, np.full(16, 6, np.float32))


def test_a_block_with_a_fixed_part(device):
    prog = vkcore.Program(HEADER, device=device)
    assert (prog.bindings[0].fixed_bytes, prog.bindings[0].stride) == (16, 8)
    data = np.zeros(4 + 2 * 10, np.uint32)
    data[0] = 10
    pairs = data[4:].view(np.float32).reshape(10, 2)
    pairs[:] = np.arange(20, dtype=np.float32).reshape(10, 2)
    expected = pairs[:, ::-1].copy()
    prog(data, groups=2)
    np.testing.assert_array_equal(data[4:].view(np.float32).reshape(10, 2), expected)
    with pytest.raises(ValueError, match="smaller than the block's fixed part"):
        prog(np.zeros(3, np.uint32), groups=1)
    with pytest.raises(ValueError, match="whole elements of 8 bytes"):
        prog(np.zeros(5, np.uint32), groups=1)


def test_push_constant_errors(device):
    prog = _scale(device)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(TypeError, match="no push constant 'b'"):
        prog(x, y, a=1.0, n=4, shift=0, b=2)
    with pytest.raises(TypeError, match="'shift' is missing"):
        prog(x, y, a=1.0, n=4)
    with pytest.raises(TypeError, match="'n' is an uint, got float"):
        prog(x, y, a=1.0, n=4.0, shift=0)
    with pytest.raises(ValueError, match="'n' .* must be in 0..4294967295, got -1"):
        prog(x, y, a=1.0, n=-1, shift=0)
    with pytest.raises(TypeError, match="'a' is a float, got str"):
        prog(x, y, a="1", n=4, shift=0)
    with pytest.raises(ValueError, match="push must be 12 bytes"):
        prog(x, y, push=b"\0" * 8)
    with pytest.raises(TypeError, match="not both"):
        prog(x, y, push=b"\0" * 12, a=1.0)
    block = np.array([2.0], "<f4").tobytes() + np.array([4, 1], "<u4").tobytes()
    prog(x, y, push=block, groups=4)  # local size 1 (the shader's default)
    np.testing.assert_array_equal(y, np.full(4, 3, np.float32))


def test_buffer_count_and_numpy_result_errors(device):
    prog = _scale(device)
    x = np.ones(4, np.float32)
    push = {"a": 1.0, "n": 4, "shift": 0}
    with pytest.raises(TypeError, match="takes 2 buffers .* got 1"):
        prog(x, **push)
    with pytest.raises(TypeError, match="takes 2 buffers .* got 3"):
        prog(x, x.copy(), x.copy(), **push)
    with pytest.raises(ValueError, match="writable and C-contiguous"):
        prog(x, np.zeros(8, np.float32)[::2], **push)
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable and C-contiguous"):
        prog(x, frozen, **push)
    with pytest.raises(TypeError, match="pass a numpy array"):
        prog(x, [0.0, 0.0, 0.0, 0.0], **push)
    # float x[] holds float32: a result array of another dtype is refused, not reinterpreted
    with pytest.raises(TypeError, match="must be float32, got uint8"):
        prog(np.ones(4, np.float32), np.zeros(16, np.uint8), **push)
    with pytest.raises(ValueError, match="empty"):
        prog(np.ones(0, np.float32), np.zeros(4, np.float32), **push)
    # A readonly binding takes any array-like (uploaded as a contiguous copy).
    y = np.zeros(4, np.float32)
    prog(np.ones(8, np.float32)[::2], y, groups=4, **push)
    np.testing.assert_array_equal(y, np.ones(4, np.float32))


def test_groups_and_workgroup_errors(device):
    prog = _scale(device)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    limit = device.info.max_compute_work_group_count[0]
    with pytest.raises(ValueError, match=r"groups\[0\] = .*maxComputeWorkGroupCount"):
        prog(x, y, groups=limit + 1, a=1.0, n=4, shift=0)
    with pytest.raises(ValueError, match=r"groups\[1\] = 0"):
        prog(x, y, groups=(1, 0), a=1.0, n=4, shift=0)
    with pytest.raises(TypeError, match="groups must be"):
        prog(x, y, groups=1.5, a=1.0, n=4, shift=0)
    with pytest.raises(ValueError, match="maxComputeWorkGroupInvocations|maxComputeWorkGroupSize"):
        _scale(device, workgroup=device.info.max_compute_work_group_invocations + 1)
    with pytest.raises(ValueError, match="fixes local_size_x"):
        vkcore.Program(HEADER, workgroup=4, device=device)


def test_spec_constant_errors(device):
    with pytest.raises(ValueError, match="no specialization constant 'REPEATS'"):
        _scale(device, spec={"REPEATS": 2})
    with pytest.raises(TypeError, match="spec: REPEAT is an int, got float"):
        _scale(device, spec={"REPEAT": 2.5})
    with pytest.raises(ValueError, match="no specialization constant 9"):
        _scale(device, spec={9: 1})
    prog = _scale(device, spec={1: 2})  # by SpecId too
    x, y = np.full(2, 3, np.float32), np.zeros(2, np.float32)
    prog(x, y, groups=2, a=2.0, n=2, shift=0)
    np.testing.assert_array_equal(y, np.full(2, 12, np.float32))


def test_construction_errors(device, tmp_path):
    with pytest.raises(TypeError, match="exactly one of source, path or spirv"):
        vkcore.Program(device=device)
    with pytest.raises(TypeError, match="exactly one of source, path or spirv"):
        vkcore.Program(SCALE, spirv=b"1234", device=device)
    with pytest.raises(vkcore.InvalidSpirvError, match="rejected the SPIR-V module"):
        vkcore.Program(spirv=b"\x03\x02\x23\x07" * 8, device=device)
    with pytest.raises(FileNotFoundError, match="no shader file"):
        vkcore.Program(path=tmp_path / "missing.comp", device=device)


def test_a_glsl_error_names_file_and_line(device, tmp_path):
    with pytest.raises(vkcore.ShaderCompileError) as info:
        vkcore.Program("#version 450\nlayout(local_size_x=1) in;\nvoid main() { nope(); }\n")
    assert any(m.startswith("<string>:3:") and "nope" in m for m in info.value.messages)
    (tmp_path / "bad.glsl").write_text("float f() { return missing_name; }\n")
    src = tmp_path / "user.comp"
    src.write_text(
        "#version 450\n#extension GL_GOOGLE_include_directive : require\n"
        '#include "bad.glsl"\nlayout(local_size_x=1) in;\nvoid main() {}\n'
    )
    with pytest.raises(vkcore.ShaderCompileError) as info:
        vkcore.Program(path=src, device=device)
    text = str(info.value)
    assert "bad.glsl:1:" in text and "missing_name" in text and str(src) in text
    assert isinstance(info.value, RuntimeError)


def test_reflection_of_uniform_and_texel_bindings(device):
    src = """#version 450
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x = 4, local_size_y = 2) in;
layout(std140, binding = 3) uniform U { vec4 k; } u;
layout(binding = 1) uniform textureBuffer tex;
layout(std430, binding = 5) writeonly buffer O { vec4 o[]; };
void main() { uint i = gl_LocalInvocationIndex; o[i] = texelFetch(tex, int(i)) * u.k; }
"""
    prog = vkcore.Program(src, texel={1: "rgba32f"}, device=device)
    kinds = [(b.binding, b.kind) for b in prog.bindings]
    assert kinds == [
        (1, reflect.UNIFORM_TEXEL_BUFFER),
        (3, reflect.UNIFORM_BUFFER),
        (5, reflect.STORAGE_BUFFER),
    ]
    assert prog.workgroup == (4, 2, 1) and prog.bindings[1].fixed_bytes == 16
    texels = np.arange(32, dtype=np.float32)
    k = np.array([1, 2, 3, 4], np.float32)
    out = np.zeros(32, np.float32)
    prog(texels, k, out, groups=1)
    np.testing.assert_array_equal(out, texels * np.tile(k, 8))
    with pytest.raises(ValueError, match="textureBuffer; give its view format"):
        vkcore.Program(src, device=device)
    with pytest.raises(ValueError, match="binding 5 is not a textureBuffer"):
        vkcore.Program(src, texel={1: "rgba32f", 5: "r32f"}, device=device)


def test_a_second_process_needs_no_compiler(tmp_path):
    """Compiled once here; a process with no glslangValidator on PATH finds it cached."""
    env = dict(os.environ, VKCORE_CACHE_DIR=str(tmp_path / "cache"))
    script = tmp_path / "run.py"
    script.write_text(
        "import shutil, sys, numpy as np, vkcore\n"
        f"src = {SCALE!r}\n"
        "prog = vkcore.Program(src, workgroup=8)\n"
        "x = np.arange(8, dtype=np.float32); y = np.zeros(8, np.float32)\n"
        "prog(x, y, a=2.0, n=8, shift=1)\n"
        "assert np.array_equal(y, x * 2 + 1), y\n"
        "print(prog.code.origin, shutil.which('glslangValidator'))\n"
    )
    first = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split()[0] == "compiled"
    bare = tmp_path / "bin"
    bare.mkdir()
    no_compiler = dict(env, PATH=str(bare))
    second = subprocess.run(
        [sys.executable, str(script)], env=no_compiler, capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["cache", "None"]


def test_spirv_cache_entries_of_user_sources(tmp_path, monkeypatch):
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    spirv.clear_memory_cache()
    text = SCALE.replace("REPEAT = 1", "REPEAT = 2")
    assert spirv.compile_source(text).origin == "compiled"
    spirv.clear_memory_cache()
    assert spirv.compile_source(text).origin == "cache"
    entries = list((tmp_path / "spirv").glob("*.spv"))
    assert len(entries) == 2  # this compiler's key and the any-compiler one
    assert (
        spirv.compile_source(text, defines={"UNUSED_FLAG": 1}).key != spirv.compile_source(text).key
    )


def test_reflect_refuses_what_it_cannot_read():
    with pytest.raises(reflect.ReflectionError, match="not whole 32-bit words"):
        reflect.reflect(b"\x03\x02\x23")
    with pytest.raises(reflect.ReflectionError, match="magic"):
        reflect.reflect(b"\0" * 20)


def test_the_builtin_shaders_reflect_as_their_kernels_bind_them():
    """vkcore's own matvec shader, read back: what matvec.py binds and pushes."""
    code = spirv.get("matvec.comp", {"MODE": 1, "WSIGNED": 1, "ASYM": 0, "TEXEL": 0}).code
    iface = reflect.reflect(code)
    assert [b.binding for b in iface.bindings] == list(range(8))
    assert iface.bindings[7].writeonly and all(b.readonly for b in iface.bindings[:7])
    assert iface.push_size == 28 and iface.local_size_ids[0] == 0


def test_the_program_source_is_documented():
    page = (REPO / "docs" / "programs.md").read_text()
    assert page.startswith("# Your own shaders")


def test_spec_is_set_once_and_by_name_or_id(device):
    with pytest.raises(ValueError, match="both set SpecId 0"):
        _scale(device, spec={0: 32}, workgroup=64)
    with pytest.raises(ValueError, match="a second time"):
        _scale(device, spec={"REPEAT": 2, 1: 3})
    with pytest.raises(TypeError, match="names .* or SpecIds"):
        _scale(device, spec={1.0: 2})
    assert _scale(device, spec={0: 32}).workgroup == (32, 1, 1)  # the local size by SpecId


def test_float_values_beyond_float32_are_named(device):
    prog = _scale(device)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    for value in (1e39, -1e300, 10**400):
        with pytest.raises(ValueError, match="'a' .*float32"):
            prog(x, y, groups=4, a=value, n=4, shift=0)
    prog(x, y, groups=4, a=np.inf, n=4, shift=0)  # inf is a float32 value
    assert np.all(np.isposinf(y))
    with pytest.raises(ValueError, match="spec: OFFSET .*float32"):
        _scale(device, spec={"OFFSET": 1e39})


def test_text_is_not_a_buffer_and_huge_uniform_blocks_are_refused(device):
    prog = _scale(device)
    with pytest.raises(TypeError, match="numpy array or a vkcore.Tensor, got str"):
        prog("abcd", np.zeros(4, np.float32), groups=4, a=1.0, n=4, shift=0)
    big = """#version 450
layout(local_size_x = 1) in;
layout(std140, binding = 0) uniform U { vec4 v[N]; } u;
layout(std430, binding = 1) buffer O { vec4 o[]; };
void main() { o[0] = u.v[0]; }
"""
    limit = device.info.max_uniform_buffer_range  # the device's value, not Vulkan's minimum
    fits = vkcore.Program(big, defines={"N": limit // 16}, device=device)
    assert fits.bindings[0].fixed_bytes == limit
    with pytest.raises(
        ValueError,
        match=f"uniform block of {limit + 16} bytes.*maxUniformBufferRange \\({limit}\\)",
    ):
        vkcore.Program(big, defines={"N": limit // 16 + 1}, device=device)
