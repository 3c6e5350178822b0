"""vkcore.attention's interface: numpy in numpy out, Tensors in Tensor out (also inside
a sequence), ``out=``, empty inputs, and errors that name the argument."""

from __future__ import annotations

import decimal
import fractions

import numpy as np
import pytest
from binding_limits import assert_within

import vkcore
from vkcore import reference


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_numpy_and_tensor_paths_agree(device, rng):
    q, k, v = rand(rng, 2, 4, 6, 8), rand(rng, 2, 2, 9, 8), rand(rng, 2, 2, 9, 5)
    got = vkcore.attention(q, k, v, causal=True, device=device)
    assert isinstance(got, np.ndarray) and got.shape == (2, 4, 6, 5)
    tq, tk, tv = (vkcore.asarray(x, device=device) for x in (q, k, v))
    t = vkcore.attention(tq, tk, tv, causal=True)
    assert isinstance(t, vkcore.Tensor)
    np.testing.assert_array_equal(t.numpy(), got)
    with vkcore.sequence(device=device):
        s = vkcore.attention(q, k, v, causal=True, device=device)  # numpy uploaded
        assert isinstance(s, vkcore.Tensor)
    np.testing.assert_array_equal(s.numpy(), got)
    out = np.empty_like(got)
    assert vkcore.attention(q, k.astype(np.float64), v, causal=True, out=out, device=device) is out
    np.testing.assert_array_equal(out, got)
    tout = vkcore.Tensor.empty(got.shape, np.float32, device)
    assert vkcore.attention(tq, tk, tv, causal=True, out=tout) is tout
    np.testing.assert_array_equal(tout.numpy(), got)
    # The default scale is 1/sqrt(D), PyTorch's is_causal would align top left instead.
    np.testing.assert_array_equal(
        vkcore.attention(q, k, v, scale=1 / np.sqrt(8), device=device),
        vkcore.attention(q, k, v, device=device),
    )


def test_empty_inputs(device, rng):
    q = rand(rng, 1, 2, 3, 4)
    zero_keys = np.zeros((1, 1, 0, 4), np.float32)
    got = vkcore.attention(q, zero_keys, np.zeros((1, 1, 0, 6), np.float32), device=device)
    assert got.shape == (1, 2, 3, 6) and np.all(got == 0)
    none = vkcore.attention(
        q[:, :, :0], rand(rng, 1, 1, 5, 4), rand(rng, 1, 1, 5, 6), device=device
    )
    assert none.shape == (1, 2, 0, 6)
    np.testing.assert_array_equal(
        none, reference.attention(q[:, :, :0], rand(rng, 1, 1, 5, 4), rand(rng, 1, 1, 5, 6))
    )


def test_errors_name_the_argument(device, rng):
    q, k, v = rand(rng, 1, 4, 3, 8), rand(rng, 1, 2, 5, 8), rand(rng, 1, 2, 5, 6)
    cases = [
        ((rand(rng, 3, 8), k, v), {}, ValueError, "q must have shape"),
        ((q, rand(rng, 1, 2, 5, 7), v), {}, ValueError, "k's last axis"),
        ((q, k, rand(rng, 1, 2, 4, 6)), {}, ValueError, "v must have k's heads"),
        ((q, rand(rng, 1, 3, 5, 8), rand(rng, 1, 3, 5, 6)), {}, ValueError, "multiple"),
        ((q, rand(rng, 2, 2, 5, 8), v), {}, ValueError, "leading axes"),
        ((q, k), {}, TypeError, "v is required"),
        ((q, k, "v"), {}, TypeError, "v must"),
        ((q.astype(np.int32), k, v), {}, TypeError, "q must"),
        ((q, k, v), {"scale": "1"}, TypeError, "scale"),
        ((q, k, v), {"scale": np.inf}, ValueError, "scale"),
        ((q, k, v), {"causal": 1}, TypeError, "causal"),
        ((q, k, v), {"mask": np.ones((2, 5), bool)}, ValueError, "mask"),
        ((q, k, v), {"mask": np.ones((3, 5), np.int8)}, TypeError, "mask"),
        ((q, k, v), {"out": np.empty((1, 4, 3, 5), np.float32)}, ValueError, "out"),
        ((q, k, v), {"out": np.empty((1, 4, 3, 6), np.float64)}, ValueError, "out"),
        ((q, vkcore.asarray(k, device=device), v), {}, TypeError, "all numpy"),
        ((rand(rng, 1, 4, 3, 0), rand(rng, 1, 2, 5, 0), v), {}, ValueError, "D"),
    ]
    for args, kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            vkcore.attention(*args, device=device, **kwargs)


