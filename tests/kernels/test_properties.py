"""Property tests (hypothesis): every kernel against its numpy reference.

Random shapes (the smallest, odd lengths, rows long enough to be split across
workgroups), random magnitudes, and non-finite values sprinkled in. The oracle is the
documented semantics, implemented by :mod:`vkcore.reference`: softmax within 1e-6 with
NaN rows exactly where the reference has them; quantize and dequantize bit for bit, a
non-finite weight refused naming its position; integer-mode matvec bit for bit with
exact accumulators, float-mode matvec within the float32 summation bound; a NaN or
infinity in x propagates in float mode and makes every integer-mode output NaN.
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


# ---------------------------------------------------------------- quantize, dequantize, matvec
needs_quant = pytest.mark.skipif(
    not hasattr(vkcore, "quantize"), reason="this vkcore has no quantization kernels"
)
WEIGHT_OPTIONS = st.tuples(st.integers(2, 8), st.booleans(), st.booleans())
ROWS = st.one_of(st.integers(1, 9), st.integers(10, 70))
COLS = st.one_of(st.integers(1, 40), st.integers(41, 300), st.sampled_from([1029, 4099]))


@st.composite
def weight_matrices(draw: st.DrawFn, decades: int = 30) -> np.ndarray:
    """float32 (m, n): random scale and shape of distribution, zero rows, subnormals."""
    m, n = draw(ROWS), draw(COLS)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = np.float32(10.0 ** draw(st.integers(-decades, decades)))
    kind = draw(st.sampled_from(["normal", "uniform", "positive", "negative", "sparse"]))
    if kind == "normal":
        w = rng.standard_normal((m, n))
    elif kind == "uniform":
        w = rng.uniform(-1, 1, (m, n))
    elif kind == "positive":
        w = rng.uniform(0, 1, (m, n))
    elif kind == "negative":
        w = -rng.uniform(0, 1, (m, n))
    else:
        w = rng.standard_normal((m, n)) * (rng.random((m, n)) < 0.1)
    w = (w * scale).astype(np.float32)
    if draw(st.booleans()):
        w[rng.integers(0, m)] = 0.0  # a row of zeros
    if draw(st.booleans()):  # subnormal weights, which count as zero
        w.reshape(-1)[rng.integers(0, w.size, 3)] = np.float32(1e-40)
    return w


def quantize_checked(device, w, bits, symmetric, per_channel):
    before = w.copy()
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)
    np.testing.assert_array_equal(w, before)
    return qt


@needs_quant
@SETTINGS
@given(w=weight_matrices(), options=WEIGHT_OPTIONS)
def test_quantize_dequantize_match_reference_bit_for_bit(device, w, options):
    bits, symmetric, per_channel = options
    qt = quantize_checked(device, w, bits, symmetric, per_channel)
    try:
        q, s, z = vkcore.reference.quantize(w, bits, symmetric, per_channel)
        got = qt.q
        assert got.dtype == q.dtype and got.shape == q.shape
        np.testing.assert_array_equal(got, q)
        np.testing.assert_array_equal(qt.scale, s)
        np.testing.assert_array_equal(qt.zero_point, z)
        flush = vkcore.reference.flush_subnormals  # a device may flush subnormal results
        np.testing.assert_array_equal(
            flush(vkcore.dequantize(qt)), flush(vkcore.reference.dequantize(q, s, z))
        )
    finally:
        qt.release()


@needs_quant
@SETTINGS
@given(w=weight_matrices(), options=WEIGHT_OPTIONS, data=st.data())
def test_quantize_refuses_non_finite_weights_naming_the_first(device, w, options, data):
    bits, symmetric, per_channel = options
    count = data.draw(st.integers(1, 3))
    flat = w.reshape(-1)
    places = data.draw(st.lists(st.integers(0, flat.size - 1), min_size=count, max_size=count))
    flat[places] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    row, col = divmod(min(places), w.shape[1])
    with pytest.raises(ValueError, match=rf"w\[{row}, {col}\]"):
        vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)


def float_mode_tolerance(qt, x: np.ndarray) -> np.ndarray:
    """float32 summation error bound: n * eps * s_i * sum_j |v_ij x_j| (plus 1e-6 relative)."""
    m = qt.shape[0]
    v = qt.q.astype(np.float64) - np.broadcast_to(qt.zero_point, (m,))[:, None]
    s = np.broadcast_to(qt.scale, (m,)).astype(np.float64)
    return s * (np.abs(v) @ np.abs(x.astype(np.float64))) * qt.shape[1] * 2.0**-23 + 1e-30


@st.composite
def matvec_inputs(draw: st.DrawFn):
    """Weights, activations and bias whose products and sums stay inside float32's range
    (beyond it float32 overflows to inf where the float64 references do not)."""
    w = draw(weight_matrices(decades=15))
    m, n = w.shape
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal(n) * 10.0 ** draw(st.integers(-15, 15))).astype(np.float32)
    if draw(st.booleans()):
        x = np.abs(x)  # one-sided activations (uint8's zero point at 0)
    bias = None
    if draw(st.booleans()):
        bias = (rng.standard_normal(m) * 10.0 ** draw(st.integers(-5, 5))).astype(np.float32)
    return w, x, bias


# What every matvec property draws: weights, x and bias, weight options, activation mode.
MATVEC_CASES = {
    "case": matvec_inputs(),
    "options": WEIGHT_OPTIONS,
    "activations": st.sampled_from(["float", "int8", "uint8"]),
}


@needs_quant
@SETTINGS
@given(**MATVEC_CASES)
def test_matvec_matches_reference(device, case, options, activations):
    from vkcore.kernels.matvec import matvec as mv

    w, x, bias = case
    bits, symmetric, per_channel = options
    qt = quantize_checked(device, w, bits, symmetric, per_channel)
    try:
        x_before = x.copy()
        y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=device)
        np.testing.assert_array_equal(x, x_before)
        q, s, z = qt.q, qt.scale, qt.zero_point
        want = vkcore.reference.matvec(q, s, z, x, bias, activations)
        assert y.dtype == np.float32 and y.shape == (w.shape[0],)
        if activations == "float":
            err = np.abs(y.astype(np.float64) - want)
            bound = float_mode_tolerance(qt, x) + 1e-6 * np.abs(want.astype(np.float64))
            assert np.all(err <= bound), np.argwhere(err > bound)[:3]
            return
        np.testing.assert_array_equal(y, want)
        acc = mv.integer_accumulators(qt, x, activations)
        qx, _, zx = vkcore.reference.quantize_activations(x, activations)
        zero = np.broadcast_to(z, (w.shape[0],))
        np.testing.assert_array_equal(acc, vkcore.reference.matvec_accumulators(q, zero, qx, zx))
    finally:
        qt.release()


@needs_quant
@SETTINGS
@given(**MATVEC_CASES, data=st.data())
def test_matvec_non_finite_activations(device, case, options, activations, data):
    """float mode: NaN and inf propagate as in the reference; integer modes: all NaN."""
    w, x, bias = case
    bits, symmetric, per_channel = options
    x = x.copy()
    count = data.draw(st.integers(1, 3))
    places = data.draw(st.lists(st.integers(0, x.size - 1), min_size=count, max_size=count))
    x[places] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    qt = quantize_checked(device, w, bits, symmetric, per_channel)
    try:
        y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=device)
        with np.errstate(invalid="ignore", over="ignore"):
            want = vkcore.reference.matvec(qt.q, qt.scale, qt.zero_point, x, bias, activations)
        if activations != "float":
            assert np.isnan(y).all() and np.isnan(want).all(), y
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(y), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(y), np.isneginf(want))
    finally:
        qt.release()


@needs_quant
@pytest.mark.parametrize("activations", ["int8", "uint8"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_integer_matvec_non_finite_activations_are_not_silent(device, activations, bad):
    """A non-finite activation must raise ValueError or give non-finite outputs."""
    w = np.random.default_rng(0).standard_normal((5, 20)).astype(np.float32)
    x = np.ones(20, np.float32)
    x[3] = bad
    qt = vkcore.quantize(w, device=device)
    try:
        try:
            y = vkcore.matvec(qt, x, activations=activations, device=device)
        except ValueError:
            return
        assert not np.isfinite(y).any(), f"finite output {y} from a non-finite activation"
    finally:
        qt.release()


@needs_quant
@SETTINGS
@given(case=matvec_inputs())
def test_matvec_f32_baseline(device, case):
    w, x, bias = case
    y = vkcore.matvec_f32(w, x, bias=bias, device=device)
    want = w.astype(np.float64) @ x.astype(np.float64)
    if bias is not None:
        want += bias
    bound = (np.abs(w.astype(np.float64)) @ np.abs(x.astype(np.float64))) * w.shape[1] * 2.0**-23
    bound += 1e-6 * np.abs(want) + 1e-30
    flush = vkcore.reference.flush_subnormals
    assert np.all(np.abs(flush(y) - want) <= bound + np.abs(want - flush(want)))
