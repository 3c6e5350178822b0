"""Adversarial checks of issue 14 (group-wise / packed quantization, grouped and batched
matvec, weights from elsewhere, .npz files) through the public API only, against numpy
transcriptions of the issue's formulas written here (not vkcore.reference).

Each test states the behaviour the issue text (or the README it points to) promises.
"""

from __future__ import annotations

import os
import struct
from fractions import Fraction

import numpy as np
import pytest

import vkcore

QT = vkcore.QuantizedTensor
TINY = np.finfo(np.float32).tiny


# --------------------------------------------------------------------------- own formulas
def _rne(fr: Fraction) -> int:
    """roundEven of an exact rational."""
    lo = fr.numerator // fr.denominator
    d = fr - lo
    if d > Fraction(1, 2) or (d == Fraction(1, 2) and lo % 2):
        return lo + 1
    return lo


def own_quantize(w, bits, symmetric, group_size):
    """RTN per row group (group_size None: the whole row), exact rationals, the issue's rules:
    symmetric s = max|W| / (2^(b-1)-1); asymmetric lo = min(W,0), hi = max(W,0),
    s = (hi-lo)/(2^b-1), z = roundEven(-lo/s); q = clamp(roundEven(W/s)+z); all-zero: s=1, z=0."""
    w = np.where(np.abs(w) < TINY, np.float32(0), w).astype(np.float32)
    m, n = w.shape
    g = group_size or n
    G = -(-n // g)
    qmin, qmax = (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2**bits - 1)
    q = np.zeros((m, n), np.int64)
    s = np.zeros((m, G), np.float32)
    z = np.zeros((m, G), np.int32)
    for i in range(m):
        for k in range(G):
            cols = range(k * g, min(n, (k + 1) * g))
            vals = [Fraction(float(w[i, j])) for j in cols]
            lo, hi = min(min(vals), 0), max(max(vals), 0)
            if symmetric:
                span, steps = max(-lo, hi), qmax
            else:
                span, steps = hi - lo, qmax - qmin
            sk = np.float32(1) if span == 0 else np.float32(float(span / steps))
            zk = 0 if symmetric or span == 0 else min(max(_rne(-lo / Fraction(float(sk))), 0), qmax)
            s[i, k], z[i, k] = sk, zk
            for j, v in zip(cols, vals, strict=True):
                q[i, j] = min(max(_rne(v / Fraction(float(sk))) + zk, qmin), qmax)
    return q, s, z


def own_act(x, mode):
    """The README's activation quantization of one vector (s_x, z_x, codes)."""
    x = np.where(np.abs(x) < TINY, np.float32(0), x).astype(np.float32)
    if mode == "int8":
        amax = np.float32(np.abs(x).max())
        if amax < 2.0**-96:
            return np.zeros(x.shape, np.int64), np.float32(1), 0
        s = np.float32(amax * np.float32(1 / 127))
        return (
            np.clip(np.rint(x.astype(np.float64) / np.float64(s)), -127, 127).astype(np.int64),
            s,
            0,
        )
    lo, hi = np.float32(min(x.min(), 0)), np.float32(max(x.max(), 0))
    if max(hi, -lo) < 2.0**-96:
        return np.zeros(x.shape, np.int64), np.float32(1), 0
    c = np.float32(1 / 255)
    s = np.float32(np.float32(hi * c) - np.float32(lo * c))
    zx = int(np.clip(np.rint(-np.float64(lo) / np.float64(s)), 0, 255))
    q = np.clip(np.rint(x.astype(np.float64) / np.float64(s)) + zx, 0, 255).astype(np.int64)
    return q, s, zx


def own_int_matvec(q, s, z, g, x, mode, bias):
    """acc_ig exact; t_ig = fl(fl(s_ig s_x) fl(acc_ig)); y_i = (...(t_i0 + t_i1)...) + b_i."""
    m, n = q.shape
    qx, sx, zx = own_act(x, mode)
    y = None
    for k in range(-(-n // g)):
        cols = slice(k * g, min(n, (k + 1) * g))
        acc = ((q[:, cols].astype(np.int64) - z[:, k : k + 1]) * (qx[cols] - zx)).sum(axis=1)
        assert np.abs(acc).max() < 2**31
        t = (s[:, k] * sx).astype(np.float32) * acc.astype(np.float32)
        y = t.astype(np.float32) if y is None else (y + t).astype(np.float32)
    return (y + (np.zeros(m, np.float32) if bias is None else bias)).astype(np.float32)


def bits_of(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


# --------------------------------------------------------------------------- what holds
LAYOUTS = [
    (2, True, 3),
    (3, False, 31),
    (4, True, None),
    (4, False, 33),
    (5, True, 1),
    (8, False, 2),
]


@pytest.mark.parametrize(("bits", "symmetric", "group_size"), LAYOUTS)
def test_codes_and_dequantize_against_own_rationals(device, bits, symmetric, group_size):
    """Codes, scales, zero points bit for bit; dequantize = one float32 multiply s_g (q - z_g);
    odd n, an all-zero group, a loud value, -0.0 and subnormals included."""
    rng = np.random.default_rng(bits * 10 + int(symmetric))
    w = rng.standard_normal((3, 67)).astype(np.float32)
    w[1, :40] = 0.0
    w[2, 5] = 1e4
    w[0, :4] = [-0.0, 1e-40, -1e-45, TINY]
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=group_size, device=device)
    q, s, z = own_quantize(w, bits, symmetric, group_size)
    assert np.array_equal(qt.q.astype(np.int64), q)
    got_s = qt.scale.reshape(3, -1)
    assert np.array_equal(bits_of(got_s), bits_of(s))
    assert np.array_equal(qt.zero_point.reshape(3, -1), z)
    g = group_size or 67
    sc = np.repeat(s, g, axis=1)[:, :67]
    zc = np.repeat(z, g, axis=1)[:, :67]
    want = (sc * (q - zc).astype(np.float32)).astype(np.float32)
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(want))


@pytest.mark.parametrize(("bits", "symmetric", "group_size"), LAYOUTS[:4])
@pytest.mark.parametrize("mode", ["int8", "uint8"])
def test_integer_matvec_batched_against_own_sequential_order(
    device, bits, symmetric, group_size, mode
):
    """Each column its own s_x; bit for bit with the documented sequential group order."""
    rng = np.random.default_rng(7)
    m, n = 5, 70
    w = rng.standard_normal((m, n)).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=group_size, device=device)
    g = group_size or n
    s = qt.scale.reshape(m, -1) if qt.scale.ndim else np.full((m, 1), qt.scale)
    z = qt.zero_point.reshape(m, -1).astype(np.int64)
    bias = rng.standard_normal(m).astype(np.float32)
    for b in (1, 3, 65):
        x = (rng.standard_normal((n, b)) * rng.choice([1e-3, 1, 1e3], b)).astype(np.float32)
        x[::7, 0] = 0.0
        y = vkcore.matvec(qt, x, activations=mode, bias=bias)
        want = np.stack([own_int_matvec(qt.q, s, z, g, x[:, k], mode, bias) for k in range(b)], 1)
        assert y.shape == (m, b) and np.array_equal(bits_of(y), bits_of(want))


@pytest.mark.parametrize(("bits", "symmetric", "mode"), [(8, True, "int8"), (4, False, "uint8")])
def test_overflow_bound_per_group_both_sides(device, bits, symmetric, mode):
    """group_cols * vmax * amax <= 2^31 - 1: the largest group is exact at its worst case,
    one column more raises ValueError (and without groups the bound is n)."""
    vmax = 2 ** (bits - 1) - 1 if symmetric else 2**bits - 1
    limit = (2**31 - 1) // (vmax * (127 if mode == "int8" else 255))
    n = limit + 3
    w = np.ones((2, n), np.float32)
    w[1] = -1.0
    x = np.ones(n, np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=limit, device=device)
    y = vkcore.matvec(qt, x, activations=mode)
    s = qt.scale.astype(np.float32)
    z = qt.zero_point.astype(np.int64)
    assert np.array_equal(bits_of(y), bits_of(own_int_matvec(qt.q, s, z, limit, x, mode, None)))
    over = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=limit + 1, device=device)
    with pytest.raises(ValueError, match="overflow"):
        vkcore.matvec(over, x, activations=mode)
    whole = vkcore.quantize(w[:, :limit], bits=bits, symmetric=symmetric, device=device)
    vkcore.matvec(whole, x[:limit], activations=mode)
    whole1 = vkcore.quantize(w[:, : limit + 1], bits=bits, symmetric=symmetric, device=device)
    with pytest.raises(ValueError, match="overflow"):
        vkcore.matvec(whole1, x[: limit + 1], activations=mode)


