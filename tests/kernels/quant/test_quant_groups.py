"""Group-wise and packed quantize/dequantize against the numpy reference: integers, the
stored bytes (nibbles, padding) and scales bit for bit on every layout, the edge cases
groups bring (a short last group, all-zero groups, one loud group, group size 1 or beyond
n) and the argument errors."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkcore
from vkcore import reference

# (per_channel, group_size): per tensor, per channel, groups of 1, 32, 128, one that does
# not divide the row lengths below, and one longer than every row.
LAYOUTS = [(False, None), (True, None), (True, 1), (True, 32), (True, 128), (True, 7), (True, 4096)]
SHAPES = [(5, 100), (3, 257)]  # n % 4 == 0 (vec4 loads) and odd n (a padding nibble)


def check(qt, w, bits, symmetric, per_channel, group_size):
    """qt against the reference: codes, stored bytes, parameters and dequantize, bit for bit."""
    q, s, z = reference.quantize(w, bits, symmetric, per_channel, group_size)
    got = qt.q
    assert got.dtype == q.dtype and got.shape == q.shape
    bad = np.argwhere(got != q)
    assert bad.size == 0, f"{len(bad)} codes differ, first at {bad[0]}"
    assert qt.scale.dtype == np.float32 and qt.scale.shape == s.shape
    assert np.array_equal(qt.scale.view(np.uint32), s.view(np.uint32))
    assert qt.zero_point.dtype == np.int32 and np.array_equal(qt.zero_point, z)
    assert np.array_equal(qt.stored_rows(), reference.stored_rows(q, z, bits, group_size))
    w_hat = vkcore.dequantize(qt)
    expect = reference.dequantize(q, s, z, group_size)
    assert np.array_equal(w_hat.view(np.uint32), expect.view(np.uint32))
    return q, s, z


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("per_channel", "group_size"), LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_layout_matches_the_reference(
    device, rng, bits, symmetric, per_channel, group_size, shape
):
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 10)).astype(np.float32)
    qt = vkcore.quantize(
        w, bits=bits, symmetric=symmetric, per_channel=per_channel, group_size=group_size,
        device=device,
    )  # fmt: skip
    m, n = shape
    groups = -(-n // group_size) if group_size else 1
    assert (qt.group_size, qt.groups, qt.packed) == (group_size, groups, bits <= 4)
    assert qt.group_cols == min(group_size or n, n)  # a group beyond the row: one group
    assert qt.row_bytes == -(-(n if bits > 4 else -(-n // 2)) // 16) * 16
    params = m * groups if group_size else (m if per_channel else 1)
    assert qt.nbytes == m * qt.row_bytes + 8 * params
    q, _, _ = check(qt, w, bits, symmetric, per_channel, group_size)
    qmin, qmax = reference.integer_range(bits, symmetric)
    assert q.min() >= qmin and q.max() <= qmax


def test_groups_have_their_own_parameters(device):
    """By hand: each group's own max decides its scale; the short last group included."""
    w = np.array([[1.0, -2.0, 0.5, 4.0, -8.0]], np.float32)
    qt = vkcore.quantize(w, bits=4, group_size=2, device=device)
    assert qt.scale.tolist() == [[np.float32(2 / 7), np.float32(4 / 7), np.float32(8 / 7)]]
    # float32(2/7) lies above 2/7, so 1.0 / s is just below the tie 3.5: it rounds to 3
    assert np.float64(1.0) / np.float64(qt.scale[0, 0]) < 3.5
    assert qt.q.tolist() == [[3, -7, 1, 7, -7]]
    qa = vkcore.quantize(w, bits=4, symmetric=False, group_size=2, device=device)
    # [1, -2]: s = 3/15, z = 10; [0.5, 4]: lo = 0, z = 0; [-8] widens to [-8, 0]: z = 15
    assert qa.zero_point.tolist() == [[10, 0, 15]]
    assert qa.q[0, 4] == 0
    assert qa.stored_rows()[0, 2] == 0xF0  # column 4's code 0, then the padding: z = 15


