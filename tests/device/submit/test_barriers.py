"""Barriers inside one command buffer only where a step depends on an earlier one
(vkcore.device.submit.commands.Hazards): a read or write after a write, a write after a read."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from repo_paths import SUPPORT

import vkcore
from vkcore.device.memory.host_buffer import HostBuffer
from vkcore.device.submit import commands
from vkcore.device.submit.submission import Submission


class FakeBuffer:
    """What Hazards reads of a Buffer: told apart by identity, as Buffers are."""

    def __init__(self, name):
        self.name = name


class FakeHostBuffer(HostBuffer):
    """A HostBuffer by type (imports of host memory may share pages), owning nothing."""

    def __init__(self, name):  # noqa: D107 - deliberately not HostBuffer.__init__
        self.name, self.handle, self.array = name, None, None

    def destroy(self):
        pass


def buf(name, *, host=False):
    return FakeHostBuffer(name) if host else FakeBuffer(name)


def step(*bindings):
    """A fake Dispatch: (buffer, access) per binding."""
    return SimpleNamespace(
        buffers=tuple(b for b, _ in bindings),
        pipeline=SimpleNamespace(access=tuple(a for _, a in bindings)),
    )


def barriers(*steps):
    hz = commands.Hazards()
    return [hz.add(s) for s in steps]


A, B, C = buf("a"), buf("b"), buf("c")
R, W, NONE = "read", "write", "none"


@pytest.mark.parametrize(
    ("first", "second", "want"),
    [
        ((A, W), (A, R), True),  # read after write
        ((A, R), (A, W), True),  # write after read
        ((A, W), (A, W), True),  # write after write
        ((A, R), (A, R), False),  # read after read
        ((A, W), (B, R), False),  # other buffers
        ((A, R), (B, W), False),
    ],
)
def test_pairs(first, second, want):
    assert barriers(step(first), step(second)) == [False, want]


def test_a_barrier_orders_everything_before_it():
    # a -> b (barrier: reads a written before), then another read of a needs none
    got = barriers(step((C, R), (A, W)), step((A, R), (B, W)), step((A, R), (C, R)))
    assert got == [False, True, False]
    # but a write of what the step after the barrier read does
    assert barriers(step((A, W)), step((A, R)), step((A, W))) == [False, True, True]


def test_independent_steps_need_none():
    bufs = [buf(str(i)) for i in range(16)]
    x = buf("x")
    got = barriers(*(step((x, R), (bufs[i], W)) for i in range(16)))
    assert got == [False] * 16


def test_bindings_the_code_never_names_order_nothing():
    p = buf("placeholder")
    assert barriers(step((A, R), (p, NONE)), step((B, R), (p, NONE)), step((p, R))) == [False] * 3
    # but one the code names behind a runtime flag counts, as the validation layer counts it
    assert barriers(step((A, R), (p, W)), step((B, R), (p, R))) == [False, True]


def test_host_imports_may_alias():
    """Two imports of host memory may share pages: one counts as the other, by type (an
    import whose array was let go while a sequence still holds it included)."""
    h1, h2 = buf("h1", host=True), buf("h2", host=True)
    assert barriers(step((h1, W)), step((h2, R))) == [False, True]
    assert barriers(step((h1, R)), step((h2, R))) == [False, False]


@pytest.fixture
def recorded_barriers(monkeypatch):
    """How many barriers each recorded dispatch list had (commands.record_dispatches)."""
    counts = []
    real_record, real_barrier = commands.record_dispatches, commands.barrier

    def record(*args, **kwargs):
        counts.append(0)
        return real_record(*args, **kwargs)

    def barrier(*args, **kwargs):
        if counts:
            counts[-1] += 1
        return real_barrier(*args, **kwargs)

    monkeypatch.setattr(commands, "record_dispatches", record)
    monkeypatch.setattr(commands, "barrier", barrier)
    return counts


def test_a_sequence_of_independent_calls_has_no_barrier_between_them(
    device, rng, scale, recorded_barriers
):
    xs = [vkcore.asarray(rng.standard_normal((2, 300)).astype(np.float32), device=device)]
    xs += [vkcore.asarray(rng.standard_normal((2, 300)).astype(np.float32), device=device)]
    outs = [vkcore.Tensor.empty((2, 300), np.float32, device) for _ in range(8)]
    recorded_barriers.clear()
    with vkcore.sequence(device=device):
        for i, y in enumerate(outs):
            scale(xs[i % 2], y, groups=10, a=float(i), n=600)
    assert recorded_barriers == [1]  # before the host reads; nothing runs before it
    for i, y in enumerate(outs):
        np.testing.assert_array_equal(y.numpy(), np.float32(i) * xs[i % 2].numpy())


def test_dependent_calls_get_their_barriers_and_their_results(
    device, rng, scale, recorded_barriers
):
    x = rng.standard_normal(600).astype(np.float32)
    a = vkcore.asarray(x, device=device)
    b = vkcore.Tensor.empty((600,), np.float32, device)
    c = vkcore.Tensor.empty((600,), np.float32, device)
    recorded_barriers.clear()
    with vkcore.sequence(device=device):
        scale(a, b, groups=10, a=2.0, n=600)  # b = 2a
        scale(b, c, groups=10, a=3.0, n=600)  # reads b: barrier
        scale(c, a, groups=10, a=0.5, n=600)  # reads c (barrier); writes a, read by the first
        scale(a, b, groups=10, a=1.0, n=600)  # reads a, writes b: barrier
    assert recorded_barriers == [1 + 3]
    np.testing.assert_array_equal(c.numpy(), np.float32(3) * (np.float32(2) * x))
    np.testing.assert_array_equal(b.numpy(), np.float32(0.5) * c.numpy())
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_kernel_stages_keep_their_barriers(device, rng, recorded_barriers):
    """A split-row softmax is stages over one parts buffer: each waits for the last."""
    x = rng.standard_normal((1, (1 << 18) + 12)).astype(np.float32)  # a shape of its own
    recorded_barriers.clear()
    got = vkcore.softmax(x, device=device)
    np.testing.assert_allclose(got, vkcore.reference.softmax(x), atol=1e-6)
    # one between the stages at least, and the one before the host reads
    assert recorded_barriers and all(n >= 2 for n in recorded_barriers)


MISSING_BARRIER = """
import sys
import numpy as np
import vkcore
from vkcore.device.submit import commands
from vkcore.device.submit.submission import Submission
sys.path.insert(0, sys.argv[2])  # tests/support
from adversarial_programs import SCALE

