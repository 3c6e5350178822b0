"""Input boundaries: odd layouts and odd values work correctly or are refused clearly.

Non-contiguous, negative-stride, broadcast, unaligned, byte-swapped, read-only, huge
in one dimension and empty in another, numpy scalars: each either gives the reference
answer or a TypeError/ValueError naming the argument. No input is ever modified.
Softmax and asarray first; quantize and matvec where vkcore has them.
"""

from __future__ import annotations

import numpy as np
import pytest

import vkcore


def base_matrix(rows: int = 12, cols: int = 40) -> np.ndarray:
    rng = np.random.default_rng(11)
    return (rng.standard_normal((rows, cols)) * 5).astype(np.float32)


def layouts() -> dict[str, np.ndarray]:
    """The same kind of data in every memory layout numpy can hand over."""
    a = base_matrix()
    unaligned_bytes = bytearray(a.nbytes + 1)
    unaligned = np.frombuffer(unaligned_bytes, dtype=np.float32, count=a.size, offset=1)
    unaligned = unaligned.reshape(a.shape)
    unaligned_bytes[1:] = a.tobytes()
    readonly = a.copy()
    readonly.flags.writeable = False
    return {
        "contiguous": a,
        "fortran": np.asfortranarray(a),
        "transposed": a.T,
        "every_other_column": a[:, ::2],
        "negative_rows": a[::-1],
        "negative_both": a[::-2, ::-3],
        "broadcast_row": np.broadcast_to(a[0], (7, a.shape[1])),
        "unaligned": unaligned,
        "byteswapped": a.astype(">f4"),
        "readonly": readonly,
        "strided_3d": base_matrix(24, 30).reshape(4, 6, 30)[:, ::2, 1::2],
    }


def snapshot(x: np.ndarray) -> tuple[bytes, tuple[int, ...], tuple[int, ...], bool]:
    return (np.ascontiguousarray(x).tobytes(), x.shape, x.strides, x.flags.writeable)


@pytest.mark.parametrize("name", sorted(layouts()))
@pytest.mark.parametrize("algorithm", ["online", "safe"])
def test_softmax_any_layout(device, name, algorithm):
    x = layouts()[name]
    before = snapshot(x)
    y = vkcore.softmax(x, algorithm=algorithm, device=device)
    assert snapshot(x) == before, "softmax modified its input"
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", sorted(layouts()))
def test_softmax_other_axis_any_layout(device, name):
    x = layouts()[name]
    before = snapshot(x)
    y = vkcore.softmax(x, axis=0, device=device)
    assert snapshot(x) == before
    np.testing.assert_allclose(y, vkcore.reference.softmax(x, axis=0), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", sorted(layouts()))
def test_asarray_any_layout(device, name):
    x = layouts()[name]
    before = snapshot(x)
    t = vkcore.asarray(x, device=device)
    assert snapshot(x) == before, "asarray modified its input"
    assert t.shape == x.shape
    assert t.dtype == np.float32 and t.dtype.isnative
    np.testing.assert_array_equal(t.numpy(), x)


def test_byteswapped_integers_are_stored_natively(device):
    a = np.arange(-50, 50, dtype=">i4").reshape(10, 10)
    t = vkcore.asarray(a, device=device)
    assert t.dtype == np.int32
    np.testing.assert_array_equal(t.numpy(), a)


def test_numpy_result_is_a_copy_not_a_view(device):
    x = base_matrix()
    t = vkcore.asarray(x, device=device)
    first = t.numpy()
    first[...] = 0
    np.testing.assert_array_equal(t.numpy(), x)
    assert first.flags.owndata or first.base is not None and first.base.flags.owndata


@pytest.mark.parametrize(
    "shape", [(0,), (0, 5), (5, 0), (0, 1 << 40), (1 << 40, 0), (3, 0, 1 << 30), (0, 0)]
)
def test_empty_shapes_huge_in_another_dimension(device, shape):
    x = np.empty(shape, np.float32)
    y = vkcore.softmax(x, device=device)
    assert y.shape == shape and y.dtype == np.float32
    t = vkcore.asarray(x, device=device)
    assert t.shape == shape and t.buffer is None
    assert t.numpy().shape == shape
    assert vkcore.Tensor.empty(shape, np.float32, device).shape == shape


@pytest.mark.parametrize(
    "shape, error",
    [
        ((-2, -2), ValueError),
        ((-1, 4), ValueError),
        (-3, ValueError),
        ((2.7, 2), TypeError),
        ((True, 2), TypeError),
        ("ab", TypeError),
        (None, TypeError),
    ],
)
def test_empty_refuses_a_bad_shape_naming_it(device, shape, error):
    with pytest.raises(error, match="shape"):
        vkcore.Tensor.empty(shape, np.float32, device)


def test_empty_takes_an_int_or_numpy_integers(device):
    assert vkcore.Tensor.empty(5, np.float32, device).shape == (5,)
    assert vkcore.Tensor.empty((np.int64(2), 3), np.float32, device).shape == (2, 3)


def test_one_very_long_row(device):
    x = np.zeros((1, 1 << 22), np.float32)
    x[0, 123_456] = 30.0
    before = snapshot(x)
    y = vkcore.softmax(x, device=device)
    assert snapshot(x) == before
    np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0)