def test_all_zero_groups_and_one_loud_group(device, rng):
    w = rng.standard_normal((4, 96)).astype(np.float32)
    w[1, 32:64] = 0  # an all-zero group: s = 1, z = 0, dequantizes to exactly 0
    w[2, 64:] = 0
    w[3, 40] = 1e4  # one loud weight: only its group's scale grows
    for bits, symmetric in ((4, True), (4, False), (8, True), (3, False)):
        qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=32, device=device)
        check(qt, w, bits, symmetric, True, 32)
        s, z = qt.scale, qt.zero_point
        assert s[1, 1] == 1 and z[1, 1] == 0 and s[2, 2] == 1 and z[2, 2] == 0
        assert not vkcore.dequantize(qt)[1, 32:64].any()
        assert s[3, 1] > 100 * max(s[3, 0], s[3, 2])
        # groups 0 and 2 of row 3 keep their resolution: within their own s / 2 ...
        err_g = np.abs(vkcore.dequantize(qt)[3].astype(np.float64) - w[3])
        assert err_g[:32].max() <= s[3, 0] / 2 * (1 + 2**-15)
        assert err_g[64:].max() <= s[3, 2] / 2 * (1 + 2**-15)
        # ... where one scale per row rounds every ordinary weight of that row to 0
        pc = vkcore.quantize(w, bits=bits, symmetric=symmetric, device=device)
        assert not vkcore.dequantize(pc)[3, :32].any()


def test_subnormals_count_as_zero_and_tiny_groups(device):
    tiny = np.float32(2.0**-130)  # subnormal
    w = np.zeros((2, 40), np.float32)
    w[0, :16] = tiny
    w[1, 20:] = np.float32(2.0**-120)  # tiny normal values: a tiny, normal scale
    for symmetric in (True, False):
        qt = vkcore.quantize(w, bits=4, symmetric=symmetric, group_size=16, device=device)
        check(qt, w, 4, symmetric, True, 16)
        assert qt.scale[0, 0] == 1


def test_tensor_input_and_odd_rows(device, rng):
    w = rng.standard_normal((7, 33)).astype(np.float32)
    t = vkcore.asarray(w, device=device)
    qt = vkcore.quantize(t, bits=4, symmetric=False, group_size=8)
    check(qt, w, 4, False, True, 8)
    odd = np.asfortranarray(w[:, 1:])  # a non-contiguous view: copied first
    qt = vkcore.quantize(odd, bits=2, group_size=5, device=device)
    check(qt, odd, 2, True, True, 5)


def test_group_size_none_is_unchanged(device, rng):
    """Without group_size, the parameters have today's shapes and the 8-bit layout is
    today's: one byte per code, rows padded with the zero point."""
    w = rng.standard_normal((6, 40)).astype(np.float32)
    for symmetric, per_channel in ((True, True), (False, True), (True, False), (False, False)):
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        assert qt.scale.shape == ((6,) if per_channel else ())
        assert qt.group_size is None and qt.groups == 1 and not qt.packed
        assert qt.row_bytes == 48
        q, s, z = check(qt, w, 8, symmetric, per_channel, None)
        raw = qt.stored_rows()
        assert np.array_equal(raw[:, :40].view(q.dtype), q)
        assert np.all(raw[:, 40:] == np.broadcast_to(z, (6,))[:, None].astype(np.uint8))


