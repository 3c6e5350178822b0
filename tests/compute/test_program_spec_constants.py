"""Specialization constants of every width: 64-bit ones (double, int64_t, uint64_t) go to
the pipeline as 8 bytes and their reflected defaults are read from both words; 8- and
16-bit ones as 1 and 2 bytes, their defaults sign-extended where signed. Each value is
read back from the shader bit for bit, set and left at its default."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import vkcore
from vkcore.compute import push_block
from vkcore.errors import shown
from vkcore.spirv import reflect

WIDE = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 1) in;
layout(constant_id = 0) const double D = 0.1;
layout(constant_id = 1) const double E = -2.25;
layout(constant_id = 2) const int64_t I = -1099511627783L;
layout(constant_id = 3) const uint64_t U = 9223372036854775813UL;
layout(std430, binding = 0) writeonly buffer F { double f[]; };
layout(std430, binding = 1) writeonly buffer S { int64_t s[]; };
layout(std430, binding = 2) writeonly buffer V { uint64_t v[]; };
void main() { f[0] = D; f[1] = E; s[0] = I; v[0] = U; }
"""
# The defaults as written in WIDE (0.1 and the 64-bit integers have bits in both words).
WIDE_DEFAULTS = {"D": 0.1, "E": -2.25, "I": -(2**40) - 7, "U": 2**63 + 5}