if sys.argv[1] == "without":  # the rule broken: no barrier anywhere between steps
    commands.Hazards.add = lambda self, d: False
dev = vkcore.Device()
assert dev.instance.sync_validation, "the layer offers no synchronization validation"
scale = vkcore.Program(SCALE, device=dev)
a = vkcore.asarray(np.ones(600, np.float32), device=dev)
b = vkcore.Tensor.empty((600,), np.float32, dev)
c = vkcore.Tensor.empty((600,), np.float32, dev)
with vkcore.sequence(device=dev):
    scale(a, b, groups=10, a=2.0, n=600)
    scale(b, c, groups=10, a=3.0, n=600)  # reads what the first wrote
print(c.numpy()[0])
"""


@pytest.mark.parametrize("barriers", ["with", "without"])
def test_the_validation_layer_checks_synchronization(barriers):
    """Under VKCORE_VALIDATION the layer also validates synchronization, so a missing
    barrier fails the suite: shown by removing the barrier rule in a child process."""
    env = {**os.environ, "VKCORE_VALIDATION": "1"}
    out = subprocess.run(
        [sys.executable, "-c", MISSING_BARRIER, barriers, str(SUPPORT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if barriers == "with":
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "6.0"
    else:
        assert out.returncode != 0
        assert "SYNC-HAZARD-READ-AFTER-WRITE" in out.stderr


def test_static_use_is_reflected(device):
    """A binding the shader declares but never names has access "none"; one it names
    only behind a push-constant flag still counts."""
    src = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(std430, binding = 2) buffer Unused { float unused[]; };
layout(std430, binding = 3) writeonly buffer Flagged { float flagged[]; };
layout(push_constant) uniform P { uint n; uint flag; } pc;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n) y[i] = x[i];
    if (pc.flag != 0u && i == 0u) flagged[0] = 1.0;
}
"""
    prog = vkcore.Program(src, device=device)
    assert [b.access for b in prog.bindings] == ["read", "write", "none", "write"]
    assert prog.pipeline.access == ("read", "write", "none", "write")


