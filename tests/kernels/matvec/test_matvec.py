"""INT8 matvec in all three activation modes and the float32 baseline, against numpy:
integer accumulators and integer-mode outputs bit for bit, float mode within tolerance."""

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels import storage
from vkcore.kernels.matvec import args, program
from vkcore.kernels.matvec import matvec as mv

SHAPES = [(1, 1), (1, 7), (3, 5), (5, 17), (8, 16), (33, 100), (7, 1000), (130, 257)]
WEIGHTS = [(8, True, True), (8, False, True), (4, True, False), (2, False, False)]


def float_tolerance(qt, x):
    """float32 summation error bound, generous: n * eps * s_i * sum_j |v_ij x_j|."""
    v = qt.q.astype(np.float64) - np.broadcast_to(qt.zero_point, (qt.shape[0],))[:, None]
    s = np.broadcast_to(qt.scale, (qt.shape[0],)).astype(np.float64)
    return s * (np.abs(v) @ np.abs(x.astype(np.float64))) * qt.shape[1] * 2.0**-23 + 1e-30


def check(qt, x, bias, activations, device):
    y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=device)
    want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, bias, activations)
    assert y.dtype == np.float32 and y.shape == (qt.shape[0],)
    if activations == "float":
        tol = float_tolerance(qt, x)
        assert np.all(np.abs(y.astype(np.float64) - want) <= tol + 1e-6 * np.abs(want))
        return
    assert np.array_equal(y, want), np.argwhere(y != want)[:3]
    acc = mv.integer_accumulators(qt, x, activations)
    qx, _, zx = reference.quantize_activations(x, activations)
    zero = np.broadcast_to(qt.zero_point, (qt.shape[0],))
    assert np.array_equal(acc, reference.matvec_accumulators(qt.q, zero, qx, zx))


@pytest.mark.parametrize("activations", ["float", "int8", "uint8"])
@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), WEIGHTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(device, rng, shape, bits, symmetric, per_channel, activations):
    w = rng.standard_normal(shape).astype(np.float32)
    x = (rng.standard_normal(shape[1]) * 3).astype(np.float32)
    bias = rng.standard_normal(shape[0]).astype(np.float32) if shape[0] % 2 else None
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)
    check(qt, x, bias, activations, device)


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_one_sided_and_zero_activations(device, rng, activations):
    w = rng.standard_normal((9, 40)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    for x in (
        np.abs(rng.standard_normal(40)).astype(np.float32),  # after a ReLU
        -np.abs(rng.standard_normal(40)).astype(np.float32),
        np.zeros(40, np.float32),
        np.full(40, 1e-40, np.float32),  # subnormal: counts as 0
        (rng.standard_normal(40) * 1e30).astype(np.float32),
        (np.arange(40) - 20.0).astype(np.float32) * np.float32(0.5),  # ties
    ):
        check(qt, x, None, activations, device)


def test_activation_quantization_matches_reference(device, rng):
    """The seed's full-integer formula: y = s_i s_x acc_i + b_i with x quantized on device."""
    w = rng.standard_normal((4, 64)).astype(np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    qx, sx, zx = reference.quantize_activations(x, "int8")
    assert zx == 0 and qx.min() >= -127 and sx == np.float32(np.abs(x).max() * np.float32(1 / 127))
    y = vkcore.matvec(qt, x, activations="int8", device=device)
    acc = qt.q.astype(np.int64) @ qx.astype(np.int64)
    assert np.array_equal(y, (qt.scale * sx).astype(np.float32) * acc.astype(np.float32))


def test_quantized_matvec_is_close_to_float(device, rng):
    w = rng.standard_normal((64, 512)).astype(np.float32)
    x = rng.standard_normal(512).astype(np.float32)
    exact = w.astype(np.float64) @ x
    qt = vkcore.quantize(w, device=device)
    e = vkcore.quant_error(w, qt, x)
    y = vkcore.matvec(qt, x, device=device)
    assert np.all(np.abs(y - exact) <= e.bound_out + 1e-4)
    for activations in ("int8", "uint8"):
        y = vkcore.matvec(qt, x, activations=activations, device=device)
        assert np.abs(y - exact).max() < 0.05 * np.abs(exact).max()


def test_tensor_in_tensor_out(device, rng):
    w = rng.standard_normal((6, 21)).astype(np.float32)
    x = rng.standard_normal(21).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    xt = vkcore.asarray(x, device=device)
    for activations in ("float", "int8", "uint8"):
        y = vkcore.matvec(qt, xt, activations=activations)
        assert isinstance(y, vkcore.Tensor)
        assert np.array_equal(y.numpy(), vkcore.matvec(qt, x, activations=activations))


def test_row_sums_are_computed_once(device, rng):
    qt = vkcore.quantize(
        rng.standard_normal((5, 30)).astype(np.float32), symmetric=False, device=device
    )
    x = rng.standard_normal(30).astype(np.float32)
    assert qt.rowsum is None
    vkcore.matvec(qt, x, activations="uint8")
    first = qt.rowsum
    vkcore.matvec(qt, x, activations="uint8")
    assert first is not None and qt.rowsum is first
    sums = np.empty(5, np.int32)
    first.read(sums)
    assert np.array_equal(sums, (qt.q.astype(np.int64) - qt.zero_point[:, None]).sum(axis=1))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (33, 100), (130, 257)])
def test_f32_baseline(device, rng, shape):
    w = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[0]).astype(np.float32)
    want = w.astype(np.float64) @ x + b
    tol = (np.abs(w) @ np.abs(x) + np.abs(b)) * shape[1] * 2.0**-23
    mat = vkcore.F32Matrix(w, device=device)
    for y in (vkcore.matvec_f32(mat, x, bias=b), vkcore.matvec_f32(w, x, bias=b, device=device)):
        assert np.all(np.abs(y - want) <= tol)


