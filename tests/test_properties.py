"""Property tests (hypothesis): every kernel against its numpy reference.

Random shapes (the smallest, odd lengths, rows long enough to be split across
workgroups), random magnitudes, and non-finite values sprinkled in. The oracle is the
documented semantics, implemented by :mod:`vkcore.reference`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import vkcore

# VKCORE_PROPERTY_EXAMPLES raises the count for a longer hunt (default: quick enough for CI).
SETTINGS = settings(
    max_examples=int(os.environ.get("VKCORE_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Row lengths: tiny, odd, vec4-aligned and not, and long enough to split a row.
ROW_LENGTHS = st.one_of(
    st.integers(1, 9),
    st.integers(10, 300),
    st.sampled_from([1023, 1024, 1025, 4095, 4096, 8191, 8192, 8193, 20_000, 65_537]),
)
SPECIALS = np.array([np.nan, np.inf, -np.inf], np.float32)


@st.composite
def softmax_inputs(draw: st.DrawFn) -> np.ndarray:
    """A float32 array: random shape and scale, optional non-finite values and masked rows."""
    n = draw(ROW_LENGTHS)
    lead = draw(st.lists(st.integers(1, 5), min_size=0, max_size=2))
    if n > 5000:
        lead = lead[:1]
    shape = (*lead, n)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = np.float32(10.0 ** draw(st.integers(-6, 37)))
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    if draw(st.booleans()):  # sprinkle NaN / +inf / -inf
        count = draw(st.integers(1, 4))
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, count)] = rng.choice(SPECIALS, count)
    if draw(st.booleans()) and x.ndim > 1:  # a fully masked row
        x.reshape(-1, n)[rng.integers(0, x.size // n)] = -np.inf
    return x


def assert_softmax_matches(y: np.ndarray, x: np.ndarray, axis: int = -1) -> None:
    ref = vkcore.reference.softmax(x, axis=axis)
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg="NaN rows differ")
    np.testing.assert_allclose(y, ref, atol=1e-6, rtol=0)
    sums = np.moveaxis(ref, axis, -1).sum(axis=-1)
    live = np.isfinite(sums) & (sums > 0)  # rows neither NaN nor fully masked
    got = np.moveaxis(y, axis, -1).sum(axis=-1, dtype=np.float64)
    np.testing.assert_allclose(got[live], 1.0, atol=1e-5, rtol=0)


@SETTINGS
@given(x=softmax_inputs(), algorithm=st.sampled_from(["online", "safe"]))
def test_softmax_matches_reference(device, x, algorithm):
    before = x.copy()
    y = vkcore.softmax(x, algorithm=algorithm, device=device)
    np.testing.assert_array_equal(x, before)
    assert_softmax_matches(y, x)


@SETTINGS
@given(
    x=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=12),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    ),
    data=st.data(),
)
def test_softmax_any_float32_values_any_axis(device, x, data):
    """Every float32 value hypothesis can think of: subnormals, extremes, signed zeros."""
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    y = vkcore.softmax(x, axis=axis, device=device)
    assert_softmax_matches(y, x, axis)


@SETTINGS
@given(
    x=hnp.arrays(
        st.sampled_from([np.float16, np.float64]),
        hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=50),
        elements=st.floats(-1e4, 1e4, width=16),
    )
)
def test_softmax_other_float_dtypes_are_converted(device, x):
    y = vkcore.softmax(x, device=device)
    assert_softmax_matches(y, x)


@pytest.mark.parametrize("algorithm", ["online", "safe"])
def test_softmax_seed_example(device, algorithm):
    y = vkcore.softmax(np.float32([1000, 1001, 1002]), algorithm=algorithm, device=device)
    expected = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]
    np.testing.assert_allclose(y, expected, atol=1e-6, rtol=0)