@pytest.mark.parametrize("causal", [False, True])
def test_numpy_beyond_one_binding_in_pieces(device, rng, small_binding, causal):
    """numpy inputs larger than one binding (1 KiB here): rows and keys in pieces that
    fit, merged in key order; every storage binding of every dispatch within the limit.
    Tensors that large are refused, naming the argument."""
    lq = 33 if causal else 37  # another shape: no recording kept from the other case
    q, k, v = rand(rng, 2, 4, lq, 8), rand(rng, 2, 2, 101, 8), rand(rng, 2, 2, 101, 6)
    mask = rng.random((4, lq, 101)) > 0.3
    mask[1, 5] = False  # a query with no key at all
    k[0, 0, 7] = np.nan  # behind the mask of query 3 of head 0 only
    mask[0, 3, 7] = False
    mask[[1, 2, 3], :, 7] = False
    got = vkcore.attention(q, k, v, causal=causal, mask=mask, device=device)
    ref = reference.attention(q, k, v, causal=causal, mask=mask)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    live = ~np.isnan(ref)
    assert np.abs(got[live] - ref[live]).max() <= 1e-5 * np.abs(v).max()
    assert np.all(got[:, 1, 5] == 0)
    assert_within(small_binding)
    tq, tk, tv = (vkcore.asarray(x, device=device) for x in (q, k, v))
    with pytest.raises(ValueError, match="k needs"):
        vkcore.attention(tq, tk, tv)


@pytest.mark.parametrize(
    "scale",
    [1e39, -1e39, np.float64(3.5e38), 10**400, -(10**400)],
    ids=["1e39", "-1e39", "3.5e38", "10**400", "-10**400"],
)
def test_scale_finite_in_float32(device, rng, scale):
    """The kernel holds the scale as float32: a float64 or int beyond float32's range
    would be an infinite scale (every output NaN), so it is refused like inf."""
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 1, 5, 4), rand(rng, 1, 1, 5, 4)
    with pytest.raises(ValueError, match="scale must be finite in float32"):
        vkcore.attention(q, k, v, scale=scale, device=device)
    cache = vkcore.KVCache(1, 4, capacity=5, dtype="float32", device=device)
    cache.append(k[0], v[0])
    with pytest.raises(ValueError, match="scale must be finite in float32"):
        vkcore.attention(q[0], cache, scale=scale)
    # The largest float32 still works, and equals the reference.
    big = float(np.finfo(np.float32).max) / 1e30
    got = vkcore.attention(q, k, v, scale=big, device=device)
    ref = reference.attention(q, k, v, scale=big)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


@pytest.mark.parametrize("which", ["q", "k", "v", "k reshaped"])
def test_tensor_out_aliasing_an_input_refused(device, rng, which):
    """A Tensor out that is q, k or v (or a reshape of one) would be written by some
    workgroups while others still read it: refused, and nothing is written."""
    q, k, v = rand(rng, 1, 1, 64, 8), rand(rng, 1, 1, 64, 8), rand(rng, 1, 1, 64, 8)
    tq, tk, tv = (vkcore.asarray(x, device=device) for x in (q, k, v))
    out = {"q": tq, "k": tk, "v": tv, "k reshaped": tk.reshape((1, 1, 64, 8))}[which]
    with pytest.raises(ValueError, match="out must not be q, k or v"):
        vkcore.attention(tq, tk, tv, out=out)
    for t, x in ((tq, q), (tk, k), (tv, v)):
        np.testing.assert_array_equal(t.numpy(), x)
    cache = vkcore.KVCache(1, 8, capacity=64, dtype="float32", device=device)
    cache.append(k[0], v[0])
    with pytest.raises(ValueError, match="out must not be q, k or v"):
        vkcore.attention(tq, cache, out=tq)
    # Empty Tensors hold no buffer: an empty out is no input's.
    empty = vkcore.asarray(np.zeros((1, 1, 0, 8), np.float32), device=device)
    none = vkcore.Tensor.empty((1, 1, 0, 8), np.float32, device)
    assert vkcore.attention(empty, tk, tv, out=none) is none


@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_numpy_out_aliasing_an_input_in_pieces(device, rng, small_binding, which):
    """numpy inputs beyond one binding go in pieces, each written to out while later
    pieces still read the inputs: an out that is one of them still gets the reference."""
    q, k, v = rand(rng, 1, 4, 40, 8), rand(rng, 1, 4, 40, 8), rand(rng, 1, 4, 40, 8)
    ref = reference.attention(q, k, v, causal=True)
    vmax = np.abs(v).max()
    out = {"q": q, "k": k, "v": v}[which]
    got = vkcore.attention(q, k, v, causal=True, out=out, device=device)
    assert got is out
    assert np.abs(got - ref).max() <= 1e-5 * vmax


def test_cache_refuses_another_device(device, rng):
    """device= must be the cache's own device, as it must be a Tensor's."""
    other = vkcore.Device()
    try:
        cache = vkcore.KVCache(1, 4, capacity=2, dtype="float32", device=device)
        cache.append(rand(rng, 1, 2, 4), rand(rng, 1, 2, 4))
        with pytest.raises(ValueError, match="device must be the cache's own device"):
            vkcore.attention(rand(rng, 1, 1, 4), cache, device=other)
    finally:
        other.close()


def test_scale_takes_every_real_number(device, rng):
    """Any real number (a Fraction, numpy scalars of every width) is a scale, rounded to
    float32 as the reference rounds it; a Decimal or a bool is not a real number here."""
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 1, 5, 4), rand(rng, 1, 1, 5, 4)
    for scale in (fractions.Fraction(1, 3), np.float16(0.5), np.int8(-2), np.float32(0.25)):
        got = vkcore.attention(q, k, v, scale=scale, device=device)
        ref = reference.attention(q, k, v, scale=float(scale))
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(v).max(), scale
    for scale in (decimal.Decimal("0.5"), True, np.True_):
        with pytest.raises(TypeError, match="scale must be a real number"):
            vkcore.attention(q, k, v, scale=scale, device=device)
