"""Exact repeats of small matvec calls (vkcore.compute.repeat): each repeat computes its
own x, integer modes bit for bit against the reference, and anything that is not a
repeat (another mode, a bias or none, another x dtype, released weights, a batch that
replaced the scratch buffers) runs the full call."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference

M, N = 40, 256


def _weights(device, rng, **kwargs):
    return vkcore.quantize(rng.standard_normal((M, N)).astype(np.float32), device=device, **kwargs)


def _want(qt, x, bias, activations):
    return reference.matvec(qt.q, qt.scale, qt.zero_point, x, bias, activations)


def _x(rng):
    return (rng.standard_normal(N) * 3).astype(np.float32)


@pytest.mark.parametrize("activations", ["int8", "uint8"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_repeats_are_bit_for_bit_with_fresh_data(device, rng, activations, with_bias):
    qt = _weights(device, rng, symmetric=activations == "int8")
    bias = rng.standard_normal(M).astype(np.float32) if with_bias else None
    for _ in range(3):
        vkcore.matvec(qt, _x(rng), bias=bias, activations=activations)
    hits, objects = device.submitter.reuse_hits, device.live_objects()
    for _ in range(4):
        x = _x(rng)
        y = vkcore.matvec(qt, x, bias=bias, activations=activations)
        assert np.array_equal(y, _want(qt, x, bias, activations))
    assert device.submitter.reuse_hits == hits + 4
    assert device.live_objects() == objects, "a repeat allocates nothing"
    qt.release()


@pytest.mark.parametrize("change", ["mode", "bias", "no bias", "float64 x", "batch first"])
def test_anything_but_a_repeat_runs_the_full_call(device, rng, change):
    qt = _weights(device, rng)
    bias = rng.standard_normal(M).astype(np.float32)
    for _ in range(3):
        vkcore.matvec(qt, _x(rng), bias=bias, activations="int8")
    x, activations = _x(rng), "int8"
    if change == "mode":
        activations = "uint8"
    elif change == "no bias":
        bias = None
    elif change == "bias":
        bias = bias + 1
    elif change == "float64 x":
        x = x.astype(np.float64)
    elif change == "batch first":  # replaces the x and y scratch buffers with larger ones
        xb = (rng.standard_normal((N, 5)) * 3).astype(np.float32)
        yb = vkcore.matvec(qt, xb, bias=bias, activations="int8")
        for j in range(5):
            assert np.array_equal(yb[:, j], _want(qt, xb[:, j], bias, "int8"))
    y = vkcore.matvec(qt, x, bias=bias, activations=activations)
    assert np.array_equal(y, _want(qt, x.astype(np.float32), bias, activations))
    qt.release()


def test_released_weights_raise_as_the_full_call_does(device, rng):
    qt = _weights(device, rng)
    x = _x(rng)
    for _ in range(3):
        vkcore.matvec(qt, x, activations="int8")
    qt.release()
    with pytest.raises(RuntimeError, match="released"):
        vkcore.matvec(qt, x, activations="int8")


def test_two_weight_tensors_alternating_keep_their_own_results(device, rng):
    a, b = _weights(device, rng), _weights(device, rng)
    for _ in range(5):
        for qt in (a, b):
            x = _x(rng)
            assert np.array_equal(
                vkcore.matvec(qt, x, activations="int8"), _want(qt, x, None, "int8")
            )
    a.release()
    b.release()


def test_f32_matrix_repeats_follow_the_data(device, rng):
    w = rng.standard_normal((M, N)).astype(np.float32)
    mat = vkcore.F32Matrix(w, device=device)
    for _ in range(5):
        x = _x(rng)
        y = vkcore.matvec_f32(mat, x)
        np.testing.assert_allclose(y, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-4)
    mat.release()


@pytest.mark.parametrize("activations", ["float", "int8", "uint8"])
def test_tensors_into_out_repeat_and_follow_the_data(device, rng, activations):
    """A decode loop's matvec on device data: x and out the same Tensors every call."""
    qt = _weights(device, rng, symmetric=activations != "uint8")
    x = vkcore.asarray(_x(rng), device=device)
    out = vkcore.Tensor.empty((M,), np.float32, device)
    for _ in range(3):
        assert vkcore.matvec(qt, x, activations=activations, out=out) is out
        vkcore.matvec(qt, _x(rng), activations=activations)  # the numpy path, kept too
    hits, objects = device.submitter.reuse_hits, device.live_objects()
    for _ in range(4):
        xs = _x(rng)
        x.write(xs)
        assert vkcore.matvec(qt, x, activations=activations, out=out) is out
        want = vkcore.matvec(qt, xs, activations=activations)  # the numpy path
        if activations == "float":
            np.testing.assert_allclose(out.numpy(), want, rtol=1e-6, atol=1e-6)
        else:
            assert np.array_equal(out.numpy(), _want(qt, xs, None, activations))
    assert device.submitter.reuse_hits >= hits + 4
    assert device.live_objects() == objects, "a repeat allocates nothing"
    qt.release()


