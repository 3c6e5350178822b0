"""Program arguments take the element type the shader declares: a list or a float64 array
for ``float x[]`` is uploaded as float32 values (it was uploaded as float64 bytes), an
int32 Tensor for ``float x[]`` is refused (it was reinterpreted), a result array must have
the binding's dtype. Every element type against every kind of source, outside and inside
a sequence, through ``record`` too, against an oracle written apart from vkcore's rule."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conversion_rule import NUMERIC, SOURCES, oracle

import vkcore
from vkcore import spirv
from vkcore.compute import program_args
from vkcore.spirv import reflect

# GLSL element type -> numpy dtype, for the types the session device can run.
ON_DEVICE = {
    "float": "float32",
    "int": "int32",
    "uint": "uint32",
    "int8_t": "int8",
    "uint8_t": "uint8",
}
COPY = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 1) in;
layout(std430, binding = 0) readonly buffer X { T x[]; };
layout(std430, binding = 1) writeonly buffer Y { T y[]; };
void main() { y[gl_GlobalInvocationID.x] = x[gl_GlobalInvocationID.x]; }
"""


@pytest.fixture(scope="module")
def copies(device):
    return {t: vkcore.Program(COPY.replace("T ", f"{t} "), device=device) for t in ON_DEVICE}


def _run(prog, x, dtype: str, n: int = 4) -> np.ndarray:
    y = np.zeros(n, dtype)
    prog(x, y, groups=n)
    return y


def test_bindings_reflect_their_element_type(copies):
    for glsl, dtype in ON_DEVICE.items():
        assert [b.element for b in copies[glsl].bindings] == [dtype, dtype]


