"""Exception safety: a kernel call that fails or is interrupted at any step leaves no state
behind that a later call could trust.

Each scenario makes fresh objects (weights, QuantizedTensor, F32Matrix, inputs), then makes
its FIRST call fail at the k-th intercepted step (a Submitter run, a fence wait, a queue
submit, a buffer write/read, a pool acquire/lease, a buffer allocation, pipeline creation),
with KeyboardInterrupt or RuntimeError raised before or after the real step, for every k
until the call succeeds. Then the same objects must give the reference answer: integers
bit for bit, floats within the kernels' stated tolerances.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.compute.program import Program
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer
from vkcore.device.memory.pools import BufferPool, HostArrayPool
from vkcore.device.submit.submitter import Submitter

METHODS = [
    (Submitter, "run"),
    (Submitter, "_submit_and_wait"),
    (Submitter, "_descriptor_sets"),
    (Buffer, "write"),
    (Buffer, "read"),
    (BufferPool, "acquire"),
    (BufferPool, "lease"),
    (HostArrayPool, "empty"),
    (HostBuffer, "__init__"),
    (Device, "program_pipeline"),
    (Program, "record"),
]
# Driver calls, intercepted through the device's binding (dev.lib).
VK_CALLS = ("vkQueueSubmit", "vkWaitForFences", "vkAllocateDescriptorSets", "vkAllocateMemory")


class Injected(RuntimeError):
    pass


class Faults:
    """Counts intercepted steps; the ``fail_at``-th raises ``exc`` before or after the
    real step runs."""

    def __init__(self) -> None:
        self.fail_at = 0
        self.count = 0
        self.exc: type[BaseException] = Injected
        self.after = False
        self.fired = False

    def arm(self, k: int, exc: type[BaseException], after: bool) -> None:
        self.fail_at, self.count, self.exc, self.after, self.fired = k, 0, exc, after, False

    def disarm(self) -> None:
        self.fail_at = 0

    def step(self, real: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self.fail_at:
            return real(*args, **kwargs)
        self.count += 1
        hit = self.count == self.fail_at
        if hit and not self.after:
            self.fired = True
            raise self.exc("injected before the step")
        result = real(*args, **kwargs)
        if hit:
            self.fired = True
            raise self.exc("injected after the step")
        return result


class LibProxy:
    def __init__(self, lib: Any, faults: Faults) -> None:
        self._lib, self._faults = lib, faults

    def __getattr__(self, name: str) -> Any:
        func = getattr(self._lib, name)
        if name not in VK_CALLS:
            return func
        return lambda *args: self._faults.step(func, *args)


@pytest.fixture
def faults(device, monkeypatch) -> Iterator[Faults]:
    f = Faults()
    for cls, name in METHODS:
        real = getattr(cls, name)

        def wrapper(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            return f.step(_real, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)
    real_lib = device.lib
    device.lib = LibProxy(real_lib, f)
    try:
        yield f
    finally:
        f.disarm()
        device.lib = real_lib


ALL_KINDS = [(exc, after) for exc in (KeyboardInterrupt, Injected) for after in (False, True)]


def hunt(
    faults: Faults,
    make: Callable[[], Any],
    first: Callable[[Any], Any],
    check,
    kinds: list[tuple[type[BaseException], bool]] = ALL_KINDS,
) -> int:
    """For each exception kind and side, fail step k of ``first(make())`` for every k
    until it succeeds; after each failure check the same objects with ``check``."""
    tried = 0
    for exc, after in kinds:
        k = 1
        while True:
            objs = make()
            faults.arm(k, exc, after)
            try:
                first(objs)
            except exc:
                pass
            finally:
                fired = faults.fired
                faults.disarm()
            assert fired or k > 1, "nothing was intercepted"
            check(objs)
            check(objs)  # and once more: a second call must not see stale state either
            tried += 1
            if not fired:
                break
            k += 1
    return tried


# ---------------------------------------------------------------- quantized weights
WEIGHTS = [(8, True, True), (8, False, True), (4, True, False), (8, False, False)]


def weights(rng, m=37, n=72):
    w = rng.standard_normal((m, n)).astype(np.float32)
    w[3] += 2.0  # one-sided rows: nonzero zero points for asymmetric weights
    return w


def make_qt(device, w, bits, symmetric, per_channel):
    return vkcore.quantize(
        w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
    )


def assert_quantized(qt, w, bits, symmetric, per_channel):
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    assert np.array_equal(qt.q, q)
    assert np.array_equal(qt.scale.view(np.uint32), s.view(np.uint32))
    assert np.array_equal(qt.zero_point, z)


@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), WEIGHTS)
@pytest.mark.parametrize("n", [72, 70])  # 72: scales on the device; 70: the host path
def test_quantize_interrupted(device, rng, faults, bits, symmetric, per_channel, n):
    w = weights(rng, n=n)
    w_copy = w.copy()
    out: dict[str, Any] = {}

    def first(_):
        out["qt"] = make_qt(device, w, bits, symmetric, per_channel)

    def check(_):
        assert np.array_equal(w, w_copy), "the input was modified"
        qt = make_qt(device, w, bits, symmetric, per_channel)
        assert_quantized(qt, w, bits, symmetric, per_channel)
        qt.release()

    hunt(faults, lambda: None, first, check)


@pytest.mark.parametrize(("symmetric", "per_channel"), [(True, True), (False, False)])
def test_large_quantize_and_dequantize_interrupted(device, rng, faults, symmetric, per_channel):
    """1.3 MB weights and results: the paths that read the weights in place (imported
    host memory) and write the result in place into a pooled host array."""
    w = weights(rng, m=520, n=640)
    q, s, z = reference.quantize(w, 8, symmetric, per_channel)
    want = reference.dequantize(q, s, z)

    def check(_):
        qt = make_qt(device, w, 8, symmetric, per_channel)
        assert np.array_equal(qt.q, q)
        assert np.array_equal(vkcore.dequantize(qt).view(np.uint32), want.view(np.uint32))
        qt.release()

    def first(_):
        vkcore.dequantize(make_qt(device, w, 8, symmetric, per_channel))

    hunt(faults, lambda: None, first, check)


@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), WEIGHTS)
def test_dequantize_interrupted(device, rng, faults, bits, symmetric, per_channel):
    w = weights(rng)
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    want = reference.dequantize(q, s, z)

    def check(qt):
        got = vkcore.dequantize(qt)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))

    hunt(faults, lambda: make_qt(device, w, bits, symmetric, per_channel), vkcore.dequantize, check)


def float_tolerance(q, s, z, x, bias):
    v = q.astype(np.float64) - np.broadcast_to(z, (q.shape[0],))[:, None]
    s = np.broadcast_to(s, (q.shape[0],)).astype(np.float64)
    scale = s * (np.abs(v) @ np.abs(x.astype(np.float64))) + np.abs(bias)
    return scale * q.shape[1] * 2.0**-23 + 1e-30


@pytest.mark.parametrize("activations", ["float", "int8", "uint8"])
@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), WEIGHTS)
@pytest.mark.parametrize("tensor_x", [False, True])
def test_matvec_first_call_interrupted(
    device, rng, faults, bits, symmetric, per_channel, activations, tensor_x
):
    w = weights(rng)
    x = (rng.standard_normal(w.shape[1]) * 3 - 1).astype(np.float32)  # z_x != 0 for uint8
    bias = rng.standard_normal(w.shape[0]).astype(np.float32)
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    want = reference.matvec(q, s, z, x, bias, activations)
    xt = vkcore.asarray(x, device=device) if tensor_x else x

    def call(qt):
        y = vkcore.matvec(qt, xt, bias=bias, activations=activations)
        return y.numpy() if tensor_x else y

    def check(qt):
        y = call(qt)
        if activations == "float":
            tol = float_tolerance(q, s, z, x, bias)
            assert np.all(np.abs(y.astype(np.float64) - want) <= tol)
        else:
            assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), np.abs(y - want).max()

    hunt(faults, lambda: make_qt(device, w, bits, symmetric, per_channel), call, check)


def test_integer_accumulators_after_an_interrupted_uint8_call(device, rng, faults):
    """The row sums behind uint8 activations: exact int32 accumulators after any failure."""
    from vkcore.kernels.matvec.matvec import integer_accumulators

    w = weights(rng)
    x = (rng.standard_normal(w.shape[1]) * 3 - 1).astype(np.float32)
    q, s, z = reference.quantize(w, 8, False, True)
    qx, _, zx = reference.quantize_activations(x, "uint8")
    want = reference.matvec_accumulators(q, z, qx, zx)

    def check(qt):
        assert np.array_equal(integer_accumulators(qt, x, "uint8"), want)

    hunt(
        faults,
        lambda: make_qt(device, w, 8, False, True),
        lambda qt: integer_accumulators(qt, x, "uint8"),
        check,
    )


# ---------------------------------------------------------------- float32 weights
def f32_case(rng):
    w = rng.standard_normal((21, 50)).astype(np.float32)
    x = rng.standard_normal(50).astype(np.float32)
    b = rng.standard_normal(21).astype(np.float32)
    want = w.astype(np.float64) @ x + b
    tol = (np.abs(w) @ np.abs(x) + np.abs(b)) * 50 * 2.0**-23
    return w, x, b, want, tol


def test_matvec_f32_interrupted(device, rng, faults):
    w, x, b, want, tol = f32_case(rng)

    def check(_):
        y = vkcore.matvec_f32(w, x, bias=b, device=device)
        assert np.all(np.abs(y - want) <= tol)

    hunt(faults, lambda: None, lambda _: vkcore.matvec_f32(w, x, bias=b, device=device), check)


def test_f32matrix_construction_and_first_call_interrupted(device, rng, faults):
    w, x, b, want, tol = f32_case(rng)
    made: list[Any] = []

    def first(_):
        made.append(vkcore.F32Matrix(w, device=device))
        vkcore.matvec_f32(made[-1], x, bias=b)

    def check(_):
        for mat in made[-1:]:  # a matrix built before the failure: its next calls are right
            assert np.all(np.abs(vkcore.matvec_f32(mat, x, bias=b) - want) <= tol)
        fresh = vkcore.F32Matrix(w, device=device)
        assert np.all(np.abs(vkcore.matvec_f32(fresh, x, bias=b) - want) <= tol)
        made.clear()

    hunt(faults, lambda: None, first, check)


# ---------------------------------------------------------------- softmax
@pytest.mark.parametrize("algorithm", ["online", "safe"])
@pytest.mark.parametrize("tensor", [False, True])
def test_softmax_interrupted(device, rng, faults, algorithm, tensor):
    x = rng.standard_normal((6, 300)).astype(np.float32)
    want = reference.softmax(x)
    xt = vkcore.asarray(x, device=device) if tensor else x

    def call(_):
        y = vkcore.softmax(xt, algorithm=algorithm, device=None if tensor else device)
        return y.numpy() if tensor else y

    def check(_):
        assert np.abs(call(None) - want).max() <= 1e-6

    hunt(faults, lambda: None, call, check)


# ---------------------------------------------------------------- nothing leaks
def test_failed_calls_leak_no_descriptor_set(device, rng, faults):
    w = weights(rng)
    x = rng.standard_normal(w.shape[1]).astype(np.float32)
    gc.collect()  # garbage of earlier tests freed now, not in the middle
    before = device.live_objects()["descriptor_sets"]

    def check(qt):
        vkcore.matvec(qt, x, activations="uint8")

    hunt(
        faults,
        lambda: make_qt(device, w, 8, False, True),
        lambda qt: vkcore.matvec(qt, x, activations="uint8"),
        check,
    )
    device.submitter.drop_recorded()
    assert device.live_objects()["descriptor_sets"] <= before


# ---------------------------------------------------------------- a fresh device
# Driver calls a first call makes on a fresh device (pipelines, descriptor sets, submit,
# wait); each is failed as it returns, so the object it made exists and must not leak.
FIRST_CALL_DRIVER_STEPS = (
    "vkCreateShaderModule",
    "vkCreateDescriptorSetLayout",
    "vkCreatePipelineLayout",
    "vkCreateComputePipelines",
    "vkAllocateDescriptorSets",
    "vkQueueSubmit",
    "vkWaitForFences",
)


class FailOnce:
    """dev.lib with ``name`` raising ``exc`` the first time it returns."""

    def __init__(self, lib: Any, name: str, exc: type[BaseException]) -> None:
        self._lib, self._name, self._exc, self.fired = lib, name, exc, False

    def __getattr__(self, name: str) -> Any:
        func = getattr(self._lib, name)
        if name != self._name:
            return func

        def call(*args: Any) -> Any:
            result = func(*args)
            if not self.fired:
                self.fired = True
                raise self._exc(f"injected after {name}")
            return result

        return call


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Injected])
def test_first_call_on_a_fresh_device_interrupted_in_the_driver(rng, exc):
    """Each driver step of a fresh device's first uint8 matvec fails as it returns: the
    next call is right and, at close, the validation layer finds nothing left alive."""
    w = weights(rng)
    x = (rng.standard_normal(w.shape[1]) * 3 - 1).astype(np.float32)
    q, s, z = reference.quantize(w, 8, False, True)
    want = reference.matvec(q, s, z, x, None, "uint8")
    for name in FIRST_CALL_DRIVER_STEPS:
        dev = vkcore.Device(validation=True, pipeline_cache=False)
        try:
            qt = make_qt(dev, w, 8, False, True)
            real, proxy = dev.lib, FailOnce(dev.lib, name, exc)
            dev.lib = proxy
            try:
                with contextlib.suppress(exc):
                    vkcore.matvec(qt, x, activations="uint8")
            finally:
                dev.lib = real
            assert proxy.fired, name
            for _ in range(2):
                y = vkcore.matvec(qt, x, activations="uint8")
                assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), name
            qt.release()
        finally:
            dev.close()
        assert dev.validation_messages == [], (name, dev.validation_messages)


def test_resubmit_interrupted_before_the_fence_reset(device, rng):
    """The bench's resubmission loop cut short after a submit: the next kernel call
    must not submit with the fence still signalled (a validation error) and is right."""
    x = rng.standard_normal((4, 256)).astype(np.float32)
    for _ in range(2):  # a repeated call: its recording is kept
        vkcore.softmax(x, device=device)
    real = device.lib
    proxy = FailOnce(real, "vkWaitForFences", KeyboardInterrupt)
    device.lib = proxy
    try:
        with contextlib.suppress(KeyboardInterrupt):
            device.submitter.resubmit_seconds(3)
    finally:
        device.lib = real
    assert proxy.fired
    assert np.abs(vkcore.softmax(x, device=device) - reference.softmax(x)).max() <= 1e-6
    w = weights(rng)
    qt = make_qt(device, w, 8, True, True)
    assert np.array_equal(qt.q, reference.quantize(w, 8, True, True)[0])


@pytest.mark.parametrize("activations", ["uint8"])  # every per-chunk vector, row sums too
def test_matvec_by_row_chunks_interrupted(device, rng, faults, monkeypatch, activations):
    """More rows than one binding of y holds (per-chunk vectors from the pool)."""
    import dataclasses

    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_storage_buffer_range=1024)
    )
    w = weights(rng, m=300, n=16)  # 1200 bytes of y, 5 chunks of weights
    x = (rng.standard_normal(16) * 3 - 1).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    q, s, z = reference.quantize(w, 8, False, True)
    want = reference.matvec(q, s, z, x, b, activations)

    def check(qt):
        y = vkcore.matvec(qt, x, bias=b, activations=activations)
        if activations == "float":
            assert np.all(np.abs(y - want) <= float_tolerance(q, s, z, x, b))
        else:
            assert np.array_equal(y.view(np.uint32), want.view(np.uint32))

    hunt(
        faults,
        lambda: make_qt(device, w, 8, False, True),
        lambda qt: vkcore.matvec(qt, x, bias=b, activations=activations),
        check,
        kinds=[(KeyboardInterrupt, True), (Injected, False)],  # the work done, or not begun
    )


@pytest.mark.parametrize("exc", [KeyboardInterrupt, Injected])
def test_device_creation_cut_short_as_its_fence_is_checked(monkeypatch, caplog, exc):
    """The device's own fence is stored before its result is checked (as every handle
    is): an exception right after vkCreateFence returned leaves nothing alive when the
    half-made device tears itself down (the layer reports any object left)."""
    import logging

    from vkcore.device.submit import submission

    real = submission._vk

    class Interrupting:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def check(result, name):
            value = real.check(result, name)
            if name == "vkCreateFence":
                monkeypatch.setattr(submission, "_vk", real)  # once
                raise exc(f"after {name}")
            return value

    monkeypatch.setattr(submission, "_vk", Interrupting())
    caplog.set_level(logging.WARNING, logger="vkcore")
    with pytest.raises(exc):
        vkcore.Device(validation=True, pipeline_cache=False)
    assert submission._vk is real  # the interrupt fired
    assert "has not been destroyed" not in caplog.text
    dev = vkcore.Device(validation=True, pipeline_cache=False)  # and the next one works
    x = np.ones((2, 8), np.float32)
    assert np.allclose(vkcore.softmax(x, device=dev), 1 / 8)
    dev.close()
    assert dev.validation_messages == []