def test_a_tensor_bias_toggled_and_a_new_out_run_the_full_call(device, rng):
    qt = _weights(device, rng)
    xs = _x(rng)
    x = vkcore.asarray(xs, device=device)
    b = rng.standard_normal(M).astype(np.float32)
    bias = vkcore.asarray(b, device=device)
    out = vkcore.Tensor.empty((M,), np.float32, device)
    for _ in range(3):
        vkcore.matvec(qt, x, bias=bias, activations="int8", out=out)
    assert np.array_equal(out.numpy(), _want(qt, xs, b, "int8"))
    vkcore.matvec(qt, x, activations="int8", out=out)  # no bias now
    assert np.array_equal(out.numpy(), _want(qt, xs, None, "int8"))
    out.buffer.destroy()
    out = vkcore.Tensor.empty((M,), np.float32, device)  # perhaps the same id
    vkcore.matvec(qt, x, bias=bias, activations="int8", out=out)
    assert np.array_equal(out.numpy(), _want(qt, xs, b, "int8"))
    qt.release()


def test_out_is_checked(device, rng):
    qt = _weights(device, rng)
    xs = _x(rng)
    x = vkcore.asarray(xs, device=device)
    with pytest.raises(TypeError, match="out is for a Tensor x"):
        vkcore.matvec(qt, xs, out=vkcore.Tensor.empty((M,), np.float32, device))
    with pytest.raises(TypeError, match="out must be a vkcore.Tensor"):
        vkcore.matvec(qt, x, out=np.empty(M, np.float32))
    with pytest.raises(ValueError, match=r"shape \(40,\)"):
        vkcore.matvec(qt, x, out=vkcore.Tensor.empty((M + 1,), np.float32, device))
    with pytest.raises(ValueError, match="float32"):
        vkcore.matvec(qt, x, out=vkcore.Tensor.empty((M,), np.int32, device))
    gone = vkcore.Tensor.empty((M,), np.float32, device)
    gone.buffer.destroy()
    with pytest.raises(RuntimeError, match="released"):
        vkcore.matvec(qt, x, out=gone)
    square = vkcore.quantize(rng.standard_normal((N, N)).astype(np.float32), device=device)
    with pytest.raises(ValueError, match="share x's buffer"):
        vkcore.matvec(square, x, out=x)
    square.release()
    batch = vkcore.asarray(rng.standard_normal((N, 3)).astype(np.float32), device=device)
    with pytest.raises(TypeError, match="batch"):
        vkcore.matvec(qt, batch, out=vkcore.Tensor.empty((M,), np.float32, device))
    with pytest.raises((TypeError, ValueError), match="activations"):
        vkcore.matvec(qt, xs, activations=["int8"])  # unhashable: refused by the full call
    qt.release()


def test_out_on_another_device_is_refused(device, rng):
    qt = _weights(device, rng)
    x = vkcore.asarray(_x(rng), device=device)
    other = vkcore.Device(pipeline_cache=False)
    try:
        with pytest.raises(ValueError, match="out"):
            vkcore.matvec(qt, x, out=vkcore.Tensor.empty((M,), np.float32, other))
    finally:
        other.close()
        qt.release()


def test_f32_matrix_tensors_into_out(device, rng):
    w = rng.standard_normal((M, N)).astype(np.float32)
    mat = vkcore.F32Matrix(w, device=device)
    x = vkcore.asarray(_x(rng), device=device)
    out = vkcore.Tensor.empty((M,), np.float32, device)
    for _ in range(4):
        xs = _x(rng)
        x.write(xs)
        assert vkcore.matvec_f32(mat, x, out=out) is out
        np.testing.assert_allclose(out.numpy(), w.astype(np.float64) @ xs, rtol=1e-5, atol=1e-4)
    mat.release()


def test_many_layers_each_keep_their_own_call(device, rng):
    """A model's layers, more of them than one kernel keeps per device: each weight
    tensor keeps its own call, so a decode loop over all of them still repeats."""
    from vkcore.kernels.matvec.program import MODES

    layers = [_weights(device, rng) for _ in range(12)]
    for _ in range(3):
        for qt in layers:
            x = _x(rng)
            assert np.array_equal(
                vkcore.matvec(qt, x, activations="int8"), _want(qt, x, None, "int8")
            )
    assert all(qt.kept_calls.get((MODES["int8"], (N,), True)) is not None for qt in layers)
    for qt in layers:
        qt.release()