def test_torchao_int4_group_128_and_round_trips(device, tmp_path):
    """torchao asymmetric uint4 with integer zero points: W = (q - zp) s bit for bit; the
    tensor survives to_arrays/from_arrays and save/load bit for bit."""
    rng = np.random.default_rng(3)
    m, n = 3, 300
    x = (rng.standard_normal((m, n)) * 0.1 + 0.05).astype(np.float32)
    x[1, 128:256] = 0
    G = -(-n // 128)
    sc = np.empty((m, G), np.float32)
    zp = np.empty((m, G), np.int64)
    q = np.empty((m, n), np.uint8)
    for k in range(G):
        cols = slice(128 * k, min(n, 128 * (k + 1)))
        mn = np.minimum(x[:, cols].min(1), 0)
        mx = np.maximum(x[:, cols].max(1), 0)
        s = np.maximum(((mx - mn) / np.float32(15)).astype(np.float32), np.finfo(np.float32).eps)
        zp[:, k] = np.clip(-np.rint(mn / s), 0, 15)
        sc[:, k] = s
        q[:, cols] = np.clip(np.rint(x[:, cols] / s[:, None]) + zp[:, k : k + 1], 0, 15)
    want = (q - np.repeat(zp, 128, 1)[:, :n]).astype(np.float32) * np.repeat(sc, 128, 1)[:, :n]
    qt = QT.from_arrays(q, sc, zp, bits=4, group_size=128, device=device)
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(want))
    again = QT.from_arrays(**qt.to_arrays(), device=device)
    path = tmp_path / "t.npz"
    qt.save(path)
    loaded = QT.load(path, device=device)
    for other in (again, loaded):
        assert np.array_equal(other.q, q) and np.array_equal(bits_of(other.scale), bits_of(sc))
        assert np.array_equal(other.zero_point, zp) and other.nbytes == qt.nbytes
        assert np.array_equal(bits_of(vkcore.dequantize(other)), bits_of(want))


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"group_size": 0}, ValueError, "group_size"),
        ({"group_size": -1}, ValueError, "group_size"),
        ({"group_size": 1.5}, TypeError, "group_size"),
        ({"group_size": True}, TypeError, "group_size"),
        ({"bits": 1}, ValueError, "bits"),
        ({"bits": 9}, ValueError, "bits"),
        ({"group_size": 4, "per_channel": False}, ValueError, "group_size"),
    ],
)
def test_quantize_bad_arguments_name_the_argument(device, kwargs, exc, name):
    with pytest.raises(exc, match=name):
        vkcore.quantize(np.ones((2, 8), np.float32), device=device, **kwargs)