@pytest.mark.parametrize("glsl", list(ON_DEVICE))
@pytest.mark.parametrize("source", list(SOURCES))
def test_a_numpy_or_list_argument_is_converted_by_the_rule(copies, glsl, source):
    dtype, x = ON_DEVICE[glsl], SOURCES[source]
    want = oracle(x, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way either
        if isinstance(want, type):
            with pytest.raises(want, match=r"buffer 0 \(binding 0"):
                _run(copies[glsl], x, dtype)
            return
        got = _run(copies[glsl], x, dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("glsl", list(ON_DEVICE))
@pytest.mark.parametrize("tensor_dtype", [str(d) for d in vkcore.compute.tensor.TENSOR_DTYPES])
def test_a_tensor_of_another_dtype_is_refused_not_reinterpreted(device, copies, glsl, tensor_dtype):
    dtype = ON_DEVICE[glsl]
    t = vkcore.asarray(np.array([1, 2, 3, 4]), dtype=tensor_dtype, device=device)
    if tensor_dtype != dtype:
        with pytest.raises(TypeError, match=rf"buffer 0 \(binding 0 X\) holds {dtype}"):
            _run(copies[glsl], t, dtype)
        with pytest.raises(TypeError, match="buffer 0"):
            copies[glsl].record(t, vkcore.Tensor.empty((4,), dtype, device), groups=4)
        with vkcore.sequence(device=device), pytest.raises(TypeError, match="buffer 0"):
            copies[glsl](t, vkcore.Tensor.empty((4,), dtype, device), groups=4)
        return
    np.testing.assert_array_equal(_run(copies[glsl], t, dtype), [1, 2, 3, 4])


@pytest.mark.parametrize("glsl", list(ON_DEVICE))
@pytest.mark.parametrize("result_dtype", NUMERIC)
def test_a_result_array_must_have_the_element_dtype(copies, glsl, result_dtype):
    dtype = ON_DEVICE[glsl]
    x = np.array([1, 2, 3, 4], dtype)
    y = np.zeros(4, result_dtype)
    if result_dtype != dtype:
        with pytest.raises(TypeError, match=rf"buffer 1 \(binding 1 Y\) .* must be {dtype}"):
            copies[glsl](x, y, groups=4)
        assert not y.any()
        return
    copies[glsl](x, y, groups=4)
    np.testing.assert_array_equal(y, x)
    swapped = np.zeros(4, np.dtype(dtype).newbyteorder(">"))
    if swapped.dtype != y.dtype:  # (one-byte types have no byte order)
        with pytest.raises(TypeError, match="buffer 1"):
            copies[glsl](x, swapped, groups=4)


@pytest.mark.parametrize("glsl", list(ON_DEVICE))
@pytest.mark.parametrize(
    "source", ["list-float", "list-int", "array-float64", "array-int64", "list-300", "bool"]
)
def test_inside_a_sequence_the_same_rule(device, copies, glsl, source):
    dtype, x = ON_DEVICE[glsl], SOURCES[source]
    want = oracle(x, dtype)
    y = vkcore.Tensor.empty((4,), dtype, device)
    with vkcore.sequence(device=device):
        if isinstance(want, type):
            with pytest.raises(want, match="buffer 0"):
                copies[glsl](x, y, groups=4)
            return
        copies[glsl](x, y, groups=4)
    np.testing.assert_array_equal(y.numpy(), want)


def test_a_buffer_is_bound_as_its_bytes(device, copies):
    """The way to pass bits on purpose: a Tensor's Buffer in record(), or a numpy view."""
    x = vkcore.asarray(np.array([1.0, -2.0], np.float32), device=device)
    y = vkcore.Tensor.empty((2,), np.uint32, device)
    device.submitter.run([copies["uint"].record(x.buffer, y, groups=2)])
    np.testing.assert_array_equal(y.numpy(), np.array([1.0, -2.0], np.float32).view(np.uint32))
    out = np.zeros(2, np.uint32)
    copies["uint"](np.array([1.0, -2.0], np.float32).view(np.uint32), out, groups=2)
    np.testing.assert_array_equal(out, y.numpy())


MIXED = """#version 450
layout(local_size_x = 1) in;
layout(std430, binding = 0) readonly buffer X { uint n; float scale; float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() { uint i = gl_GlobalInvocationID.x; if (i < n) y[i] = scale * x[i]; }
"""


def test_a_block_of_mixed_types_takes_the_bytes_of_a_numpy_array(device):
    prog = vkcore.Program(MIXED, device=device)
    assert [b.element for b in prog.bindings] == ["", "float32"]
    head = np.dtype([("n", "<u4"), ("scale", "<f4"), ("x", "<f4", (3,))])
    data = np.array([(3, 2.0, (1.0, 2.0, 3.0))], head)
    y = np.zeros(3, np.float32)
    prog(data, y, groups=3)
    np.testing.assert_array_equal(y, [2, 4, 6])
    words = np.array([3, 0, 0, 0, 0], np.uint32)
    words[1:].view(np.float32)[:] = [0.5, 2, 4, 6]
    prog(words, y, groups=3)
    np.testing.assert_array_equal(y, [1, 2, 3])
    for bad, error in [
        ([3, 1, 1, 1, 1], TypeError),  # a list: no one element type to convert it to
        (words.astype(">u4"), TypeError),  # its bytes would be read in the wrong order
        (np.array([1, None, 2, 3, 4], dtype=object), TypeError),
        ("words", TypeError),
    ]:
        with pytest.raises(error, match="buffer 0"):
            prog(bad, y, groups=3)
    t = vkcore.asarray(words, device=device)  # a Tensor of any dtype: its bytes
    prog(t, y, groups=3)
    np.testing.assert_array_equal(y, [1, 2, 3])


TEXEL = """#version 450
#extension GL_EXT_samplerless_texture_functions : require
layout(local_size_x = 1) in;
layout(binding = 0) uniform textureBuffer f;
layout(binding = 1) uniform utextureBuffer u;
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) writeonly buffer P { uint p[]; };
void main() {
    int i = int(gl_GlobalInvocationID.x);
    o[i] = texelFetch(f, i).x;
    p[i] = texelFetch(u, i).x;
}
"""


def test_texel_bindings_take_their_view_format_element(device):
    prog = vkcore.Program(TEXEL, texel={0: "r32f", 1: "r32ui"}, device=device)
    o, p = np.zeros(3, np.float32), np.zeros(3, np.uint32)
    prog([0.1, 1e39, 3], [1, 2, 2**32 - 1], o, p, groups=3)
    np.testing.assert_array_equal(o, np.array([0.1, np.inf, 3], np.float32))
    np.testing.assert_array_equal(p, [1, 2, 2**32 - 1])
    with pytest.raises(TypeError, match="buffer 1 .* uint32"):
        prog([0.1, 1, 3], [1.5, 2, 3], o, p, groups=3)
    with pytest.raises(ValueError, match="buffer 1 .* uint32 exactly"):
        prog([0.1, 1, 3], [1, 2, 2**32], o, p, groups=3)
    with pytest.raises(TypeError, match="buffer 0 .* float32"):
        prog(
            vkcore.asarray(np.array([1, 2, 3], np.int32), device=device), [1, 2, 3], o, p, groups=3
        )


def test_a_uniform_block_converts_too(device):
    src = """#version 450
layout(local_size_x = 1) in;
layout(std140, binding = 0) uniform U { vec4 k; } u;
layout(std430, binding = 1) writeonly buffer O { vec4 o; };
void main() { o = u.k * 2.0; }
"""
    prog = vkcore.Program(src, device=device)
    out = np.zeros(4, np.float32)
    prog([1, 2.5, 3, 4], out)
    np.testing.assert_array_equal(out, [2, 5, 6, 8])


# Element types the session device has no features for (16- and 64-bit storage): their
# reflection, and the conversion of each source, checked without a dispatch.
OFF_DEVICE = {
    "float16_t": "float16",
    "int16_t": "int16",
    "uint16_t": "uint16",
    "double": "float64",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "f16vec4": "float16",
    "dmat2": "float64",
    "i64vec2": "int64",
}


@pytest.fixture(scope="module")
def off_device_bindings():
    out = {}
    for glsl in OFF_DEVICE:
        code = spirv.compile_source(COPY.replace("T ", f"{glsl} ")).code
        out[glsl] = reflect.reflect(code).bindings
    return out


@pytest.mark.parametrize("glsl", list(OFF_DEVICE))
@pytest.mark.parametrize("source", list(SOURCES))
def test_other_element_types_convert_by_the_rule(device, off_device_bindings, glsl, source):
    dtype, x = OFF_DEVICE[glsl], SOURCES[source]
    bindings = off_device_bindings[glsl]
    assert [b.element for b in bindings] == [dtype, dtype]
    rules = program_args.BindingRules(device, {}, 1 << 30, program_args.elements(bindings, {}))
    want = oracle(x, dtype)
    # a whole number of the binding's elements (a vec4 of float16 is 8 bytes)
    repeat = bindings[0].stride // np.dtype(dtype).itemsize
    xs = np.tile(np.asarray(x), repeat) if repeat > 1 and not isinstance(want, type) else x
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if isinstance(want, type):
            with pytest.raises(want, match="buffer 0"):
                program_args.Argument.of(rules, bindings[0], x, 0)
            return
        arg = program_args.Argument.of(rules, bindings[0], xs, 0)
    assert arg.array is not None and arg.array.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(arg.array, np.tile(want, repeat) if repeat > 1 else want)
    with pytest.raises(TypeError, match="buffer 1"):  # a result array of another dtype
        program_args.Argument.of(rules, bindings[1], np.zeros(4 * repeat, np.float32), 1)


def test_element_types_of_blocks():
    """One scalar type through vectors, matrices, arrays and structs; "" when mixed."""
    cases = {
        "vec4 v[];": "float32",
        "mat4 m; vec4 v[];": "float32",
        "uvec2 a[3]; uint n;": "uint32",
        "float a; int b;": "",
        "uint n; float x[];": "",
        "S s[];": "float32",
        "T t[];": "",
    }
    for members, want in cases.items():
        src = (
            "#version 450\nlayout(local_size_x = 1) in;\n"
            "struct S { vec3 p; float w; };\nstruct T { vec3 p; uint id; };\n"
            f"layout(std430, binding = 0) buffer B {{ {members} }};\n"
            "void main() {}\n"
        )
        (b,) = reflect.reflect(spirv.compile_source(src).code).bindings
        assert b.element == want, members


# --------------------------------------------------------------------------- adversarial
def test_the_held_fast_path_converts_and_refuses_as_the_first_call_does(device, copies):
    """A repeated small call reuses its staging buffers without the general checks: an
    argument of the same byte size but another dtype must still be converted (or, for a
    result, refused) and not bound as bytes."""
    prog = copies["float"]
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    for _ in range(3):  # the staging buffers are held from here on
        prog(x, y, groups=8)
    assert len(prog._held) == 2
    same_bytes = [
        np.arange(4, dtype=np.float64),  # 32 bytes, 4 values
        np.arange(8, dtype=np.int32),  # 32 bytes, 8 values
        np.arange(8, dtype=np.uint32).astype(">u4"),
        np.arange(32, dtype=np.uint8)[:8],  # 8 bytes: a new staging size
    ]
    for given in same_bytes:
        y[:] = -1
        prog(given, y, groups=len(given))
        np.testing.assert_array_equal(y[: len(given)], np.asarray(given).astype(np.float32))
    for out in (np.zeros(8, np.int32), np.zeros(8, np.uint32), np.zeros(4, np.float64)):
        with pytest.raises(TypeError, match="buffer 1"):
            prog(x, out, groups=8)
        assert not out.any()


@pytest.mark.parametrize(
    "given",
    [object(), (i for i in range(4)), {1: 2}, {1, 2}, None, b"\0\0\0\0", memoryview(b"1234")],
    ids=["object", "generator", "dict", "set", "None", "bytes", "memoryview"],
)
def test_what_is_not_an_array_is_refused_naming_its_type(device, copies, given):
    prog = copies["float"]
    y = np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=rf"buffer 0 .*{type(given).__name__}"):
        prog(given, y, groups=4)
    with vkcore.sequence(device=device), pytest.raises(TypeError, match="buffer 0"):
        prog(given, vkcore.Tensor.empty((4,), np.float32, device), groups=4)


def test_a_recorded_buffer_argument_outside_a_sequence_is_named(device, copies):
    buf = vkcore.asarray(np.ones(4, np.float32), device=device).buffer
    with pytest.raises(TypeError, match="buffer 0 .*Buffer"):
        copies["float"](buf, np.zeros(4, np.float32), groups=4)


@pytest.mark.parametrize("scalar", [2.5, np.float64(2.5), np.float16(2.5), 2, np.int64(2)])
def test_a_scalar_is_one_element(copies, scalar):
    y = np.zeros(1, np.float32)
    copies["float"](scalar, y, groups=1)
    assert y[0] == np.float32(scalar)
