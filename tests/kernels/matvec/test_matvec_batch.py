"""Batched matvec (x of shape (n, b)): every mode and weight layout against the numpy
reference (integer modes bit for bit, the float mode within its stated bound), b = 1 as
the vector call, each column quantized on its own, Tensors, chunked weights, errors."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels import storage
from vkcore.kernels.matvec import batch as mb

# (bits, symmetric, per_channel, group_size): per tensor, per channel, groups that divide
# a block, groups that do not (masked blocks), group size 1, packed 4/3/2-bit storage.
LAYOUTS = [
    (8, True, False, None),
    (8, False, True, None),
    (4, True, True, None),
    (3, False, False, None),
    (8, True, True, 32),
    (8, False, True, 20),
    (4, True, True, 32),
    (4, False, True, 12),
    (2, True, True, 1),
    (5, False, True, 33),
]
MODES = ("float", "int8", "uint8")


def _weights(rng: np.random.Generator, m: int = 37, n: int = 100) -> np.ndarray:
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    w[:, 40:45] *= 30  # a few loud columns: groups differ from each other
    return w


def _quantize(device, w, bits, symmetric, per_channel, group_size):
    kw = {} if group_size is None else {"group_size": group_size}
    return vkcore.quantize(
        w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device, **kw
    )


def float_bound(qt, x: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The exact float64 result and the float mode's bound
    ``(n + G + 1) * 2^-23 * (sum_j |s_ig v_ij x_jc| + |b_i|)`` (module docstring)."""
    m, n = qt.shape
    g = qt.group_cols

    def per_weight(p: np.ndarray) -> np.ndarray:  # the parameter of each (i, j), float64
        p = np.asarray(p, np.float64)
        p = np.broadcast_to(p.reshape(m, -1) if p.ndim else p, (m, qt.groups))
        return np.repeat(p, g, axis=1)[:, :n]

    v = qt.q.astype(np.float64) - per_weight(qt.zero_point)
    sv = per_weight(qt.scale) * v  # exact in float64
    b = np.zeros(m) if bias is None else bias.astype(np.float64)
    exact = sv @ x.astype(np.float64) + b[:, None]
    size = np.abs(sv) @ np.abs(x.astype(np.float64)) + np.abs(b)[:, None]
    return exact, (n + qt.groups + 1) * 2.0**-23 * size


def check(qt, x: np.ndarray, bias: np.ndarray | None, activations: str) -> np.ndarray:
    y = vkcore.matvec(qt, x, bias=bias, activations=activations)
    assert y.shape == (qt.shape[0], x.shape[1]) and y.dtype == np.float32
    if activations == "float":
        exact, tol = float_bound(qt, x, bias)
        assert np.all(np.abs(y - exact) <= tol), float(np.abs(y - exact).max())
    else:
        want = reference.matvec(
            qt.q, qt.scale, qt.zero_point, x, bias, activations, group_size=qt.group_size
        )
        np.testing.assert_array_equal(y, want)
    return y


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda t: "b{}-{}-{}-g{}".format(*t))
def test_every_mode_and_layout(device, rng, layout):
    w = _weights(rng)
    qt = _quantize(device, w, *layout)
    bias = rng.standard_normal(37).astype(np.float32)
    for b in (2, 3, 8, 65):  # one tile, partial tiles, beyond 64 columns
        x = rng.standard_normal((100, b)).astype(np.float32)
        for activations in MODES:
            check(qt, x, bias if b != 3 else None, activations)
    qt.release()


def test_64_columns_every_mode(device, rng):
    qt = _quantize(device, _weights(rng), 8, False, True, None)
    x = (rng.standard_normal((100, 64)) * np.logspace(-3, 3, 64)).astype(np.float32)
    for activations in MODES:
        check(qt, x, None, activations)


