"""float64 input beyond float32's range is converted to infinities silently, as the
README documents, by every entry point that takes float input: numpy printed "overflow
encountered in cast" from topk, softmax_topk, asarray and the rest. Checked with warnings
as errors, outside and inside a sequence, for numpy arrays, lists and other layouts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vkcore

BIG = np.array([[1e39, 1.0, -1e39, 2.0, 0.5, -3.0, 1e300, 4.0]])  # float64


def _inputs():
    return {
        "array": BIG,
        "list": BIG.tolist(),
        "strided": np.repeat(BIG, 2, axis=1)[:, ::2],
        "transposed": np.ascontiguousarray(BIG.T).T,
    }


def _refused(call, match):
    """``call`` raises its documented ValueError (not a numpy warning first)."""
    with pytest.raises(ValueError, match=match):
        call()


CALLS = {
    "asarray": lambda x, d: vkcore.asarray(x, device=d),
    "asarray-float32": lambda x, d: vkcore.asarray(x, device=d, dtype="float32"),
    "asarray-float16": lambda x, d: vkcore.asarray(x, device=d, dtype="float16"),
    "softmax": lambda x, d: vkcore.softmax(x, device=d),
    "softmax-axis0": lambda x, d: vkcore.softmax(x, axis=0, device=d),
    "log_softmax": lambda x, d: vkcore.log_softmax(x, device=d),
    "topk": lambda x, d: vkcore.topk(x, 3, device=d),
    "topk-axis0": lambda x, d: vkcore.topk(x, 1, axis=0, device=d),
    "softmax_topk": lambda x, d: vkcore.softmax_topk(x, 3, device=d),
    "sample": lambda x, d: _refused(lambda: vkcore.sample(x, seed=1, device=d), "inf"),
    "matvec_f32-x": lambda x, d: vkcore.matvec_f32(np.ones((4, 8), np.float32), x[0], device=d),
    "matvec_f32-w": lambda x, d: vkcore.matvec_f32(x, np.ones(8, np.float32), device=d),
    "matvec_f32-bias": lambda x, d: vkcore.matvec_f32(
        np.ones((8, 8), np.float32), np.ones(8), bias=x[0], device=d
    ),
    "F32Matrix": lambda x, d: vkcore.F32Matrix(x, device=d),
    "matvec-x": lambda x, d: vkcore.matvec(
        vkcore.quantize(np.ones((4, 8), np.float32), device=d), x[0], activations="float"
    ),
    "quantize": lambda x, d: _refused(lambda: vkcore.quantize(x, device=d), "finite"),
    "quantize-tensor": lambda x, d: _refused(
        lambda: vkcore.quantize(vkcore.asarray(x, device=d), device=d), "finite"
    ),
    "tensor-write": lambda x, d: vkcore.Tensor.empty(np.shape(x), "float32", d).write(x),
}
IN_SEQUENCE = ["softmax", "log_softmax", "topk", "softmax_topk", "asarray"]


@pytest.mark.parametrize("layout", list(_inputs()))
@pytest.mark.parametrize("call", list(CALLS))
def test_float64_beyond_float32_converts_without_a_warning(device, call, layout):
    x = _inputs()[layout]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CALLS[call](x, device)


@pytest.mark.parametrize("call", IN_SEQUENCE)
def test_inside_a_sequence_too(device, call):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with vkcore.sequence(device=device):
            CALLS[call](BIG, device)


def test_the_values_are_infinities(device):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = vkcore.asarray(BIG, device=device)
        values, indices = vkcore.topk(BIG, 3, device=device)
    assert t.numpy()[0, 0] == np.inf and t.numpy()[0, 2] == -np.inf and t.numpy()[0, 6] == np.inf
    assert values[0, 0] == np.inf and indices[0, 0] == 0


def test_quant_error_takes_float64_weights_without_a_warning(device):
    w = np.ones((4, 8))
    qt = vkcore.quantize(w, device=device)
    w[0, 0] = 1e39
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vkcore.quant_error(w, qt, x=BIG[0])