NARROW = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
layout(local_size_x = 1) in;
layout(constant_id = 0) const int8_t A = int8_t(-100);
layout(constant_id = 1) const uint8_t B = uint8_t(200);
layout(constant_id = 2) const int16_t C = int16_t(-30000);
layout(constant_id = 3) const uint16_t G = uint16_t(60000);
layout(constant_id = 4) const float16_t H = float16_t(-2.75);
layout(std430, binding = 0) buffer O { int o[]; };
layout(std430, binding = 1) buffer P { float p[]; };
void main() {
    // Converted at run time (a zero read from the buffer keeps the compiler from making
    // the conversions specialization-constant operations, which need SPIR-V 1.4).
    int zero = o[4];
    o[0] = int(A + int8_t(zero)); o[1] = int(B + uint8_t(zero));
    o[2] = int(C + int16_t(zero)); o[3] = int(G + uint16_t(zero));
    p[0] = float(H + float16_t(zero));
}
"""
NARROW_DEFAULTS = {"A": -100, "B": 200, "C": -30000, "G": 60000, "H": -2.75}


def run_wide(device, **spec):
    prog = vkcore.Program(WIDE, spec=spec, device=device)
    f, s, v = np.zeros(2), np.zeros(1, np.int64), np.zeros(1, np.uint64)
    prog(f, s, v)
    return {"D": f[0], "E": f[1], "I": s[0], "U": v[0]}


def assert_same_bits(got, want):
    for name, value in want.items():
        if isinstance(value, float):
            assert np.float64(got[name]).view(np.uint64) == np.float64(value).view(np.uint64), name
        else:
            assert int(got[name]) == value, (name, got[name], value)


def test_64_bit_defaults_are_read_from_both_words(device):
    prog = vkcore.Program(WIDE, device=device)
    defaults = {c.name: c.default for c in prog.spec_constants}
    assert defaults == WIDE_DEFAULTS
    assert {c.bits for c in prog.spec_constants} == {64}
    assert_same_bits(run_wide(device), WIDE_DEFAULTS)


@pytest.mark.parametrize(
    "values",
    [
        {"D": 2.25, "E": -0.0, "I": -1, "U": 2**40 + 3},
        {"D": 1e300, "E": float(np.finfo(np.float64).tiny), "I": -(2**63), "U": 2**64 - 1},
        {"D": float("inf"), "E": 5e-324, "I": 2**63 - 1, "U": 0},
    ],
)
def test_64_bit_values_reach_the_shader_bit_for_bit(device, values):
    assert_same_bits(run_wide(device, **values), values)


def test_narrow_constants_defaults_and_values(device):
    prog = vkcore.Program(NARROW, device=device)
    assert {c.name: c.default for c in prog.spec_constants} == NARROW_DEFAULTS
    assert [c.bits for c in prog.spec_constants] == [8, 8, 16, 16, 16]
    for spec, want in [
        ({}, NARROW_DEFAULTS),
        (
            {"A": -128, "B": 255, "C": -32768, "G": 65535, "H": 0.1},
            {"A": -128, "B": 255, "C": -32768, "G": 65535, "H": float(np.float16(0.1))},
        ),
        ({"A": 127, "B": 0, "C": 32767, "G": 0, "H": -65504.0}, None),
    ]:
        want = want or {**spec}
        o, p = np.zeros(5, np.int32), np.zeros(1, np.float32)
        vkcore.Program(NARROW, spec=spec, device=device)(o, p)
        assert o.tolist() == [want["A"], want["B"], want["C"], want["G"], 0]
        assert p[0] == want["H"]


@pytest.mark.parametrize(
    ("name", "value", "error", "match"),
    [
        ("I", 2**63, ValueError, r"spec: I \(int64\) must be in"),
        ("U", -1, ValueError, r"spec: U \(uint64\) must be in 0\.\.18446744073709551615"),
        ("U", 2**64, ValueError, r"\(uint64\)"),
        ("I", 1.5, TypeError, "spec: I is an int, got float"),
        ("D", "2", TypeError, "spec: D is a float, got str"),
        ("D", 10**400, ValueError, r"spec: D \(float64\) must be within"),
    ],
)
def test_64_bit_values_out_of_range_are_refused(device, name, value, error, match):
    with pytest.raises(error, match=match):
        vkcore.Program(WIDE, spec={name: value}, device=device)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("A", 128, r"\(int8\) must be in -128\.\.127"),
        ("A", -129, r"\(int8\)"),
        ("B", 256, r"\(uint8\) must be in 0\.\.255"),
        ("C", 2**15, r"\(int16\)"),
        ("G", -1, r"\(uint16\)"),
        ("H", 70000.0, r"\(float16\) must be within \+-65504"),
    ],
)
def test_narrow_values_out_of_range_are_refused(device, name, value, match):
    with pytest.raises(ValueError, match=match):
        vkcore.Program(NARROW, spec={name: value}, device=device)


@pytest.mark.parametrize(
    ("kind", "bits", "value", "packed"),
    [
        ("float", 64, 2.25, struct.pack("<d", 2.25)),
        ("int", 64, -1, b"\xff" * 8),
        ("uint", 64, 2**40 + 3, struct.pack("<Q", 2**40 + 3)),
        ("float", 32, 2.25, struct.pack("<f", 2.25)),
        ("int", 32, -1, b"\xff" * 4),
        ("bool", 32, True, struct.pack("<I", 1)),
        ("int", 16, -2, b"\xfe\xff"),
        ("uint", 8, 255, b"\xff"),
        ("float", 16, 1.5, np.float16(1.5).tobytes()),
    ],
)
def test_each_constant_is_packed_at_its_width(kind, bits, value, packed):
    const = reflect.SpecConstant(0, "K", kind, 0, bits)
    assert push_block.spec_bytes(const, value) == packed


@pytest.mark.parametrize("bits", [16, 32, 64])
def test_float_limits_in_messages_are_exact(bits):
    """At each float width the largest finite value is taken and the next float64 past it
    refused, with the limit written to every digit (3.4028235e38, just past float32's
    largest, was refused by a message giving 3.4028235e+38 as the limit)."""
    const = reflect.SpecConstant(0, "K", "float", 0, bits)
    top = float(np.finfo({16: np.float16, 32: np.float32, 64: np.float64}[bits]).max)
    assert push_block.spec_value(const, top) == top
    assert push_block.spec_value(const, -top) == -top
    past = np.nextafter(top, np.inf) if bits < 64 else 2**1024
    with pytest.raises(ValueError, match="must be within") as info:
        push_block.spec_value(const, past)
    limit = str(info.value).split("+-")[1].split(",")[0]
    assert float(limit) == top and limit != shown(past)


def test_push_float_limit_in_the_message_is_exact():
    member = reflect.PushMember("k", 0, "float", 0)
    top = float(np.finfo(np.float32).max)
    assert push_block.member_value(member, top) == top
    with pytest.raises(ValueError, match="must be within") as info:
        push_block.member_value(member, 3.4028235e38)
    assert float(str(info.value).split("+-")[1].split(",")[0]) == top
