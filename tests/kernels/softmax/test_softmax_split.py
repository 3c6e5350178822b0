"""Softmax of inputs larger than one storage-buffer binding: split by rows, and rows
longer than a binding cut into pieces whose partial (m, l) states are merged.

The binding limit is read from device.info.max_storage_buffer_range; the tests shrink it
to a few hundred KiB so that the splits are fast, for numpy and Tensor inputs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels import storage
from vkcore.kernels.softmax import split as sm

ALGS = ["online", "safe"]
LIMIT = 256 << 10  # bytes: 65,536 floats


@pytest.fixture
def small_bindings(device, monkeypatch):
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_storage_buffer_range=LIMIT)
    )
    assert storage.binding_limit(device) == LIMIT
    return device


def check(y, x):
    ref = reference.softmax(x)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, atol=1e-6, rtol=0)
    sums = ref.reshape(-1, x.shape[-1]).sum(-1)
    live = np.isfinite(sums) & (sums > 0)
    got = y.reshape(-1, x.shape[-1]).sum(-1, dtype=np.float64)
    np.testing.assert_allclose(got[live], 1.0, atol=1e-5, rtol=0)


def inputs(rng, shape):
    x = (rng.standard_normal(shape) * 5).astype(np.float32)
    flat = x.reshape(-1, shape[-1])
    flat[0] = np.sort(flat[0])  # the maximum in the last piece
    if flat.shape[0] > 2:
        flat[1, shape[-1] // 2] = np.nan
        flat[2] = -np.inf
        flat[-1] = flat[-1, ::-1].copy()
    return x


@pytest.mark.parametrize("alg", ALGS)
@pytest.mark.parametrize(
    "shape",
    [
        (300, 1000),  # rows in groups of 65
        (7, 65_536),  # exactly one binding per row
        (3, 65_537),  # two pieces, the second of one float
        (2, 200_000),  # four vec4 pieces
        (1, 300_001),  # five float pieces
        (2, 3, 70_000),
    ],
)
@pytest.mark.parametrize("tensor", [False, True])
def test_larger_than_one_binding(small_bindings, rng, alg, shape, tensor):
    dev = small_bindings
    x = inputs(rng, shape)
    assert x.nbytes > LIMIT
    if tensor:
        y = vkcore.softmax(vkcore.asarray(x, device=dev), algorithm=alg).numpy()
    else:
        y = vkcore.softmax(x, algorithm=alg, device=dev)
    assert y.shape == x.shape and y.dtype == np.float32
    check(y, x)


@pytest.mark.parametrize("alg", ALGS)
def test_split_on_another_axis(small_bindings, rng, alg):
    x = inputs(rng, (90_000, 3)).T.copy()  # (3, 90_000) through axis=0 of its transpose
    y = vkcore.softmax(x.T, axis=0, algorithm=alg, device=small_bindings)
    check(y.T, x)


def test_pieces_cover_the_row_in_bindings(small_bindings):
    for n in [65_536, 65_537, 131_072, 200_000, 300_001, 1 << 20]:
        pieces = sm._pieces(small_bindings, n)
        assert pieces[0][0] == 0 and pieces[-1][1] == n
        assert all(b == c for (_, b), (c, _) in zip(pieces[:-1], pieces[1:], strict=True))
        assert all(0 < (b - a) * 4 <= LIMIT for a, b in pieces)
        if n % 4 == 0:
            assert all((b - a) % 4 == 0 for a, b in pieces)


def test_real_binding_limit_8192_squared(device):
    """One real case: 8192 x 8192 float32 is 256 MiB, more than lavapipe's 128 MiB binding.
    Rows repeat 7 patterns, so the float64 reference is computed for 7 rows only."""
    limit = storage.binding_limit(device)
    if limit >= 256 << 20:
        pytest.skip(f"maxStorageBufferRange is {limit} bytes: 8192x8192 fits in one binding")
    rng = np.random.default_rng(11)
    patterns = (rng.standard_normal((7, 8192)) * 4).astype(np.float32)
    patterns[1] = np.sort(patterns[1])
    patterns[2, 100] = np.nan
    x = patterns[np.arange(8192) % 7]
    y = vkcore.softmax(x, device=device)
    ref = reference.softmax(patterns)
    for k in range(7):
        got = y[k::7]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref[k])[None, :].repeat(len(got), 0))
        if k != 2:
            assert np.abs(got - ref[k]).max() <= 1e-6