def test_many_length_one_rows(device):
    x = np.random.default_rng(1).standard_normal((70_000, 1)).astype(np.float32)
    x[5, 0] = -np.inf
    x[6, 0] = np.nan
    y = vkcore.softmax(x, device=device)
    np.testing.assert_array_equal(y, vkcore.reference.softmax(x))


@pytest.mark.parametrize(
    "scalar", [np.float32(2.5), np.float64(-1.0), np.float16(3.0), 1.5, np.array(2.0, np.float32)]
)
def test_softmax_refuses_scalars(device, scalar):
    with pytest.raises(ValueError, match="at least one dimension"):
        vkcore.softmax(scalar, device=device)


@pytest.mark.parametrize(
    ("scalar", "dtype"),
    [
        (np.float32(2.5), np.float32),
        (np.int8(-3), np.int8),
        (np.uint16(7), np.uint16),
        (np.array(4, np.int32), np.int32),
        (np.float16(0.5), np.float16),
    ],
)
def test_asarray_accepts_numpy_scalars(device, scalar, dtype):
    t = vkcore.asarray(scalar, device=device)
    assert t.shape == () and t.dtype == dtype
    assert t.numpy() == scalar


def test_softmax_of_one_element_rows_and_lists(device):
    np.testing.assert_array_equal(vkcore.softmax(np.float32([7.0]), device=device), [1.0])
    y = vkcore.softmax([[1.0, 2.0], [3.0, 3.0]], device=device)
    np.testing.assert_allclose(y, vkcore.reference.softmax(np.float32([[1, 2], [3, 3]])), atol=1e-6)


@pytest.mark.parametrize(
    ("value", "error", "pattern"),
    [
        (np.ones(3, bool), TypeError, "float16, float32 or float64"),
        (np.ones(3, np.complex64), TypeError, "float16, float32 or float64"),
        (np.ones(3, np.longdouble), TypeError, "float16, float32 or float64"),
        (np.array([1.0, "a"], dtype=object), TypeError, "x must"),
        ([[1.0, 2.0], [3.0]], TypeError, "x must"),
        ("1.0", TypeError, "x must"),
        (None, TypeError, "x must"),
    ],
)
def test_softmax_refuses_bad_values_clearly(device, value, error, pattern):
    with pytest.raises(error, match=pattern):
        vkcore.softmax(value, device=device)


@pytest.mark.parametrize("axis", [2, -3, 1.0, True, "0"])
def test_softmax_refuses_bad_axis(device, axis):
    with pytest.raises((TypeError, ValueError), match="axis"):
        vkcore.softmax(base_matrix(), axis=axis, device=device)


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        (np.ones(3, np.float64), "float64"),  # float64 converts only when no dtype is asked
        (np.ones(3, np.int64), "dtype"),
        (np.ones(3, bool), "dtype"),
        (np.ones(3, np.complex64), "dtype"),
        (np.array(["a"]), "dtype"),
        (None, "data"),
        ("abc", "data"),
    ],
)
def test_asarray_refuses_unsupported_clearly(device, value, pattern):
    dtype = value.dtype if isinstance(value, np.ndarray) else None  # asked for explicitly
    with pytest.raises(TypeError, match=pattern):
        vkcore.asarray(value, device=device, dtype=dtype)


def test_tensor_input_from_another_device_is_refused(device):
    with vkcore.Device(pipeline_cache=False) as other:
        t = vkcore.asarray(base_matrix(), device=other)
        with pytest.raises(ValueError, match="device"):
            vkcore.softmax(t, device=device)