def test_numpy_int_group_size_is_taken(device):
    qt = vkcore.quantize(np.ones((2, 9), np.float32), group_size=np.int64(4), device=device)
    assert qt.scale.shape == (2, 3) and type(qt.group_size) is int


@pytest.mark.parametrize(
    ("args", "kwargs", "name"),
    [
        ((np.zeros((2, 9), np.int8), np.ones((2, 2), np.float32)), {"group_size": 4}, "scale"),
        ((np.zeros((2, 9), np.int8), np.ones((2, 3), np.float32)), {}, "scale"),
        ((np.zeros((2, 9), np.int8), np.array([1.0, np.nan], np.float32)), {}, "scale"),
        ((np.full((2, 9), 8, np.int8), np.ones(2, np.float32)), {"bits": 4}, "q"),
        (
            (np.zeros((2, 9), np.uint8), np.ones(2, np.float32), np.zeros(3, np.int32)),
            {},
            "zero_point",
        ),
        (
            (np.zeros((2, 9), np.uint8), np.ones(2, np.float32), np.full(2, 16)),
            {"bits": 4},
            "zero_point",
        ),
    ],
)
def test_from_arrays_bad_arguments_name_the_argument(device, args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        QT.from_arrays(*args, device=device, **kwargs)


# --------------------------------------------------------------------------- defects
def test_batched_float_matvec_with_inf_in_x_propagates_as_float32_does(device):
    """README: the float mode propagates NaN/inf 'as float32 arithmetic does', and a batch
    column is the vector call on that column. With groups that do not fill a stored block
    (4-bit group 16, 8-bit group 3), an inf in x gives +-inf where v_ij != 0 in the vector
    call, but NaN in every row of the batched call (a masked 0 * inf)."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 50)).astype(np.float32)
    for bits, group_size in ((4, 16), (8, 3)):
        qt = vkcore.quantize(w, bits=bits, symmetric=False, group_size=group_size, device=device)
        v = qt.q.astype(np.int64)[:, 20] - qt.zero_point[:, 20 // group_size]
        x = rng.standard_normal((50, 2)).astype(np.float32)
        x[20, 1] = np.inf
        vec = vkcore.matvec(qt, np.ascontiguousarray(x[:, 1]))
        batched = vkcore.matvec(qt, x)[:, 1]
        # float32 arithmetic: a finite sum plus v * inf with v != 0 is +-inf, never NaN.
        assert np.array_equal(np.isnan(vec), v == 0)
        assert np.array_equal(np.isnan(batched), v == 0), (bits, group_size, batched, vec)


def _damaged(path, header_offset_and_value):
    raw = bytearray(path.read_bytes())
    signature, offset, value = header_offset_and_value
    at = 0
    while (at := raw.find(signature, at)) >= 0:
        raw[at + offset : at + offset + 2] = struct.pack("<H", value)
        at += 4
    return bytes(raw)


@pytest.mark.parametrize(
    "change",
    [
        (b"PK\x01\x02", 10, 1),  # central directory: compression method 1 (shrink)
        (b"PK\x01\x02", 8, 1),  # central directory: general-purpose flag bit 0 (encrypted)
    ],
    ids=["unsupported-compression", "encrypted-flag"],
)
def test_damaged_npz_is_a_valueerror(device, tmp_path, change):
    """README: load 'refuses a damaged, edited or foreign file with a ValueError naming the
    file'. Two flipped header fields raise NotImplementedError / RuntimeError instead."""
    qt = vkcore.quantize(np.ones((2, 8), np.float32), bits=4, group_size=4, device=device)
    good = tmp_path / "good.npz"
    qt.save(good)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(_damaged(good, change))
    with pytest.raises(ValueError, match="bad.npz"):
        QT.load(bad, device=device)


def test_group_size_beyond_32_bits_works_or_is_a_clear_error(device):
    """'group_size not a positive integer: clear errors'; a group_size beyond n is one group
    (10 * n works). 2**32 is a positive int: quantize must give the one-group tensor or a
    ValueError/TypeError naming group_size (it raises struct.error). from_arrays accepts it,
    so dequantize and batched matvec must work on the tensor (they raise struct.error)."""
    w = np.random.default_rng(0).standard_normal((3, 10)).astype(np.float32)
    one_group = vkcore.quantize(w, group_size=10, device=device)
    try:
        qt = vkcore.quantize(w, group_size=2**32, device=device)
    except (ValueError, TypeError) as exc:
        assert "group_size" in str(exc)
    else:
        assert np.array_equal(qt.q, one_group.q)
    try:
        qt = QT.from_arrays(one_group.q, one_group.scale, group_size=2**32, device=device)
    except (ValueError, TypeError) as exc:
        assert "group_size" in str(exc)
        return
    assert np.array_equal(vkcore.dequantize(qt), vkcore.dequantize(one_group))
    x = np.ones((10, 2), np.float32)
    y = vkcore.matvec(qt, x, activations="uint8")
    assert np.array_equal(y, vkcore.matvec(one_group, x, activations="uint8"))


def _ggml_q4_0(x):
    """ggml quantize_row_q4_0_reference: d = max / -8 (max: the signed value of largest
    magnitude), id = 1/d (0 when d = 0), q = min(15, (int8)(x * id + 8.5)); fp16 d."""
    m, n = x.shape
    xb = x.reshape(m, -1, 32)
    big = np.take_along_axis(xb, np.abs(xb).argmax(-1)[..., None], -1)[..., 0]
    d = (big / np.float32(-8)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    q = np.minimum(15, (xb * inv[..., None] + np.float32(8.5)).astype(np.int8))
    return q.reshape(m, n).astype(np.uint8), d.astype(np.float16)


def test_ggml_q4_0_blocks_as_ggml_stores_them(device):
    """Issue 14 s.3: Q4_0 is 'group 32, 4-bit codes 0..15 with an offset of 8, i.e. zero
    point 8' with ggml's scale d. ggml's d is negative wherever a block's largest-magnitude
    weight is positive (about half the blocks) and 0 for an all-zero block; from_arrays
    refuses both ('scale must be finite and positive'). Expected: the dequantized weights
    are ggml's own d * (q - 8), bit for bit (the README's 15 - q / scale -d rewrite gives
    +0.0 where ggml gives -0.0)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    x[1, 32:64] = 0.0
    q, d = _ggml_q4_0(x)
    assert (d < 0).any() and (d == 0).any()
    want = (np.repeat(d.astype(np.float32), 32, 1) * (q.astype(np.float32) - 8)).astype(np.float32)
    qt = QT.from_arrays(q, d, np.full(d.shape, 8), bits=4, group_size=32, device=device)
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(want))


def test_ggml_q8_0_with_an_all_zero_block(device):
    """Issue 14 s.3: Q8_0 is 'group 32, symmetric int8, scale d'; ggml writes d = 0 for an
    all-zero block (d = amax / 127). from_arrays(q, d, bits=8, group_size=32) refuses it
    ('scale must be finite and positive'); expected: W = d * q, i.e. zeros there."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    x[0, :32] = 0.0
    xb = x.reshape(2, -1, 32)
    d = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    r = xb * inv[..., None]
    q = np.trunc(r + np.copysign(np.float32(0.5), r)).astype(np.int8).reshape(2, 64)  # roundf
    d16 = d.astype(np.float16)
    want = (np.repeat(d16.astype(np.float32), 32, 1) * q.astype(np.float32)).astype(np.float32)
    qt = QT.from_arrays(q, d16, bits=8, group_size=32, device=device)
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(want))


def test_saved_file_is_exactly_the_given_name(device, tmp_path):
    qt = vkcore.quantize(np.ones((2, 3), np.float32), device=device)
    qt.save(tmp_path / "noext")
    assert os.path.exists(tmp_path / "noext")
