"""A texel binding past maxTexelBufferElements is refused with an error naming the limit,
as a storage binding past maxStorageBufferRange is: never a view clamped to the limit
(whose texels beyond would read 0). lavapipe's limit (2^27 texels) is too large to
allocate past in a test, so the limit is lowered on a copy of device.info."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkcore

LIMIT = 64  # texels

READ = """#version 450
layout(local_size_x = 64) in;
layout(binding = 0) uniform textureBuffer t;
layout(std430, binding = 1) writeonly buffer Y { vec4 y[]; };
layout(push_constant) uniform P { uint n; } pc;
void main() { uint i = gl_GlobalInvocationID.x; if (i < pc.n) y[i] = texelFetch(t, int(i)); }
"""
TEXEL_FLOATS = {"r32f": 1, "rgba32f": 4}


@pytest.fixture
def small_texels(device, monkeypatch):
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_texel_buffer_elements=LIMIT)
    )
    return device


def program(device, fmt):
    return vkcore.Program(READ, texel={0: fmt}, device=device)


def texels(fmt, count):
    return np.arange(1, count * TEXEL_FLOATS[fmt] + 1, dtype=np.float32)


@pytest.mark.parametrize("fmt", sorted(TEXEL_FLOATS))
def test_a_binding_at_the_limit_reads_every_texel(small_texels, fmt):
    x = texels(fmt, LIMIT)
    y = np.zeros((LIMIT, 4), np.float32)
    program(small_texels, fmt)(x, y, n=LIMIT)
    want = x.reshape(LIMIT, -1)
    np.testing.assert_array_equal(y[:, : want.shape[1]], want)  # the last texel too


@pytest.mark.parametrize("fmt", sorted(TEXEL_FLOATS))
@pytest.mark.parametrize("how", ["numpy", "tensor", "recorded", "sequence"])
def test_a_binding_past_the_limit_is_refused(small_texels, fmt, how):
    dev = small_texels
    prog = program(dev, fmt)
    x = texels(fmt, LIMIT + 1)
    y = np.zeros((LIMIT + 1, 4), np.float32)
    match = rf"{LIMIT + 1} {fmt} texels .*maxTexelBufferElements, {LIMIT}\)"
    with pytest.raises(ValueError, match=match):
        if how == "numpy":
            prog(x, y, n=LIMIT + 1)
        elif how == "tensor":
            prog(vkcore.asarray(x, device=dev), y, n=LIMIT + 1)
        elif how == "recorded":
            bound = vkcore.asarray(x, device=dev)
            prog.record(bound, vkcore.asarray(y, device=dev), n=LIMIT + 1)
        else:
            out = vkcore.asarray(y, device=dev)
            with vkcore.sequence(device=dev):
                prog(x, out, n=LIMIT + 1)
    assert not y.any()  # nothing ran


def test_a_recorded_binding_may_end_in_a_partial_texel_within_the_limit(small_texels):
    prog = program(small_texels, "rgba32f")
    x = texels("rgba32f", LIMIT)
    bound = vkcore.asarray(np.concatenate([x, x[:3]]), device=small_texels)  # 3 floats more
    out = vkcore.asarray(np.zeros((LIMIT, 4), np.float32), device=small_texels)
    small_texels.run([prog.record(bound, out, n=LIMIT)])
    np.testing.assert_array_equal(out.numpy(), x.reshape(LIMIT, 4))


def test_a_buffer_view_past_the_limit_is_an_error_not_a_clamp(small_texels):
    t = vkcore.asarray(texels("r32f", LIMIT + 1), device=small_texels)
    assert t.buffer is not None
    with pytest.raises(ValueError, match=rf"maxTexelBufferElements \({LIMIT}\)"):
        t.buffer.view("r32f")