def test_inputs_with_non_finite_values_are_not_modified(device):
    x = base_matrix()
    x[0, 3] = np.nan
    x[1, :] = -np.inf
    x[2, 5] = np.inf
    x.flags.writeable = False
    before = snapshot(x)
    y = vkcore.softmax(x, device=device)
    assert snapshot(x) == before
    np.testing.assert_array_equal(np.isnan(y), np.isnan(vkcore.reference.softmax(x)))
    np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0)


# ---------------------------------------------------------------- quantization inputs
needs_quant = pytest.mark.skipif(
    not hasattr(vkcore, "quantize"), reason="this vkcore has no quantization kernels"
)


@needs_quant
@pytest.mark.parametrize("name", sorted(layouts()))
def test_quantize_any_layout_equals_contiguous(device, name):
    w = layouts()[name]
    before = snapshot(w)
    if w.ndim != 2:
        with pytest.raises(ValueError, match="2-D"):
            vkcore.quantize(w, device=device)
        return
    qt = vkcore.quantize(w, bits=8, symmetric=False, device=device)
    try:
        assert snapshot(w) == before, "quantize modified its input"
        q, s, z = vkcore.reference.quantize(np.ascontiguousarray(w, np.float32), 8, False, True)
        np.testing.assert_array_equal(qt.q, q)
        np.testing.assert_array_equal(qt.scale, s)
        np.testing.assert_array_equal(qt.zero_point, z)
    finally:
        qt.release()


def vector_layouts(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    v = rng.standard_normal(2 * n).astype(np.float32)
    readonly = v[:n].copy()
    readonly.flags.writeable = False
    return {
        "contiguous": v[:n].copy(),
        "every_other": v[::2],
        "reversed": v[:n][::-1],
        "column_of_matrix": np.asfortranarray(v.reshape(n, 2))[:, 0],
        "readonly": readonly,
        "byteswapped": v[:n].astype(">f4"),
        "float64": v[:n].astype(np.float64),
        "broadcast": np.broadcast_to(np.float32(0.5), (n,)),
    }


@needs_quant
@pytest.mark.parametrize("activations", ["float", "int8", "uint8"])
@pytest.mark.parametrize("name", sorted(vector_layouts(4)))
def test_matvec_any_vector_layout(device, name, activations):
    n = 37
    w = base_matrix(9, n)
    qt = vkcore.quantize(w, device=device)
    try:
        x = vector_layouts(n)[name]
        bias = vector_layouts(9)[name]
        before = (snapshot(x), snapshot(bias))
        y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=device)
        assert (snapshot(x), snapshot(bias)) == before, "matvec modified its input"
        x32, b32 = np.ascontiguousarray(x, np.float32), np.ascontiguousarray(bias, np.float32)
        want = vkcore.matvec(qt, x32, bias=b32, activations=activations, device=device)
        np.testing.assert_array_equal(y, want)
    finally:
        qt.release()


@needs_quant
@pytest.mark.parametrize(
    ("w", "error", "pattern"),
    [
        (np.float32(1.0), ValueError, "2-D"),
        (np.ones(5, np.float32), ValueError, "2-D"),
        (np.ones((0, 5), np.float32), ValueError, "empty"),
        (np.ones((5, 0), np.float32), ValueError, "empty"),
        (np.ones((2, 3, 4), np.float32), ValueError, "2-D"),
        (np.ones((2, 3), np.int8), TypeError, "float"),
        (None, TypeError, "w must"),
    ],
)
def test_quantize_refuses_bad_weights_clearly(device, w, error, pattern):
    with pytest.raises(error, match=pattern):
        vkcore.quantize(w, device=device)


@needs_quant
@pytest.mark.parametrize(
    ("x", "pattern"),
    [
        (np.float32(1.0), "shape"),
        (np.ones(36, np.float32), "shape"),
        (np.ones((37, 1, 1), np.float32), "shape"),
        (np.ones((36, 2), np.float32), "shape"),  # a batch (n, b) with the wrong n
        (np.ones((1, 37), np.float32), "shape"),  # a row vector is not a batch of columns
        (np.ones((37, 0), np.float32), "at least one column"),
        (np.empty(0, np.float32), "shape"),
    ],
)
def test_matvec_refuses_bad_vectors_clearly(device, x, pattern):
    qt = vkcore.quantize(base_matrix(9, 37), device=device)
    try:
        with pytest.raises(ValueError, match=pattern):
            vkcore.matvec(qt, x, device=device)
    finally:
        qt.release()
