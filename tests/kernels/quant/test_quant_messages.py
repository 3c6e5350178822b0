"""Messages of the quantize, dequantize and matvec entry points say what is true: a
released object says it was released (its device is open), float and quantized weights
each point to their own function, objects that are not arrays are named."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore.kernels.matvec.matvec import integer_accumulators


@pytest.fixture
def qt(device, rng):
    return vkcore.quantize(rng.standard_normal((6, 20)).astype(np.float32), device=device)


def released(match: str):
    """The error for a released object: names it, says released, never 'closed'."""
    return pytest.raises(RuntimeError, match=match)


def assert_not_closed(info) -> None:
    assert "closed" not in str(info.value), str(info.value)
    assert isinstance(info.value, ValueError)  # a bad argument as well


def test_released_quantized_tensor(device, qt):
    x = np.ones(20, np.float32)
    qt.release()
    assert not device.closed
    calls = [
        lambda: vkcore.matvec(qt, x),
        lambda: vkcore.matvec(qt, x, activations="uint8"),
        lambda: integer_accumulators(qt, x),
        lambda: vkcore.dequantize(qt),
        lambda: qt.q,
        lambda: qt.scale,
        lambda: qt.zero_point,
    ]
    for call in calls:
        with released(r"QuantizedTensor was released .*quantize the weights again") as info:
            call()
        assert_not_closed(info)
    qt.release()  # twice is fine


def test_released_f32_matrix(device, rng):
    mat = vkcore.F32Matrix(rng.standard_normal((4, 8)).astype(np.float32), device=device)
    mat.release()
    with released(r"F32Matrix was released") as info:
        vkcore.matvec_f32(mat, np.ones(8, np.float32))
    assert_not_closed(info)


def test_released_tensor_inputs(device, qt, rng):
    def dead(shape):
        t = vkcore.asarray(rng.standard_normal(shape).astype(np.float32), device=device)
        t.buffer.destroy()
        return t

    mat = vkcore.F32Matrix(rng.standard_normal((6, 20)).astype(np.float32), device=device)
    cases = [
        ("x", lambda: vkcore.matvec(qt, dead((20,)))),
        ("x", lambda: vkcore.matvec(qt, dead((20,)), activations="int8")),
        ("bias", lambda: vkcore.matvec(qt, np.ones(20, np.float32), bias=dead((6,)))),
        ("x", lambda: vkcore.matvec_f32(mat, dead((20,)))),
        ("w", lambda: vkcore.quantize(dead((3, 4)))),
        ("w", lambda: vkcore.F32Matrix(dead((3, 4)))),
        ("x", lambda: vkcore.softmax(dead((3, 4)))),
    ]
    for name, call in cases:
        with released(rf"^{name} is a released Tensor") as info:
            call()
        assert_not_closed(info)


def test_closed_device_says_closed(rng):
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    w = rng.standard_normal((4, 16)).astype(np.float32)
    qt = vkcore.quantize(w, device=dev)
    mat = vkcore.F32Matrix(w, device=dev)
    t = vkcore.asarray(np.ones(16, np.float32), device=dev)
    dev.close()
    for call in (
        lambda: vkcore.matvec(qt, np.ones(16, np.float32)),
        lambda: vkcore.dequantize(qt),
        lambda: vkcore.matvec_f32(mat, np.ones(16, np.float32)),
        lambda: vkcore.quantize(t),
    ):
        with pytest.raises(RuntimeError, match="Device is closed"):
            call()


def test_each_weight_kind_points_to_its_function(device, qt, rng):
    w = rng.standard_normal((6, 20)).astype(np.float32)
    x = np.ones(20, np.float32)
    mat = vkcore.F32Matrix(w, device=device)
    with pytest.raises(TypeError, match=r"matvec_f32 takes float weights.*vkcore\.matvec\(qt, x\)"):
        vkcore.matvec_f32(qt, x)
    with pytest.raises(TypeError, match=r"got F32Matrix; use vkcore\.matvec_f32"):
        vkcore.matvec(mat, x)
    with pytest.raises(TypeError, match=r"got ndarray; quantize the weights first"):
        vkcore.matvec(w, x)
    with pytest.raises(TypeError, match=r"got F32Matrix"):
        vkcore.dequantize(mat)


@pytest.mark.parametrize("kind", ["QuantizedTensor", "F32Matrix", "object"])
def test_objects_that_are_not_arrays_are_named(device, qt, rng, kind):
    mat = vkcore.F32Matrix(rng.standard_normal((6, 20)).astype(np.float32), device=device)
    obj = {"QuantizedTensor": qt, "F32Matrix": mat, "object": object()}[kind]
    for name, call in (
        ("w", lambda: vkcore.quantize(obj, device=device)),
        ("w", lambda: vkcore.F32Matrix(obj, device=device)),
        ("x", lambda: vkcore.matvec(qt, obj)),
        ("bias", lambda: vkcore.matvec(qt, np.ones(20, np.float32), bias=obj)),
        ("x", lambda: vkcore.softmax(obj, device=device)),
    ):
        with pytest.raises(TypeError, match=rf"^{name} must be .* got {kind}$") as info:
            call()
        assert "dtype" not in str(info.value)


def test_tensor_on_another_device(device, qt):
    other = vkcore.Device(validation=True, pipeline_cache=False)
    try:
        x = vkcore.asarray(np.ones(20, np.float32), device=other)
        with pytest.raises(ValueError, match="x must be on the weights' device"):
            vkcore.matvec(qt, x)
        with pytest.raises(ValueError, match="device must be the QuantizedTensor's own device"):
            vkcore.dequantize(qt, device=other)
    finally:
        other.close()