def test_weights_split_across_buffers(device, rng, monkeypatch):
    monkeypatch.setattr(storage, "binding_limit", lambda dev: 512)
    w = rng.standard_normal((45, 70)).astype(np.float32)
    x = rng.standard_normal(70).astype(np.float32)
    b = rng.standard_normal(45).astype(np.float32)
    for bits, symmetric, per_channel in WEIGHTS:
        qt = vkcore.quantize(
            w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
        )
        assert len(qt.chunks) > 1
        for activations in ("float", "int8", "uint8"):
            check(qt, x, b, activations, device)
    mat = vkcore.F32Matrix(w, device=device)
    assert len(mat.chunks) > 1
    tol = (np.abs(w) @ np.abs(x) + np.abs(b)) * 70 * 2.0**-23
    assert np.all(np.abs(vkcore.matvec_f32(mat, x, bias=b) - (w.astype(np.float64) @ x + b)) <= tol)


def test_overflow_bounds():
    assert args.max_exact_n(8, True, "int8") == (2**31 - 1) // (127 * 127) == 133_144
    assert args.max_exact_n(8, True, "uint8") == (2**31 - 1) // (127 * 255) == 66_311
    assert args.max_exact_n(8, False, "int8") == (2**31 - 1) // (255 * 127)
    assert args.max_exact_n(8, False, "uint8") == (2**31 - 1) // (255 * 255)
    assert args.max_exact_n(4, True, "int8") == (2**31 - 1) // (7 * 127)


@pytest.mark.parametrize(("activations", "n"), [("int8", 133_144), ("uint8", 66_311)])
def test_largest_exact_n_is_exact_at_the_worst_case(device, activations, n):
    """All weights and activations at their extremes, at the largest n allowed."""
    w = np.ones((1, n), np.float32)
    x = np.ones(n, np.float32)
    qt = vkcore.quantize(w, device=device)
    acc = mv.integer_accumulators(qt, x, activations)
    want = 127 * (127 if activations == "int8" else 255) * n
    assert want <= 2**31 - 1
    assert acc.tolist() == [want]
    big = vkcore.quantize(np.ones((1, n + 1), np.float32), device=device)
    with pytest.raises(ValueError, match="overflow"):
        vkcore.matvec(big, np.ones(n + 1, np.float32), activations=activations)
    assert vkcore.matvec(big, np.ones(n + 1, np.float32)).shape == (1,)  # float mode has no bound


def test_overflow_bound_both_sides_with_a_small_limit(device, rng, monkeypatch):
    monkeypatch.setattr(args, "ACC_LIMIT", 127 * 127 * 10)
    w = rng.standard_normal((3, 10)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    check(qt, rng.standard_normal(10).astype(np.float32), None, "int8", device)
    qt11 = vkcore.quantize(np.ones((3, 11), np.float32), device=device)
    with pytest.raises(ValueError, match="exact up to n = 10"):
        vkcore.matvec(qt11, np.ones(11, np.float32), activations="int8")
    with pytest.raises(ValueError, match="exact up to n = 4"):
        vkcore.matvec(qt, np.ones(10, np.float32), activations="uint8")


def test_bad_arguments(device, rng):
    qt = vkcore.quantize(rng.standard_normal((3, 4)).astype(np.float32), device=device)
    x = np.ones(4, np.float32)
    with pytest.raises(ValueError, match="activations"):
        vkcore.matvec(qt, x, activations="int4")
    with pytest.raises(ValueError, match=r"x must have shape \(4,\)"):
        vkcore.matvec(qt, np.ones(5, np.float32))
    with pytest.raises(ValueError, match="bias"):
        vkcore.matvec(qt, x, bias=np.ones(4, np.float32))
    with pytest.raises(TypeError):
        vkcore.matvec(np.ones((3, 4), np.float32), x)
    with pytest.raises(TypeError):
        vkcore.matvec(qt, np.ones(4, np.int32))
    with pytest.raises(ValueError):
        vkcore.matvec_f32(np.ones(4, np.float32), x, device=device)


def test_features_are_queried_not_assumed(device):
    """The kernel reads packed 32-bit words, so it runs whatever 8-bit features exist."""
    info = device.info
    assert isinstance(info.storage_buffer_8bit_access, bool)
    assert isinstance(info.shader_int8, bool)
    assert isinstance(info.integer_dot_product, bool)
    assert program.workgroup_size(device) >= 4


def test_repeated_calls_reuse_device_buffers(device, rng):
    """Weights stay resident: later calls allocate no buffers and keep the same chunks."""
    w = rng.standard_normal((20, 48)).astype(np.float32)
    x = rng.standard_normal(48).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    chunks = [ch.buffer for ch in qt.chunks]
    for activations in ("float", "int8", "uint8"):
        vkcore.matvec(qt, x, activations=activations)
    live = len(device._buffers)
    for activations in ("float", "int8", "uint8"):
        vkcore.matvec(qt, x, activations=activations)
    assert len(device._buffers) == live
    assert [ch.buffer for ch in qt.chunks] == chunks


@pytest.mark.parametrize("activations", ["int8", "uint8"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_activations_make_integer_outputs_nan(device, rng, activations, bad):
    w = rng.standard_normal((9, 70)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    x = rng.standard_normal(70).astype(np.float32)
    x[41] = bad
    b = rng.standard_normal(9).astype(np.float32)
    y = vkcore.matvec(qt, x, bias=b, activations=activations)
    assert np.isnan(y).all()
    want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, b, activations)
    assert np.isnan(want).all()
    x[41] = 1.0  # the next call with finite x is unaffected
    check(qt, x, b, activations, device)
