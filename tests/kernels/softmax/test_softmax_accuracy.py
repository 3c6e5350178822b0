"""Softmax accuracy for every ordering of a row: max abs error <= 1e-6 against the float64
reference and row sums 1 +- 1e-5, for both algorithms.

The inputs are the orderings that break a running sum rescaled at every step where the
maximum grows: ascending, descending, sorted normal, sawtooth, blocks, and dynamic ranges
from -1e30 to 80, on vec4 and odd lengths, on rows split across workgroups and rows of
one workgroup each.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkcore
from vkcore import reference
from vkcore.kernels.softmax import stages as sm

ALGS = ["online", "safe"]
SETTINGS = settings(
    max_examples=int(os.environ.get("VKCORE_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def check(y: np.ndarray, x: np.ndarray) -> None:
    ref = reference.softmax(x)
    assert y.shape == x.shape and y.dtype == np.float32
    err = np.abs(y - ref).max()
    assert err <= 1e-6, f"max abs error {err:.3g}"
    sums = y.reshape(-1, x.shape[-1]).sum(axis=-1, dtype=np.float64)
    assert np.abs(sums - 1).max() <= 1e-5, f"row sums off by {np.abs(sums - 1).max():.3g}"


def ordered(values: np.ndarray, order: str, period: int = 1000) -> np.ndarray:
    """``values`` (float32, one row) rearranged in one of the adversarial orders."""
    s = np.sort(values)
    if order == "ascending":
        return s
    if order == "descending":
        return s[::-1].copy()
    if order == "sawtooth":  # ascending runs of `period`, each over the whole range
        runs = -(-s.size // period)
        idx = np.arange(s.size)
        return s[np.argsort((idx % runs) * s.size + idx // runs, kind="stable")]
    if order == "interleaved":  # smallest, largest, second smallest, ...
        out = np.empty_like(s)
        half = (s.size + 1) // 2
        out[0::2] = s[:half]
        out[1::2] = s[half:][::-1]
        return out
    return values


# Long rows: one row split across workgroups, ordered so that the maximum keeps growing.
@pytest.mark.parametrize("alg", ALGS)
def test_ascending_linspace_2_22(device, alg):
    x = np.linspace(0, 10, 1 << 22, dtype=np.float32)
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("order", ["ascending", "descending", "sawtooth", "interleaved"])
def test_sorted_normal_2_20(device, alg, order):
    rng = np.random.default_rng(7)
    x = ordered(rng.standard_normal(1 << 20).astype(np.float32), order)
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
def test_one_row_of_2_24_ascending(device, alg):
    x = np.linspace(-30, 50, 1 << 24, dtype=np.float32)
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("n", [1 << 18, (1 << 18) + 3])  # vec4 and float loads
@pytest.mark.parametrize(
    "kind", ["huge_range", "steps_of_minus_80_and_0", "tiny_steps", "ascending_wide"]
)
def test_dynamic_range(device, alg, n, kind):
    i = np.arange(n)
    if kind == "huge_range":  # -1e30 .. 80, ascending
        x = np.concatenate([-np.logspace(30, -3, n // 2), np.linspace(0, 80, n - n // 2)])
    elif kind == "steps_of_minus_80_and_0":
        x = np.where((i // 3000) % 2 == 0, -80.0, 0.0)
        x[-1] = 0.5
    elif kind == "tiny_steps":  # the maximum grows by one float32 ulp at a time
        x = 20.0 + np.arange(n) * 2.0**-19
    else:
        x = np.linspace(-1e4, 80, n)
    x = x.astype(np.float32)
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize("n", [1 << 14, (1 << 14) + 1])
def test_many_ascending_rows_one_workgroup_each(device, alg, n):
    rows = 4 * sm.c.parallelism(device) + 1
    assert sm.plan(device, rows, n).nchunks == 1
    x = np.linspace(0, 12, n, dtype=np.float32) + np.arange(rows, dtype=np.float32)[:, None]
    x[1::2] = x[1::2, ::-1]
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@st.composite
def adversarial_rows(draw: st.DrawFn) -> np.ndarray:
    """One or a few rows with a random distribution, scale and adversarial order."""
    n = draw(
        st.one_of(
            st.integers(1, 300),
            st.integers(8000, 70_000),
            st.sampled_from([(1 << 18) + 1, 1 << 20, (1 << 20) + 3]),
        )
    )
    rows = 1 if n > 10_000 else draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dist = draw(st.sampled_from(["normal", "uniform", "exponential", "two_levels"]))
    scale = draw(st.sampled_from([1e-3, 1.0, 5.0, 20.0, 100.0, 1e4]))
    if dist == "normal":
        base = rng.standard_normal((rows, n))
    elif dist == "uniform":
        base = rng.uniform(-1, 1, (rows, n))
    elif dist == "exponential":
        base = -rng.exponential(1, (rows, n))
    else:
        base = np.where(rng.random((rows, n)) < 0.5, -1.0, 0.0)
    x = (base * scale + draw(st.sampled_from([0.0, -1000.0, 80.0]))).astype(np.float32)
    order = draw(st.sampled_from(["ascending", "descending", "sawtooth", "interleaved", "none"]))
    period = draw(st.integers(2, 5000))
    return np.stack([ordered(r, order, period) for r in x])


@SETTINGS
@given(x=adversarial_rows(), alg=st.sampled_from(ALGS))
def test_any_order_is_accurate(device, x, alg):
    check(vkcore.softmax(x, algorithm=alg, device=device), x)


@st.composite
def long_monotone_rows(draw: st.DrawFn) -> np.ndarray:
    """One long row whose maximum keeps growing: sorted, in long ascending runs, or stepped."""
    n = draw(st.sampled_from([1 << 20, (1 << 20) + 3, (1 << 19) + 1]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.floats(0.05, 30.0))
    dist = draw(st.sampled_from(["normal", "uniform", "linspace"]))
    if dist == "normal":
        base = rng.standard_normal(n)
    elif dist == "uniform":
        base = rng.uniform(-1, 1, n)
    else:
        base = np.linspace(-1, 1, n)
    x = (base * scale + draw(st.sampled_from([0.0, -500.0, 60.0]))).astype(np.float32)
    order = draw(st.sampled_from(["ascending", "sawtooth"]))
    return ordered(x, order, n // draw(st.integers(1, 8)))[None, :]  # 1-8 long runs


@settings(SETTINGS, max_examples=int(os.environ.get("VKCORE_PROPERTY_EXAMPLES", "12")))
@given(x=long_monotone_rows(), alg=st.sampled_from(ALGS))
def test_long_growing_rows_are_accurate(device, x, alg):
    check(vkcore.softmax(x, algorithm=alg, device=device), x)