def test_from_arrays_then_dequantize(device, rng):
    """A tensor built from arrays dequantizes like the reference (both directions exact)."""
    q = rng.integers(0, 16, (3, 70)).astype(np.uint8)
    s = (rng.random((3, 3)) + 0.5).astype(np.float32)
    z = rng.integers(0, 16, (3, 3)).astype(np.int32)
    qt = vkcore.QuantizedTensor.from_arrays(q, s, z, bits=4, group_size=32, device=device)
    assert np.array_equal(vkcore.dequantize(qt), reference.dequantize(q, s, z, 32))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"group_size": 0}, ValueError, "group_size must be a positive int or None, got 0"),
        ({"group_size": -32}, ValueError, "group_size must be a positive int"),
        ({"group_size": True}, TypeError, "group_size must be a positive int or None, got bool"),
        ({"group_size": 32.0}, TypeError, "got float"),
        ({"group_size": "32"}, TypeError, "got str"),
        ({"group_size": 32, "per_channel": False}, ValueError, "needs per_channel=True"),
        ({"bits": 1}, ValueError, "bits must be from 2 to 8, got 1"),
        ({"bits": 9, "group_size": 32}, ValueError, "bits must be from 2 to 8, got 9"),
        ({"bits": 4.0}, TypeError, "bits must be an int"),
    ],
)
def test_argument_errors(device, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        vkcore.quantize(np.ones((2, 8), np.float32), device=device, **kwargs)


def test_nan_in_a_group_is_named(device):
    w = np.ones((3, 50), np.float32)
    w[2, 41] = np.nan
    with pytest.raises(ValueError, match=r"w must be finite: w\[2, 41\] is nan"):
        vkcore.quantize(w, group_size=16, device=device)
    w[2, 41] = np.inf
    with pytest.raises(ValueError, match=r"w\[2, 41\] is inf"):
        vkcore.quantize(w, bits=4, symmetric=False, group_size=16, device=device)


def test_np_integer_group_size_and_numpy_reference_errors():
    w = np.ones((2, 8), np.float32)
    with pytest.raises(ValueError, match="group_size needs per_channel=True"):
        reference.quant_params(w, per_channel=False, group_size=4)
    with pytest.raises(ValueError, match="2-D parameters need group_size"):
        reference.dequantize(np.zeros((2, 8), np.int8), np.ones((2, 2)), np.zeros((2, 2)))
    qt = vkcore.quantize(w, group_size=np.int64(4))
    assert qt.group_size == 4 and type(qt.group_size) is int


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    m=st.integers(1, 5),
    n=st.integers(1, 90),
    bits=st.integers(2, 8),
    symmetric=st.booleans(),
    group_size=st.integers(1, 100),
    scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e20]),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_layouts_match_the_reference(device, m, n, bits, symmetric, group_size, scale, seed):
    """Any shape, group size (dividing n or not, beyond n), bits and magnitude; some exact
    zeros and ties (multiples of a power of two) mixed in."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((m, n)) * scale).astype(np.float32)
    w[rng.random((m, n)) < 0.2] = 0
    ties = rng.random((m, n)) < 0.2
    w[ties] = (np.round(w[ties] / np.float32(scale)) * np.float32(scale) / 4).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=group_size, device=device)
    check(qt, w, bits, symmetric, True, group_size)
    qt.release()


@pytest.mark.parametrize("bits", [4, 8])
def test_group_size_up_to_2_31_minus_1_is_one_group(device, rng, bits):
    """The largest group_size taken (2^31 - 1) is one group per row, like group_size=n,
    in quantize, from_arrays, dequantize, every matvec mode (vector and batch), save/load;
    2^31 and beyond are a ValueError naming group_size in quantize, from_arrays and load."""
    w = rng.standard_normal((3, 10)).astype(np.float32)
    big = 2**31 - 1
    qt = vkcore.quantize(w, bits=bits, symmetric=False, group_size=big, device=device)
    one = vkcore.quantize(w, bits=bits, symmetric=False, group_size=10, device=device)
    assert (qt.group_size, qt.group_cols, qt.groups, qt.scale.shape) == (big, 10, 1, (3, 1))
    assert np.array_equal(qt.stored_rows(), one.stored_rows())
    assert np.array_equal(qt.scale, one.scale) and np.array_equal(qt.zero_point, one.zero_point)
    built = vkcore.QuantizedTensor.from_arrays(
        **{**one.to_arrays(), "group_size": big}, device=device
    )
    for t in (qt, built):
        assert np.array_equal(vkcore.dequantize(t), vkcore.dequantize(one))
        x = rng.standard_normal((10, 2)).astype(np.float32)
        for mode in ("float", "int8", "uint8"):
            assert np.array_equal(
                vkcore.matvec(t, x, activations=mode), vkcore.matvec(one, x, activations=mode)
            )
            x0 = np.ascontiguousarray(x[:, 0])
            assert np.array_equal(
                vkcore.matvec(t, x0, activations=mode), vkcore.matvec(one, x0, activations=mode)
            )
    for size in (2**31, 2**32, np.int64(2**40)):
        with pytest.raises(ValueError, match="group_size must be at most 2\\^31 - 1"):
            vkcore.quantize(w, group_size=size, device=device)
        with pytest.raises(ValueError, match="group_size must be at most"):
            vkcore.QuantizedTensor.from_arrays(one.q, one.scale, one.zero_point, group_size=size)


def test_load_refuses_a_group_size_beyond_2_31_minus_1(device, rng, tmp_path):
    from vkcore.kernels.quant import qarrays

    qt = vkcore.quantize(rng.standard_normal((2, 8)).astype(np.float32), group_size=2**31 - 1)
    qt.save(tmp_path / "big.npz")
    assert vkcore.QuantizedTensor.load(tmp_path / "big.npz").group_size == 2**31 - 1
    with np.load(tmp_path / "big.npz") as f:
        fields = {k: f[k] for k in f.files}
    fields["group_size"] = np.array(2**31, np.int64)
    fields["digest"] = np.array(qarrays.digest(fields))
    np.savez(tmp_path / "bad.npz", **fields)
    with pytest.raises(ValueError, match="bad.npz.*group_size must be at most"):
        vkcore.QuantizedTensor.load(tmp_path / "bad.npz", device=device)
