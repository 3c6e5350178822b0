"""Pipelines live while something can bind them (docs/programs.md#pipelines): dropped
variants are released beyond the few most recent, a kept recording that binds one goes
with it, and one still in flight in a submitted sequence lives until that work is done."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import vkcore
from vkcore.device import device as device_module

# One spec constant per variant; binding 0 gets it.
VARIANT = """#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint N = 1;
layout(std430, binding = 0) buffer Y { uint y[]; };
void main() { y[0] = N; }
"""

# Each invocation steps an LCG pc.n times: 2,048 of them are in flight for tens of
# milliseconds. (lavapipe stops a loop after 65,535 iterations: pc.n stays below.)
SLOW = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    uint acc = y[i];
    for (uint k = 0u; k < pc.n; ++k) acc = acc * 1664525u + 1013904223u;
    y[i] = acc;
}
"""


def _lcg(start: int, n: int) -> int:
    """The shader's formula: ``n`` steps of x -> a x + c mod 2^32, by squaring the step."""
    mask, result, step = 0xFFFFFFFF, (1, 0), (1664525, 1013904223)
    while n:
        if n & 1:  # result after step: x -> a2 (a1 x + c1) + c2
            result = ((step[0] * result[0]) & mask, (step[0] * result[1] + step[1]) & mask)
        step = ((step[0] * step[0]) & mask, (step[0] * step[1] + step[1]) & mask)
        n >>= 1
    return (result[0] * start + result[1]) & mask


def _live_pipelines(device) -> int:
    gc.collect()
    return device.live_objects()["pipelines"]


def _variant(device, n: int) -> vkcore.Program:
    return vkcore.Program(VARIANT, spec={"N": n}, device=device)


def test_dropped_variants_leave_a_bounded_number_of_pipelines(device):
    kept = device_module.KEPT_PIPELINES
    softmax_ok = vkcore.softmax(np.zeros((1, 4), np.float32), device=device)
    before = _live_pipelines(device)
    held = _variant(device, 10_000)  # referenced throughout: must survive the churn
    for n in range(3 * kept + 5):
        y = np.zeros(1, np.uint32)
        _variant(device, n)(y)
        assert y[0] == n
    assert _live_pipelines(device) - before <= kept + 1  # + held
    y = np.zeros(1, np.uint32)
    held(y)
    assert y[0] == 10_000
    again = vkcore.softmax(np.zeros((1, 4), np.float32), device=device)  # kernels keep theirs
    np.testing.assert_array_equal(again, softmax_ok)


def test_a_variant_made_again_finds_its_recent_pipeline(device):
    first = _variant(device, 77)
    pipe = weakref.ref(first.pipeline)
    del first
    gc.collect()
    assert _variant(device, 77).pipeline is pipe()


def test_a_released_pipeline_takes_its_kept_recording_with_it(device, monkeypatch):
    monkeypatch.setattr(device_module, "KEPT_PIPELINES", 0)
    out = vkcore.asarray(np.zeros(1, np.uint32), device=device)
    prog = _variant(device, 5)
    sets = device.live_objects()["descriptor_sets"]
    for _ in range(3):  # repeated on the same Tensor: the recording is kept
        prog(out)
    assert device.live_objects()["descriptor_sets"] == sets + 1
    pipe = weakref.ref(prog.pipeline)
    del prog
    gc.collect()
    assert pipe() is None
    assert device.live_objects()["descriptor_sets"] == sets
    assert out.numpy()[0] == 5
    other = _variant(device, 6)  # may reuse the address: must not find the old recording
    for _ in range(3):
        other(out)
    assert out.numpy()[0] == 6


def test_a_dropped_pipeline_in_a_sequence_in_flight_lives_until_it_is_done(device, monkeypatch):
    monkeypatch.setattr(device_module, "KEPT_PIPELINES", 0)
    n = 40_000
    out = vkcore.asarray(np.arange(2048, dtype=np.uint32), device=device)
    prog = vkcore.Program(SLOW, device=device)
    with vkcore.sequence(wait=False, device=device) as seq:
        prog(out, n=n, groups=32)
    pipe, handle = weakref.ref(prog.pipeline), prog.pipeline.handle
    in_flight = weakref.ref(seq)
    seq.me = seq  # a cycle, as any object graph may make
    del prog, seq
    gc.collect()
    # Nothing has looked at the sequence since it was submitted: the device may still run
    # it (it likely does: tens of milliseconds), so the submitter keeps it, and its pipeline.
    assert in_flight() is not None
    assert pipe() is not None and pipe().handle == handle
    in_flight().wait()
    gc.collect()
    device.live_objects()  # lets go of finished sequences
    gc.collect()
    assert in_flight() is None and pipe() is None
    assert out.numpy().tolist() == [_lcg(x, n) for x in range(2048)]
    device.check()  # no validation error from the release


@pytest.mark.parametrize("n", [0, 1, 3, 1000])
def test_the_slow_shader_computes_its_formula(device, n):
    out = vkcore.asarray(np.full(64, 7, np.uint32), device=device)
    vkcore.Program(SLOW, device=device)(out, n=n)
    plain = 7
    for _ in range(n):
        plain = (plain * 1664525 + 1013904223) & 0xFFFFFFFF
    assert out.numpy().tolist() == [plain] * 64
    assert _lcg(7, n) == plain
