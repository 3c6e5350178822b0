"""matvec on every weight layout (bits 2-8, symmetric or not, per tensor / channel / group,
packed or not) against vkcore.reference.matvec: the integer modes bit for bit (y and the
int32 accumulators of every group), the float mode within the stated bound

    |y_i - ref_i| <= (n + G + 2) * 2^-23 * (sum_j |s_ig v_ij x_j| + |b_i|),

the per-group overflow bound on both sides, and the row-chunked path with groups."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from binding_limits import LIMIT, assert_within

import vkcore
from vkcore import reference
from vkcore.kernels.matvec import args
from vkcore.kernels.matvec import matvec as mv
from vkcore.reference.matvec import group_cols, group_params, weights_minus_zero

LAYOUTS = [  # (per_channel, group_size)
    (False, None),
    (True, None),
    (True, 1),
    (True, 7),
    (True, 32),
    (True, 128),  # does not divide n = 300
    (True, 1000),  # beyond n: one group
]


def float_bound(q, s, z, x, bias, group_size) -> np.ndarray:
    m, n = q.shape
    g = group_cols(n, s, group_size)
    v = weights_minus_zero(q, z, g).astype(np.float64)
    sg = np.repeat(group_params(s, m, n, g, np.float64), g, 1)
    size = np.abs(sg[:, :n] * v) @ np.abs(x.astype(np.float64))
    if bias is not None:
        size = size + np.abs(bias)
    groups = 1 if group_size is None else -(-n // group_size)
    return (n + groups + 2) * 2.0**-23 * size


def check_all_modes(qt, x, bias, group_size, label=""):
    q, s, z = qt.q, qt.scale, qt.zero_point
    for activations in ("float", "int8", "uint8"):
        y = vkcore.matvec(qt, x, bias=bias, activations=activations)
        y = y if isinstance(y, np.ndarray) else y.numpy()
        xn = x if isinstance(x, np.ndarray) else x.numpy()
        want = reference.matvec(q, s, z, xn, bias, activations, group_size)
        if activations == "float":
            err = np.abs(y.astype(np.float64) - want)
            bound = float_bound(q, s, z, xn, bias, group_size)
            assert np.all(err <= bound + 1e-30), (label, activations, float(err.max()))
            continue
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), (label, activations)
        acc = mv.integer_accumulators(qt, xn, activations)
        qx, _, zx = reference.quantize_activations(xn, activations)
        ref_acc = reference.matvec_accumulators(q, z, qx, zx, group_size)
        assert np.array_equal(acc.astype(np.int64), ref_acc.reshape(acc.shape)), label


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("per_channel", "group_size"), LAYOUTS)
def test_every_layout_every_mode(device, rng, bits, symmetric, per_channel, group_size):
    m, n = 19, 300
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    w[:, 130:140] *= 40  # a loud stretch inside one group
    x = rng.standard_normal(n).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    qt = vkcore.quantize(
        w,
        bits=bits,
        symmetric=symmetric,
        per_channel=per_channel,
        group_size=group_size,
        device=device,
    )
    check_all_modes(qt, x, bias, group_size, (bits, symmetric, per_channel, group_size))
    check_all_modes(qt, x, None, group_size)
    qt.release()


@pytest.mark.parametrize("n", [31, 32, 33, 64, 95])  # odd n: a packed row ends mid-byte
@pytest.mark.parametrize("bits", [4, 8])
def test_short_rows_and_partial_blocks(device, rng, n, bits):
    w = rng.standard_normal((40, n)).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    for symmetric in (True, False):
        for group_size in (None, 16, 5):
            qt = vkcore.quantize(
                w, bits=bits, symmetric=symmetric, group_size=group_size, device=device
            )
            check_all_modes(qt, x, None, group_size, (n, bits, symmetric, group_size))
            qt.release()


def test_one_loud_group_and_an_all_zero_group(device, rng):
    m, n, g = 33, 256, 32
    w = (rng.standard_normal((m, n)) * 0.01).astype(np.float32)
    w[:, 64:96] *= 1000  # group 2 is loud
    w[:, 128:160] = 0  # group 4 is all zero: s = 1, z = 0
    x = rng.standard_normal(n).astype(np.float32)
    for bits, symmetric in ((4, True), (4, False), (8, True), (8, False)):
        qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=g, device=device)
        assert np.all(qt.scale[:, 4] == 1) and np.all(qt.zero_point[:, 4] == 0)
        check_all_modes(qt, x, None, g, (bits, symmetric))
        # The loud group's scale does not spread: with x zero outside group 0, the
        # integer-mode result is group 0's term alone.
        x0 = np.zeros(n, np.float32)
        x0[:g] = x[:g]
        y = vkcore.matvec(qt, x0, activations="int8")
        assert np.array_equal(
            y, reference.matvec(qt.q, qt.scale, qt.zero_point, x0, None, "int8", g)
        )
        qt.release()


def test_from_arrays_codes_by_hand(device, rng):
    """Codes and parameters written by hand (ggml Q4_0 style: codes 0..15, z = 8)."""
    m, n, g = 16, 96, 32
    q = rng.integers(0, 16, (m, n)).astype(np.uint8)
    s = (rng.random((m, n // g)) + 0.5).astype(np.float32)
    z = np.full((m, n // g), 8, np.int32)
    qt = vkcore.QuantizedTensor.from_arrays(q, s, z, bits=4, group_size=g, device=device)
    x = rng.standard_normal(n).astype(np.float32)
    check_all_modes(qt, x, None, g)
    want = (s.repeat(g, 1) * (q.astype(np.float64) - 8)) @ x
    assert np.allclose(vkcore.matvec(qt, x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_overflow_bound_per_group_both_sides(device, activations):
    """The largest exact group passes with the true extremes; one column more raises."""
    limit = args.max_exact_n(8, True, activations)
    n = limit + 1  # the second group holds one column
    w = np.ones((1, n), np.float32)
    x = np.ones(n, np.float32)
    qt = vkcore.quantize(w, group_size=limit, device=device)
    acc = mv.integer_accumulators(qt, x, activations)
    amax = 127 if activations == "int8" else 255
    assert acc.tolist() == [[127 * amax * limit, 127 * amax]]
    assert 127 * amax * limit <= 2**31 - 1
    y = vkcore.matvec(qt, x, activations=activations)
    assert np.array_equal(
        y, reference.matvec(qt.q, qt.scale, qt.zero_point, x, None, activations, limit)
    )
    big = vkcore.quantize(w, group_size=limit + 1, device=device)
    with pytest.raises(ValueError, match=r"overflow the int32 accumulator.*exact up to n ="):
        vkcore.matvec(big, x, activations=activations)
    assert vkcore.matvec(big, x).shape == (1,)  # the float mode has no bound


def test_overflow_bound_counts_group_columns(device, rng, monkeypatch):
    monkeypatch.setattr(args, "ACC_LIMIT", 127 * 127 * 10)
    w = rng.standard_normal((3, 35)).astype(np.float32)
    x = rng.standard_normal(35).astype(np.float32)
    ok = vkcore.quantize(w, group_size=10, device=device)  # 35 columns, groups of 10
    check_all_modes_int(ok, x, 10)
    wide = vkcore.quantize(w, group_size=11, device=device)
    with pytest.raises(ValueError, match="groups of 11 columns.*exact up to 10 columns per group"):
        vkcore.matvec(wide, x, activations="int8")
    with pytest.raises(ValueError, match="exact up to 4 columns per group"):
        vkcore.matvec(ok, x, activations="uint8")


def check_all_modes_int(qt, x, group_size):
    y = vkcore.matvec(qt, x, activations="int8")
    want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, None, "int8", group_size)
    assert np.array_equal(y, want)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [16, 1])
def test_groups_on_the_row_chunked_path(device, rng, small_binding, bits, group_size):  # noqa: F811
    """y, bias, scales, zero points and row sums of 300 rows (x G with groups) exceed one
    binding of LIMIT bytes: pieces of rows bind their own slices."""
    m, n = 300, 60
    w = rng.standard_normal((m, n)).astype(np.float32)
    w[::7] += 2
    x = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    for symmetric in (True, False):
        qt = vkcore.quantize(
            w, bits=bits, symmetric=symmetric, group_size=group_size, device=device
        )
        assert len(qt.chunks) > 1 or 4 * m * qt.groups > LIMIT
        check_all_modes(qt, x, b, group_size, (bits, symmetric, group_size))
        xt, bt = vkcore.asarray(x, device=device), vkcore.asarray(b, device=device)
        for activations in ("int8", "uint8"):
            y = vkcore.matvec(qt, xt, bias=bt, activations=activations).numpy()
            want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, b, activations, group_size)
            assert np.array_equal(y, want)
        qt.release()
    # every dispatch: matvec's, and quantize's (its parameters bound per slice of rows)
    assert_within(small_binding)


def test_group_terms_are_added_in_increasing_group_order(device):
    """Terms chosen so that another order rounds differently: 2^24, 1, -2^24 ... ."""
    g, n = 16, 64
    q = np.zeros((1, n), np.int8)
    q[0, ::g] = [1, 1, -1, 1]  # one code per group: acc_g = +-qx of its first column
    scale = np.array([[2.0**24, 1.0, 2.0**24, 1.0]], np.float32)
    qt = vkcore.QuantizedTensor.from_arrays(q, scale, bits=8, group_size=g, device=device)
    x = np.zeros(n, np.float32)
    x[::g] = 1.0  # qx = 127 at each group start, s_x = 1/127
    y = vkcore.matvec(qt, x, activations="int8")
    want = reference.matvec(q, scale, np.zeros((1, 4), np.int32), x, None, "int8", g)
    assert np.array_equal(y, want)
    sx = np.float32(np.float32(1.0) * np.float32(1 / 127))
    t = (scale[0] * sx).astype(np.float32) * np.float32([127, 127, -127, 127])
    sequential = np.float32(np.float32(np.float32(t[0] + t[1]) + t[2]) + t[3])
    pairwise = np.float32(np.float32(t[0] + t[2]) + np.float32(t[1] + t[3]))
    assert sequential != pairwise  # the order is visible in these terms
    assert y[0] == sequential


def test_dot_choice_is_a_function_of_the_device_info(device):
    from vkcore.kernels.matvec import groups as mg

    info = device.info
    on = dataclasses.replace(
        info, integer_dot_product=True, integer_dot_product_8bit_accelerated=True
    )
    assert mg.dot_default(on)
    assert not mg.dot_default(dataclasses.replace(on, integer_dot_product=False))
    assert not mg.dot_default(dataclasses.replace(on, integer_dot_product_8bit_accelerated=False))