def test_passes_continue_the_group_sum(device, rng, monkeypatch):
    """One group and one column tile per pass (each pass continues the sum stored in y):
    the same bits as one pass, and the reference's."""
    qt = _quantize(device, _weights(rng), 4, False, True, 12)
    x = rng.standard_normal((100, 19)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    whole = {a: check(qt, x, bias, a) for a in MODES}
    monkeypatch.setattr(mb, "LOOP_BUDGET", 1)
    assert len(mb._passes(device, mb._Layout(qt, 1, 19))) == qt.groups * 3
    for activations in MODES:
        np.testing.assert_array_equal(check(qt, x, bias, activations), whole[activations])


@pytest.mark.parametrize("layout", [LAYOUTS[0], LAYOUTS[1], LAYOUTS[4], LAYOUTS[6]])
def test_one_column_is_the_vector_call(device, rng, layout):
    """b = 1 equals the vector call bit for bit in every mode (numpy and Tensor)."""
    qt = _quantize(device, _weights(rng), *layout)
    x = rng.standard_normal(100).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    for activations in MODES:
        vec = vkcore.matvec(qt, x, bias=bias, activations=activations)
        col = vkcore.matvec(qt, x[:, None], bias=bias, activations=activations)
        assert col.shape == (37, 1)
        np.testing.assert_array_equal(col[:, 0], vec)
        xt = vkcore.asarray(x[:, None], device=device)
        got = vkcore.matvec(qt, xt, bias=bias, activations=activations)
        assert isinstance(got, vkcore.Tensor) and got.shape == (37, 1)
        np.testing.assert_array_equal(got.numpy()[:, 0], vec)


def test_each_column_is_quantized_on_its_own(device, rng):
    """Column k of the batch is the vector call on column k (its own s_x): a zero column
    gives the bias exactly, a loud column does not change the others, and a NaN makes only
    its own column NaN in the integer modes."""
    qt = _quantize(device, _weights(rng), 8, True, True, None)
    x = rng.standard_normal((100, 5)).astype(np.float32)
    x[:, 1] = 0.0
    x[:, 2] *= 1e4
    x[7, 3] = np.nan
    bias = rng.standard_normal(37).astype(np.float32)
    for activations in ("int8", "uint8"):
        y = check(qt, x, bias, activations)
        for k in range(5):
            vec = vkcore.matvec(qt, x[:, k].copy(), bias=bias, activations=activations)
            np.testing.assert_array_equal(y[:, k], vec)
        np.testing.assert_array_equal(y[:, 1], bias)
        assert np.isnan(y[:, 3]).all()
        assert np.isfinite(np.delete(y, 3, axis=1)).all()
    y = vkcore.matvec(qt, x, bias=bias)  # float mode: the NaN stays in its column
    assert np.isnan(y[:, 3]).all() and np.isfinite(np.delete(y, 3, axis=1)).all()


def test_tensor_in_tensor_out(device, rng):
    qt = _quantize(device, _weights(rng), 4, True, True, 32)
    x = rng.standard_normal((100, 9)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    xt, bt = vkcore.asarray(x, device=device), vkcore.asarray(bias, device=device)
    for activations in MODES:
        got = vkcore.matvec(qt, xt, bias=bt, activations=activations)
        assert isinstance(got, vkcore.Tensor) and got.shape == (37, 9)
        want = vkcore.matvec(qt, x, bias=bias, activations=activations)
        np.testing.assert_array_equal(got.numpy(), want)


def test_float64_and_strided_input(device, rng):
    """Any float array of shape (n, b) works (converted to C-contiguous float32 first)."""
    qt = _quantize(device, _weights(rng), 8, True, True, None)
    x = rng.standard_normal((3, 100)).T  # float64, Fortran order
    want = vkcore.matvec(qt, np.ascontiguousarray(x, np.float32), activations="int8")
    np.testing.assert_array_equal(vkcore.matvec(qt, x, activations="int8"), want)


@pytest.mark.parametrize(("limit", "shape", "b"), [(512, (100, 40), 2), (4096, (100, 300), 3)])
def test_weights_split_across_buffers(device, rng, monkeypatch, limit, shape, b):
    """Rows split across buffers; with (512) and without (4096) the per-row vectors also
    split per chunk (y of m * b floats no longer fits one binding at 512)."""
    monkeypatch.setattr(storage, "binding_limit", lambda dev: limit)
    m, n = shape
    w = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    x = rng.standard_normal((n, b)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    for layout in ((8, True, True, None), (8, False, False, None), (4, False, True, 16)):
        qt = _quantize(device, w, *layout)
        assert len(qt.chunks) > 1
        for activations in MODES:
            check(qt, x, bias, activations)
        xt = vkcore.asarray(x, device=device)
        got = vkcore.matvec(qt, xt, bias=bias, activations="int8")
        np.testing.assert_array_equal(got.numpy(), check(qt, x, bias, "int8"))
        qt.release()
    mat = vkcore.F32Matrix(w, device=device)
    assert len(mat.chunks) > 1
    _check_f32(vkcore.matvec_f32(mat, x, bias=bias), w, x, bias)


def _check_f32(y, w, x, bias):
    exact = w.astype(np.float64) @ x + bias[:, None]
    tol = (np.abs(w) @ np.abs(x) + np.abs(bias)[:, None]) * (w.shape[1] + 2) * 2.0**-23
    assert y.shape == exact.shape and np.all(np.abs(y - exact) <= tol)


def test_matvec_f32_batched(device, rng):
    w = rng.standard_normal((37, 100)).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    mat = vkcore.F32Matrix(w, device=device)
    for b in (1, 2, 8, 65):
        x = rng.standard_normal((100, b)).astype(np.float32)
        _check_f32(vkcore.matvec_f32(mat, x, bias=bias), w, x, bias)
        _check_f32(vkcore.matvec_f32(w, x, bias=bias, device=device), w, x, bias)
    x = rng.standard_normal(100).astype(np.float32)
    np.testing.assert_array_equal(
        vkcore.matvec_f32(mat, x[:, None], bias=bias)[:, 0], vkcore.matvec_f32(mat, x, bias=bias)
    )


def test_bad_arguments(device, rng):
    qt = _quantize(device, _weights(rng), 8, True, True, None)
    x = rng.standard_normal((100, 4)).astype(np.float32)
    with pytest.raises(ValueError, match=r"x must have shape \(100,\) or \(100, b\)"):
        mb.matvec(qt, x[:99])
    with pytest.raises(ValueError, match="x must have at least one column"):
        vkcore.matvec(qt, x[:, :0])
    with pytest.raises(TypeError, match="x must have a float16, float32 or float64 dtype"):
        vkcore.matvec(qt, x.astype(np.int32), activations="int8")
    with pytest.raises(ValueError, match=r"bias must have shape \(37,\)"):
        vkcore.matvec(qt, x, bias=np.zeros((37, 4), np.float32))
    with pytest.raises(ValueError, match=r"bias must have shape \(37,\)"):
        vkcore.matvec(qt, x, bias=np.zeros(36, np.float32))
    with pytest.raises(ValueError, match="activations must be one of"):
        vkcore.matvec(qt, x, activations="int4")
    with pytest.raises(TypeError, match="x must be a float32 Tensor"):
        vkcore.matvec(qt, vkcore.asarray(x.astype(np.int32), device=device))
    with vkcore.Device() as other:
        xt = vkcore.asarray(x, device=other)
        with pytest.raises(ValueError, match="x must be on the weights' device"):
            vkcore.matvec(qt, xt)
    qt.release()
    with pytest.raises(ValueError, match="released"):
        vkcore.matvec(qt, x)
