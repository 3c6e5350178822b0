"""One rule stores values in a Tensor: ``asarray(values, dtype=...)`` and ``Tensor.write``
follow it alike (asarray wrapped [300, -129] into int8 as [44, 127] and truncated [1.7,
-2.9] into int32 as [1, -2], where Tensor.write refused them). Every Tensor dtype against
every kind of source, against an oracle written apart from vkcore's rule."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conversion_rule import SOURCES, oracle

import vkcore
from vkcore.compute.tensor import TENSOR_DTYPES

DTYPES = [str(d) for d in TENSOR_DTYPES]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("source", list(SOURCES))
def test_asarray_with_a_dtype_and_tensor_write_follow_one_rule(device, dtype, source):
    x = SOURCES[source]
    want = oracle(x, dtype)
    t = vkcore.Tensor.empty(np.shape(x), dtype, device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        if isinstance(want, type):
            with pytest.raises(want, match="data"):
                vkcore.asarray(x, device=device, dtype=dtype)
            with pytest.raises(want, match="data"):
                t.write(x)
            return
        got = vkcore.asarray(x, device=device, dtype=dtype)
        t.write(x)
    assert got.dtype == np.dtype(dtype) and got.shape == np.shape(x)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize(
    ("values", "dtype"),
    [
        ([300, -129], "int8"),
        ([256, 0], "uint8"),
        ([-1, 0], "uint8"),
        ([-1, 0], "uint32"),
        ([2**31, 0], "int32"),
        ([2**32, 0], "uint32"),
        ([70000, 0], "int16"),
        ([np.iinfo(np.int64).min, 0], "int32"),
        (np.array([2**64 - 1, 0], np.uint64), "int8"),
        (np.array([2**63, 0], np.uint64), "int32"),
    ],
)
def test_integers_out_of_range_are_refused_not_wrapped(device, values, dtype):
    with pytest.raises(ValueError, match=f"data does not convert to {dtype} exactly"):
        vkcore.asarray(values, device=device, dtype=dtype)
    with pytest.raises(ValueError, match=f"data does not convert to {dtype} exactly"):
        vkcore.Tensor.empty((2,), dtype, device).write(values)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if np.dtype(d).kind in "iu"])
@pytest.mark.parametrize("values", [[1.7, -2.9], [1.0, 2.0], [np.nan, 0.0]])
def test_floats_are_not_truncated_into_integers(device, dtype, values):
    with pytest.raises(TypeError, match=dtype):
        vkcore.asarray(values, device=device, dtype=dtype)
    with pytest.raises(TypeError, match=dtype):
        vkcore.Tensor.empty((2,), dtype, device).write(values)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "given",
    [
        np.array([0, 1, 2, 100], np.int32),
        np.array([-1, 0, 1, 2**31 - 1], np.int32),
        np.array([0, 7, 200, 255], np.uint8),
        np.array([-1.5, 0.25, 3.0, 6e4], np.float32),
        np.array([-2.0, 0.5, 3.0, 1e4], np.float16),
    ],
)
def test_a_tensor_converted_to_another_dtype_follows_the_rule(device, dtype, given):
    src = vkcore.asarray(given, device=device)
    want = oracle(given, dtype)
    if isinstance(want, type):
        with pytest.raises(want, match="data"):
            vkcore.asarray(src, device=device, dtype=dtype)
        return
    got = vkcore.asarray(src, device=device, dtype=dtype)
    np.testing.assert_array_equal(got.numpy(), want)


def test_the_refusal_names_the_first_value_and_the_range(device):
    with pytest.raises(ValueError, match=r"300 at index 1 is outside -128\.\.127"):
        vkcore.asarray([5, 300, -129], device=device, dtype="int8")
    with pytest.raises(ValueError, match=r"-1 at index \(1, 0\) is outside 0\.\.4294967295"):
        vkcore.Tensor.empty((2, 2), "uint32", device).write([[0, 1], [-1, 2]])


def test_a_failed_write_leaves_the_tensor_unchanged(device):
    t = vkcore.asarray(np.array([1, 2, 3], np.int8), device=device)
    with pytest.raises(ValueError):
        t.write([4, 5, 300])
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])


@pytest.mark.parametrize(
    "given",
    [object(), (i for i in range(3)), {1: 2}, {1, 2}],
    ids=["object", "generator", "dict", "set"],
)
def test_what_is_not_an_array_is_refused_naming_its_type(device, given):
    with pytest.raises(
        TypeError, match=f"data must be array-like of numbers, got {type(given).__name__}"
    ):
        vkcore.asarray(given, device=device)
    with pytest.raises(TypeError, match=type(given).__name__):
        vkcore.Tensor.empty((), "float32", device).write(given)