def test_kernels_sharing_the_placeholder_are_ordered_as_the_layer_sees_them(device, rng):
    """topk binds the shared placeholder to a status slot its code writes behind a flag,
    matvec to a bias slot its code reads behind one: in one sequence (either order) the
    validation layer sees a write and a read of one buffer, so a barrier goes between."""
    qt = vkcore.quantize((rng.standard_normal((64, 256)) * 0.1).astype(np.float32), device=device)
    x = vkcore.asarray(rng.standard_normal((2, 1000)).astype(np.float32), device=device)
    h = vkcore.asarray(rng.standard_normal(256).astype(np.float32), device=device)
    for order in ("topk first", "matvec first"):
        with vkcore.sequence(device=device):
            if order == "topk first":
                _, idx = vkcore.topk(x, 5)
                y = vkcore.matvec(qt, h)
            else:
                y = vkcore.matvec(qt, h)
                _, idx = vkcore.topk(x, 5)
        np.testing.assert_array_equal(idx.numpy(), vkcore.reference.topk(x.numpy(), 5)[1])
        np.testing.assert_array_equal(y.numpy(), vkcore.matvec(qt, h.numpy()))
    qt.release()


def test_sixteen_softmax_calls_have_no_barrier_between_them(device, rng, recorded_barriers):
    xs = [vkcore.asarray(rng.standard_normal((1, 256)).astype(np.float32), device=device)]
    xs *= 16
    recorded_barriers.clear()
    with vkcore.sequence(device=device):
        outs = [vkcore.softmax(x) for x in xs]
    assert recorded_barriers == [1]
    np.testing.assert_allclose(outs[-1].numpy(), vkcore.reference.softmax(xs[0].numpy()), atol=1e-6)


@pytest.fixture
def batch_sizes(device, monkeypatch):
    """How many command buffers each submission of ``device`` carried (2: behind the
    leading barrier)."""
    sizes = []
    sub = device.submitter
    real = type(sub).submit_info

    def spy(self, batch):
        info = real(self, batch)
        sizes.append(info.commandBufferCount)
        return info

    monkeypatch.setattr(type(sub), "submit_info", spy)
    return sizes


@pytest.mark.parametrize("kind", ["call", "sequence"])
def test_nothing_leads_a_submission_when_nothing_runs(device, rng, scale, batch_sizes, kind):
    a = vkcore.asarray(rng.standard_normal(600).astype(np.float32), device=device)
    b = vkcore.Tensor.empty((600,), np.float32, device)
    batch_sizes.clear()
    if kind == "call":
        scale(a, b, groups=10, a=2.0, n=600)
    else:
        with vkcore.sequence(device=device):
            scale(a, b, groups=10, a=2.0, n=600)
    assert batch_sizes == [1]
    np.testing.assert_array_equal(b.numpy(), np.float32(2) * a.numpy())


@pytest.mark.parametrize("then", ["call", "sequence", "numpy call"])
def test_work_behind_a_sequence_in_flight_goes_behind_the_leading_barrier(
    device, rng, scale, batch_sizes, monkeypatch, then
):
    """A sequence submitted without waiting may still write what the next submission
    reads: that one carries the leading barrier first, and reads the sequence's result.
    (The sequence is made to look unfinished to the device, so that the next submission
    always finds it in flight.)"""
    x = rng.standard_normal(1 << 16).astype(np.float32)
    a = vkcore.asarray(x, device=device)
    b = vkcore.Tensor.empty(x.shape, np.float32, device)
    c = vkcore.Tensor.empty(x.shape, np.float32, device)
    groups = x.size // 64
    batch_sizes.clear()
    with vkcore.sequence(device=device, wait=False) as seq:
        for _ in range(8):
            scale(a, b, groups=groups, a=2.0, n=x.size)
    monkeypatch.setattr(Submission, "poll", lambda self: False)
    if then == "call":
        scale(b, c, groups=groups, a=3.0, n=x.size)
    elif then == "sequence":
        with vkcore.sequence(device=device):
            scale(b, c, groups=groups, a=3.0, n=x.size)
    else:
        out = np.empty_like(x)
        scale(b, out, groups=groups, a=3.0, n=x.size)
        c.write(out)
    seq.wait()
    monkeypatch.undo()
    assert batch_sizes[:2] == [1, 2]
    np.testing.assert_array_equal(c.numpy(), np.float32(3) * (np.float32(2) * x))
    seq.release()
