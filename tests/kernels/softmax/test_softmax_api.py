"""The softmax family with numpy/scipy habits: integer input, axis=None and tuples, out=,
and log_softmax, against the float64 references."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vkcore
from vkcore import reference
from vkcore.kernels.softmax import axes

ALGS = ["online", "safe"]
FUNCS = {"softmax": (vkcore.softmax, reference.softmax)}
if hasattr(vkcore, "log_softmax"):
    FUNCS["log_softmax"] = (vkcore.log_softmax, reference.log_softmax)

# Tolerances against the float64 references. log_softmax: 1e-6 absolute plus 1e-6 relative,
# since float32 itself spaces values near -50 by 3.8e-6.
SOFTMAX_ATOL = 1e-6
LOG_ATOL = LOG_RTOL = 1e-6


def ref_over(ref, x, axis):
    """The reference over an axis set: the axes moved last and flattened into one row."""
    a = np.asarray(x, dtype=np.float32)
    ax = axes.normalize_axes(axis, a.ndim)
    rows, shape, restore = axes.as_rows(a, ax)
    return restore(ref(rows.astype(np.float64), axis=-1).reshape(shape))


def check(name, y, x, axis=-1):
    ref = ref_over(FUNCS[name][1], x, axis)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    assert y.shape == np.shape(x)
    same_nan = np.isnan(y) == np.isnan(ref)
    assert same_nan.all(), "NaN where the reference has none, or the other way round"
    fin = np.isfinite(ref)
    assert (y[~fin & ~np.isnan(ref)] == ref[~fin & ~np.isnan(ref)]).all()
    err = np.abs(y[fin].astype(np.float64) - ref[fin])
    if name == "softmax":
        assert err.max(initial=0) <= SOFTMAX_ATOL
    else:
        assert (err <= LOG_ATOL + LOG_RTOL * np.abs(ref[fin])).all(), err.max(initial=0)


# ---------------------------------------------------------------- scipy's own test cases
@pytest.mark.parametrize("alg", ALGS)
def test_integer_lists_like_scipy(device, alg):
    y = vkcore.softmax([1000, 0, 0, 0], algorithm=alg, device=device)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [1, 0, 0, 0])
    np.testing.assert_array_equal(vkcore.softmax([1, 1], algorithm=alg, device=device), [0.5, 0.5])
    seed = vkcore.softmax([1000, 1001, 1002], algorithm=alg, device=device)
    np.testing.assert_allclose(seed, [0.09003057, 0.24472848, 0.66524096], atol=1e-7)


@pytest.mark.parametrize("name", list(FUNCS))
def test_axis_zero_of_a_2d_list_and_ndim_kept(device, name):
    x = [[1, 2, 3], [4, 6, 9]]
    y = FUNCS[name][0](x, axis=0, device=device)
    assert y.shape == (2, 3)
    check(name, y, x, axis=0)


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("axis", [None, (1, 2), (0, 2), (2, 0), (-1, 0), (0, 1, 2), ()])
def test_axis_none_and_tuples(device, rng, name, axis):
    x = (rng.standard_normal((3, 5, 7)) * 4).astype(np.float32)
    y = FUNCS[name][0](x, axis=axis, device=device)
    check(name, y, x, axis)
    if name == "softmax" and axis != ():
        total = y.sum(axis=axis, dtype=np.float64)
        np.testing.assert_allclose(total, 1, atol=1e-5)


def test_axis_none_is_the_whole_array_as_one_row(device, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = vkcore.softmax(x, axis=None, device=device)
    assert abs(float(y.sum(dtype=np.float64)) - 1) <= 1e-5
    np.testing.assert_allclose(y.ravel(), reference.softmax(x.ravel()), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize(
    "axis, error",
    [
        ((0, 0), ValueError),
        ((0, -3), ValueError),
        (3, ValueError),
        ((0, 5), ValueError),
        (1.0, TypeError),
        (True, TypeError),
        ((0, "1"), TypeError),
        ([0, 1], TypeError),
    ],
)
def test_bad_axes_are_clear_errors(device, name, axis, error):
    with pytest.raises(error, match="axis"):
        FUNCS[name][0](np.zeros((2, 3, 4), np.float32), axis=axis, device=device)


# ---------------------------------------------------------------- dtypes
@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
)
def test_every_integer_dtype_converts_to_float32(device, name, dtype):
    info = np.iinfo(dtype)
    x = np.array([[0, 1, 2, 3], [info.min, info.max, 0, 1]], dtype=dtype)
    y = FUNCS[name][0](x, device=device)
    check(name, y, x.astype(np.float32))


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_dtypes(device, rng, name, dtype):
    x = (rng.standard_normal((5, 33)) * 5).astype(dtype)
    check(name, FUNCS[name][0](x, device=device), x.astype(np.float32))


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize(
    "value", [np.array([True, False]), np.array([1 + 2j, 3j]), np.array([1, "a"], dtype=object)]
)
def test_bool_complex_object_are_type_errors(device, name, value):
    with pytest.raises(TypeError, match="x"):
        FUNCS[name][0](value, device=device)


# ---------------------------------------------------------------- layouts and out=
@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("layout", ["transposed", "strided", "fortran", "negative", "readonly"])
def test_every_layout(device, rng, name, layout):
    base = (rng.standard_normal((12, 40)) * 3).astype(np.float32)
    x = {
        "transposed": base.T,
        "strided": base[::2, ::3],
        "fortran": np.asfortranarray(base),
        "negative": base[::-1, ::-1],
        "readonly": base.copy(),
    }[layout]
    if layout == "readonly":
        x.flags.writeable = False
    for axis in (-1, 0, None):
        check(name, FUNCS[name][0](x, axis=axis, device=device), x, axis)


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("axis", [-1, 0, None, (0, 2)])
def test_out_is_written_and_returned(device, rng, name, axis):
    x = (rng.standard_normal((4, 6, 10)) * 3).astype(np.float32)
    out = np.full(x.shape, 7.0, np.float32)
    y = FUNCS[name][0](x, axis=axis, out=out, device=device)
    assert y is out
    check(name, out, x, axis)


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("axis", [-1, 0, None])
@pytest.mark.parametrize("shape", [(4, 10), (300, 1024)])  # small, and large (pooled/imported)
def test_out_may_be_the_input_itself(device, rng, name, axis, shape):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    expected = ref_over(FUNCS[name][1], x, axis)
    y = FUNCS[name][0](x, axis=axis, out=x, device=device)
    assert y is x
    err = np.abs(x.astype(np.float64) - expected)
    assert (err <= 1e-6 + 1e-6 * np.abs(expected)).all()


@pytest.mark.parametrize("name", list(FUNCS))
def test_out_tensor(device, rng, name):
    x = (rng.standard_normal((8, 64)) * 3).astype(np.float32)
    t = vkcore.asarray(x, device=device)
    out = vkcore.Tensor.empty((8, 64), np.float32, device)
    y = FUNCS[name][0](t, out=out)
    assert y is out
    check(name, out.numpy(), x)
    # in place on a Tensor
    z = FUNCS[name][0](t, out=t)
    assert z is t
    check(name, t.numpy(), x)


@pytest.mark.parametrize("name", list(FUNCS))
def test_bad_out_is_a_clear_error(device, name):
    x = np.zeros((3, 4), np.float32)
    f = FUNCS[name][0]
    with pytest.raises(ValueError, match="out must have shape"):
        f(x, out=np.zeros((4, 3), np.float32), device=device)
    with pytest.raises(TypeError, match="out must have dtype float32"):
        f(x, out=np.zeros((3, 4), np.float64), device=device)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        f(x, out=np.zeros((4, 3), np.float32).T, device=device)
    ro = np.zeros((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writable"):
        f(x, out=ro, device=device)
    with pytest.raises(TypeError, match="out must be"):
        f(x, out=[0.0] * 12, device=device)
    with pytest.raises(TypeError, match="out must be a numpy array for a numpy x"):
        f(x, out=vkcore.Tensor.empty((3, 4), np.float32, device), device=device)
    other = vkcore.Device()
    try:
        elsewhere = vkcore.Tensor.empty((3, 4), np.float32, other)
        with pytest.raises(ValueError, match="another device"):
            f(vkcore.asarray(x, device=device), out=elsewhere)
    finally:
        other.close()
    t = vkcore.asarray(x, device=device)
    with pytest.raises((TypeError, ValueError), match="out"):
        f(t, out=np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="out"):
        f(t, out=vkcore.Tensor.empty((4, 3), np.float32, device))


# ---------------------------------------------------------------- log_softmax
needs_log = pytest.mark.skipif("log_softmax" not in FUNCS, reason="log_softmax not built")


@needs_log
@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("shape", [(1,), (3, 7), (5, 4096), (2, 100_003), (1, 1 << 20)])
def test_log_softmax_accuracy(device, rng, alg, shape):
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    check("log_softmax", vkcore.log_softmax(x, algorithm=alg, device=device), x)


@needs_log
@pytest.mark.parametrize("alg", ALGS)
def test_log_softmax_edge_cases(device, alg):
    x = np.array(
        [
            [0.0, -np.inf, 1.0, 2.0],
            [-np.inf] * 4,
            [0.0, np.nan, 1.0, 2.0],
            [0.0, np.inf, 1.0, 2.0],
            [-np.inf, -np.inf, 5.0, -np.inf],
            [1e30, -1e30, 0.0, 1.0],
        ],
        np.float32,
    )
    y = vkcore.log_softmax(x, algorithm=alg, device=device)
    assert y[0, 1] == -np.inf and np.isfinite(y[0, [0, 2, 3]]).all()
    assert (y[1] == -np.inf).all(), "an all -inf row: softmax 0, log -inf"
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()
    np.testing.assert_array_equal(y[4], [-np.inf, -np.inf, 0.0, -np.inf])
    assert y[5, 0] == 0.0 and y[5, 1] == -2e30
    check("log_softmax", y, x)


@needs_log
def test_log_softmax_seed_fixtures(device):
    y = vkcore.log_softmax([1000, 0, 0, 0], device=device)
    np.testing.assert_array_equal(y, [0, -1000, -1000, -1000])


_rows = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=40),
    elements=st.floats(-80, 80, width=32),
)


@needs_log
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(x=_rows, shift=st.floats(-1000, 1000, width=32))
def test_log_softmax_properties(device, x, shift):
    ls = vkcore.log_softmax(x, device=device)
    sm = vkcore.softmax(x, device=device)
    np.testing.assert_allclose(np.exp(ls.astype(np.float64)), sm, atol=2e-6, rtol=1e-5)
    shifted = (x.astype(np.float64) + shift).astype(np.float32)
    # Invariance to a constant, up to the rounding of x + shift itself.
    moved = vkcore.log_softmax(shifted, device=device)
    check("log_softmax", moved, shifted)
    slack = 2 * np.spacing(np.float32(abs(shift) + 80)) + 2e-6
    assert (np.abs(moved.astype(np.float64) - ls) <= slack + 1e-6 * np.abs(ls)).all()


SMALL_BINDING = 64 << 10  # bytes: inputs above this are split, a binding at a time


@pytest.fixture
def small_bindings(device, monkeypatch):
    import dataclasses

    small = dataclasses.replace(device.info, max_storage_buffer_range=SMALL_BINDING)
    monkeypatch.setattr(device, "info", small)
    return device


@pytest.mark.parametrize("name", list(FUNCS))
@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize(
    "rows, n, shift",
    [(3, 16384, 16384), (3, 16384, -16384), (2, 40000, 4096), (2, 40000, -4096), (3, 16384, 0)],
)
def test_out_overlapping_x_on_the_split_path(small_bindings, rng, name, alg, rows, n, shift):
    """out shifted against x inside one array (or x itself), inputs larger than a binding:
    later pieces must still be read from the input, not from results already written."""
    size = rows * n
    buf = np.zeros(size + abs(shift), np.float32)
    x_at, out_at = (0, shift) if shift >= 0 else (-shift, 0)
    buf[x_at : x_at + size] = (rng.standard_normal(size) * 4).astype(np.float32)
    x = buf[x_at : x_at + size].reshape(rows, n)
    expected = FUNCS[name][1](x.copy())
    out = buf[out_at : out_at + size].reshape(rows, n)
    got = FUNCS[name][0](x, algorithm=alg, out=out, device=small_bindings)
    assert got is out
    err = np.abs(out.astype(np.float64) - expected)
    assert (err <= 1e-6 + 1e-6 * np.abs(expected)).all(), err.max()


@pytest.mark.parametrize("name", list(FUNCS))
def test_tensor_out_empty_and_released(device, name):
    f = FUNCS[name][0]
    empty = vkcore.Tensor.empty((0, 4), np.float32, device)
    assert f(vkcore.Tensor.empty((0, 4), np.float32, device), out=empty) is empty
    x = vkcore.asarray(np.zeros((2, 4), np.float32), device=device)
    gone = vkcore.Tensor.empty((2, 4), np.float32, device)
    assert gone.buffer is not None
    gone.buffer.destroy()
    with pytest.raises(ValueError, match="out is a released Tensor"):
        f(x, out=gone)
