"""RTN quantize/dequantize against the numpy reference (integers bit for bit) and the
documented edge cases; the error bounds of RTN quantization."""

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.device.memory import host_buffer
from vkcore.kernels import storage
from vkcore.kernels.quant import launch, rtn

MODES = [(True, True), (True, False), (False, True), (False, False)]  # (symmetric, per_channel)


def check_against_reference(qt, w, bits, symmetric, per_channel):
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    got = qt.q
    assert got.dtype == q.dtype and got.shape == q.shape
    bad = np.argwhere(got != q)
    assert bad.size == 0, (
        f"{len(bad)} integers differ, first at {bad[0]}: {got[tuple(bad[0])]} vs {q[tuple(bad[0])]}"
    )
    assert qt.scale.dtype == np.float32 and np.array_equal(qt.scale, s)
    assert qt.zero_point.dtype == np.int32 and np.array_equal(qt.zero_point, z)
    assert np.array_equal(vkcore.dequantize(qt), reference.dequantize(q, s, z))


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize(("symmetric", "per_channel"), MODES)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (3, 5), (5, 17), (8, 16), (33, 100), (4, 1029)])
def test_matches_reference(device, rng, bits, symmetric, per_channel, shape):
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 100)).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)
    check_against_reference(qt, w, bits, symmetric, per_channel)
    qmin, qmax = reference.integer_range(bits, symmetric)
    assert qt.q.min() >= qmin and qt.q.max() <= qmax


def test_seed_worked_example(device):
    """Range [-1, 3] on uint8: s = 4/255, z = 64, 1.3 -> 147 -> about 1.302."""
    w = np.array([[-1.0, 3.0, 1.3]], np.float32)
    qt = vkcore.quantize(w, symmetric=False, per_channel=False, device=device)
    assert qt.scale == np.float32(4 / 255)
    assert qt.zero_point == 64
    assert qt.q[0, 2] == 147
    assert abs(vkcore.dequantize(qt)[0, 2] - 1.302) < 1e-3


def test_ties_go_to_even(device):
    # max|w| = 63.5 gives s = 0.5 exactly, so w / s = 2w and these are exact half steps.
    w = np.array([[63.5, 0.25, 0.75, 1.25, 1.75, -0.25, -0.75, -1.25, 2.25]], np.float32)
    qt = vkcore.quantize(w, device=device)
    assert qt.scale[0] == 0.5
    assert qt.q.tolist() == [[127, 0, 2, 2, 4, 0, -2, -2, 4]]
    check_against_reference(qt, w, 8, True, True)


@pytest.mark.parametrize(("symmetric", "per_channel"), MODES)
def test_values_next_to_every_midpoint(device, rng, symmetric, per_channel):
    """The float32 values nearest each rounding midpoint (k + 1/2) s, and their
    neighbours: where a multiply by 1/s would round the wrong way."""
    rows = []
    for _ in range(6):
        amax = np.float32(rng.uniform(0.1, 10))
        s = np.float32(amax / 127) if symmetric else None
        if s is None:
            s = np.float32((2 * np.float64(amax)) / 255)
        mids = (np.arange(-127, 127) + 0.5) * np.float64(s)
        near = mids.astype(np.float32)
        row = np.concatenate(
            [near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))]
        )
        row = np.clip(row, -amax, amax)
        row[:2] = amax, -amax
        rows.append(row)
    w = np.array(rows, np.float32)
    qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
    check_against_reference(qt, w, 8, symmetric, per_channel)


def test_reference_rounds_the_exact_quotient():
    """The reference itself against exact rational arithmetic on a few hard cases."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    s = np.float32(0.7) / np.float32(127)
    w = ((np.arange(-127, 127) + 0.5) * np.float64(s)).astype(np.float32)
    w = np.concatenate(
        [w, np.nextafter(w, np.float32(9)), rng.standard_normal(50).astype(np.float32) * 0.7]
    )
    got = reference.round_quotient(w, s)
    for wi, gi in zip(w, got, strict=True):
        exact = Fraction(float(wi)) / Fraction(float(s))
        floor = exact.numerator // exact.denominator
        rest = exact - floor
        want = floor + (1 if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2) else 0)
        assert gi == want


@pytest.mark.parametrize(("symmetric", "per_channel"), MODES)
def test_all_zero_rows_and_tensor(device, symmetric, per_channel):
    w = np.zeros((3, 10), np.float32)
    w[1] = np.linspace(-2, 3, 10)
    for mat in (w, np.zeros((2, 5), np.float32)):
        qt = vkcore.quantize(mat, symmetric=symmetric, per_channel=per_channel, device=device)
        check_against_reference(qt, mat, 8, symmetric, per_channel)
        deq = vkcore.dequantize(qt)
        assert np.isfinite(qt.scale).all() and np.isfinite(deq).all()
        zero_rows = ~mat.any(axis=1)
        assert np.all(deq[zero_rows] == 0)
    qt = vkcore.quantize(
        np.zeros((2, 5), np.float32), symmetric=symmetric, per_channel=per_channel, device=device
    )
    assert np.all(qt.scale == 1) and np.all(qt.zero_point == 0)


def test_asymmetric_range_contains_zero(device, rng):
    """One-sided rows still represent 0.0 exactly (the range is widened to include 0)."""
    w = np.abs(rng.standard_normal((4, 64))).astype(np.float32) + 5  # all in [5, ...]
    w[2] = -w[2]
    w[:, 7] = 0.0
    qt = vkcore.quantize(w, symmetric=False, device=device)
    check_against_reference(qt, w, 8, False, True)
    assert np.all(vkcore.dequantize(qt)[:, 7] == 0.0)
    assert qt.zero_point[0] == 0 and qt.zero_point[2] == 255


def test_one_huge_row_per_channel_wins(device, rng):
    w = (rng.standard_normal((16, 256)) * 0.01).astype(np.float32)
    w[5] *= 100 * 100
    per_tensor = vkcore.quantize(w, per_channel=False, device=device)
    per_channel = vkcore.quantize(w, per_channel=True, device=device)
    check_against_reference(per_channel, w, 8, True, True)
    check_against_reference(per_tensor, w, 8, True, False)
    small = np.arange(16) != 5
    err_t = np.abs(vkcore.dequantize(per_tensor) - w)[small].max()
    err_c = np.abs(vkcore.dequantize(per_channel) - w)[small].max()
    assert err_c * 100 < err_t
    assert np.count_nonzero(per_tensor.q[small]) < 0.05 * per_tensor.q[small].size  # crushed to 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_name_the_position(device, bad):
    w = np.ones((4, 6), np.float32)
    w[2, 3] = bad
    w[3, 0] = bad
    with pytest.raises(ValueError, match=r"w\[2, 3\]"):
        vkcore.quantize(w, device=device)


def test_float64_beyond_float32_range_is_named(device):
    w = np.ones((2, 3))
    w[1, 2] = 1e39
    with pytest.raises(ValueError, match=r"w\[1, 2\].*float32 range"):
        vkcore.quantize(w, device=device)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"bits": 1}, ValueError),
        ({"bits": 9}, ValueError),
        ({"bits": 8.0}, TypeError),
        ({"bits": True}, TypeError),
        ({"symmetric": "yes"}, TypeError),
        ({"per_channel": 1}, TypeError),
    ],
)
def test_bad_options(device, kwargs, error):
    with pytest.raises(error):
        vkcore.quantize(np.ones((2, 2), np.float32), device=device, **kwargs)


@pytest.mark.parametrize(
    ("w", "error"),
    [
        (np.ones(4, np.float32), ValueError),
        (np.ones((2, 2, 2), np.float32), ValueError),
        (np.ones((0, 3), np.float32), ValueError),
        (np.ones((2, 2), np.int32), TypeError),
        ("weights", TypeError),
    ],
)
def test_bad_weights(device, w, error):
    with pytest.raises(error):
        vkcore.quantize(w, device=device)


def test_subnormals_count_as_zero(device):
    w = np.array([[1e-40, 1.0, -1e-39], [1e-40, -2e-40, 0.0]], np.float32)
    for symmetric in (True, False):
        qt = vkcore.quantize(w, symmetric=symmetric, device=device)
        check_against_reference(qt, w, 8, symmetric, True)
        assert qt.scale[1] == 1 and np.all(vkcore.dequantize(qt)[1] == 0)


@pytest.mark.parametrize(("symmetric", "per_channel"), MODES)
def test_extreme_magnitudes(device, rng, symmetric, per_channel):
    """Scales near the ends of the float32 range (exercises the power-of-two normalization)."""
    w = rng.standard_normal((4, 40)).astype(np.float32)
    w[0] *= np.float32(1e-35)
    w[1] *= np.float32(1e37)
    w[2] *= np.float32(3e-38)
    w[3, :2] = np.float32(3.4e38), np.float32(-3.4e38)
    qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
    q, s, z = reference.quantize(w, 8, symmetric, per_channel)
    assert (
        np.array_equal(qt.q, q) and np.array_equal(qt.scale, s) and np.array_equal(qt.zero_point, z)
    )


def test_per_tensor_fields(device, rng):
    w = rng.standard_normal((3, 9)).astype(np.float32)
    qt = vkcore.quantize(w, per_channel=False, symmetric=False, bits=4, device=device)
    assert qt.scale.shape == () and qt.zero_point.shape == ()
    assert qt.q.dtype == np.uint8 and qt.q.max() <= 15
    assert (qt.bits, qt.symmetric, qt.per_channel) == (4, False, False)
    assert "QuantizedTensor" in repr(qt)


def test_tensor_input(device, rng):
    w = rng.standard_normal((5, 12)).astype(np.float32)
    qt = vkcore.quantize(vkcore.asarray(w, device=device), device=device)
    check_against_reference(qt, w, 8, True, True)


def test_weights_split_across_buffers(device, rng, monkeypatch):
    """A matrix larger than one storage binding (mocked at 256 bytes) is split by rows."""
    monkeypatch.setattr(storage, "binding_limit", lambda dev: 256)
    w = rng.standard_normal((37, 40)).astype(np.float32)  # 48-byte rows: 5 rows a buffer
    for symmetric, per_channel in MODES:
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        assert len(qt.chunks) > 1
        check_against_reference(qt, w, 8, symmetric, per_channel)


def test_dequantize_in_place_across_weight_buffers(device, rng, monkeypatch):
    """Weights split over several buffers, dequantized straight into one imported result
    (each chunk's rows land at their own place)."""
    from vkcore.device.memory.pools import host_pool
    from vkcore.kernels import common

    monkeypatch.setattr(storage, "binding_limit", lambda dev: 12288)  # 768 weight rows a buffer
    monkeypatch.setattr(common, "POOLED_RESULT_BYTES", 0)  # every result from the pool
    w = rng.standard_normal((1000, 2)).astype(np.float32)  # an 8000-byte result: one binding
    assert host_pool(device).slot_bytes(w.nbytes) <= 12288
    imports = []
    real_empty = type(host_pool(device)).empty

    def spy(self, shape, dtype, *, imported=False):
        imports.append(imported)
        return real_empty(self, shape, dtype, imported=imported)

    monkeypatch.setattr(type(host_pool(device)), "empty", spy)
    for symmetric, per_channel in MODES:
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        assert len(qt.chunks) == 2
        check_against_reference(qt, w, 8, symmetric, per_channel)
    assert imports and all(imports)  # every dequantize wrote the result in place


def test_row_longer_than_a_binding_is_refused(device, monkeypatch):
    monkeypatch.setattr(storage, "binding_limit", lambda dev: 64)
    with pytest.raises(ValueError, match="binding limit"):
        vkcore.quantize(np.ones((2, 100), np.float32), device=device)


# --------------------------------------------------------------------------- error bounds
def adversarial(rng, m=8, n=300):
    """Rows of exact midpoints, one outlier row, one-sided rows, constant rows."""
    w = rng.standard_normal((m, n)).astype(np.float32)
    w[0] = (rng.integers(-127, 127, n) + 0.5) * np.float32(0.5)
    w[0, 0] = 63.5
    w[1] *= 1000
    w[2] = np.abs(w[2]) + 3
    w[3] = 2.5
    w[4] = rng.uniform(-1, 1, n) ** 9
    return w


@pytest.mark.parametrize(("symmetric", "per_channel"), MODES)
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_error_bounds_hold(device, rng, symmetric, per_channel, bits):
    x = rng.standard_normal(300).astype(np.float32)
    for w in (rng.standard_normal((8, 300)).astype(np.float32), adversarial(rng)):
        qt = vkcore.quantize(
            w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
        )
        e = vkcore.quant_error(w, qt, x)
        assert e.holds()
        assert np.all(e.max_err <= e.bound_max * (1 + 2**-15))
        assert np.all(e.out_err <= e.bound_out * (1 + 2**-15))


def test_midpoint_rows_reach_the_bound(device, rng):
    w = adversarial(rng)
    e = vkcore.quant_error(w, vkcore.quantize(w, device=device))
    assert e.max_err[0] == e.bound_max[0]  # exact ties: error is exactly s / 2
    assert e.rms_err[0] == pytest.approx(e.bound_max[0], rel=1e-2)  # all but one entry are ties


def test_rms_error_is_about_s_over_sqrt12(device, rng):
    w = rng.standard_normal((32, 2048)).astype(np.float32)
    e = vkcore.quant_error(w, vkcore.quantize(w, device=device))
    ratio = e.rms_err / e.typical_rms
    assert 0.9 < ratio.mean() < 1.1


def test_quant_error_checks_arguments(device, rng):
    w = rng.standard_normal((3, 4)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    with pytest.raises(TypeError):
        vkcore.quant_error(w, w)
    with pytest.raises(ValueError):
        vkcore.quant_error(w[:2], qt)
    with pytest.raises(ValueError):
        vkcore.quant_error(w, qt, np.ones(5))


def test_quant_report_cli(capsys):
    from vkcore.tools.cli import main

    assert main(["quant-report", "--rows", "9", "--cols", "37", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "per tensor" in out and "per channel" in out and "all worst-case bounds hold" in out
    assert main(["quant-report", "--asymmetric", "--bits", "3", "--rows", "4", "--cols", "5"]) == 0
    assert main(["quant-report", "--bits", "1"]) == 2


def test_rows_past_the_grid_limit_are_refused(device, monkeypatch):
    monkeypatch.setattr(launch, "WORKGROUP", 1)
    limit = device.info.max_compute_work_group_count[0]
    with pytest.raises(ValueError, match="maxComputeWorkGroupCount"):
        launch.column_groups(device, limit + 1)
    assert launch.column_groups(device, limit) == limit


def test_tensor_weights_stay_on_their_device(rng):
    w = rng.standard_normal((3, 8)).astype(np.float32)
    with vkcore.Device(validation=True) as other:
        qt = vkcore.quantize(vkcore.asarray(w, device=other))
        assert qt.device is other
        check_against_reference(qt, w, 8, True, True)
        mat = vkcore.F32Matrix(vkcore.asarray(w, device=other))
        assert mat.device is other
        qt.release()
        mat.release()
        assert other.validation_messages == []


@pytest.mark.parametrize("n", [64, 100, 37])
def test_imported_weights_match_reference(device, rng, monkeypatch, n):
    """Weights read in place (host memory imported, no staging copy): whole aligned
    blocks with vec4 loads, a ragged tail and unaligned rows all give the reference."""
    if not host_buffer.can_import_host(device):
        pytest.skip("device cannot import host memory")
    monkeypatch.setattr(host_buffer, "HOST_SHARING_MIN_BYTES", 0)
    w = (rng.standard_normal((9, n)) * 3).astype(np.float32)
    assert rtn._import_rows(device, w, 9) == 9
    for symmetric in (True, False):
        qt = vkcore.quantize(w, symmetric=symmetric, device=device)
        check_against_reference(qt, w, 8, symmetric, True)
        qt.release()
    shifted = np.empty(9 * n + 1, np.float32)[1:].reshape(9, n)  # rows start off 16 bytes
    shifted[...] = w
    check_against_reference(vkcore.quantize(shifted, device=device), w, 8, True, True)


def test_read_only_weights_are_copied(device, rng, monkeypatch):
    monkeypatch.setattr(host_buffer, "HOST_SHARING_MIN_BYTES", 0)
    w = rng.standard_normal((4, 32)).astype(np.float32)
    w.flags.writeable = False
    assert rtn._import_rows(device, w, 4) == 0
    check_against_reference(vkcore.quantize(w, device=device), w, 8, True, True)


def test_released_weights_memory_serves_the_next_quantize(device, rng):
    """Output memory is leased from the device's pool: a released QuantizedTensor's
    buffers come back and are overwritten by the next quantize of that size, while a
    QuantizedTensor still alive is never touched."""
    shape = (64, 1024)
    w1, w2, w3 = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    kept = vkcore.quantize(w1, device=device)
    kept_q = kept.q.copy()
    second = vkcore.quantize(w2, device=device)
    handles = {ch.buffer.handle for ch in second.chunks}
    assert handles.isdisjoint(ch.buffer.handle for ch in kept.chunks)
    second.release()
    third = vkcore.quantize(w3, device=device)
    assert {ch.buffer.handle for ch in third.chunks} == handles  # the pages came back
    check_against_reference(third, w3, 8, True, True)
    assert np.array_equal(kept.q, kept_q)
    check_against_reference(kept, w1, 8, True, True)
    kept.release()
    third.release()


# ------------------------------------------- symmetric per channel: scales on the device
@pytest.fixture
def device_scales_calls(monkeypatch):
    """Counts the calls that took the scales-on-device path (quantize_rows.comp)."""
    calls = []
    real = rtn._quantize_rows

    def spy(*args, **kwargs):
        calls.append(args[2].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(rtn, "_quantize_rows", spy)
    return calls


def _magnitude_rows(rng, rows, n):
    """Rows whose max|w| covers the float32 range: log-uniform from 2^-126 to 2^127, with
    rows whose scale is subnormal (max|w| < 127 * 2^-126), rows of only subnormals, zero
    rows, the largest float and exact powers of two."""
    w = rng.uniform(-1, 1, (rows, n)).astype(np.float32)
    amax = np.exp2(rng.uniform(-126, 127.9, rows)).astype(np.float32)
    amax[:40] = np.exp2(rng.uniform(-126, -117, 40)).astype(np.float32)
    amax[40:48] = np.exp2(np.arange(-126, -118)).astype(np.float32)
    amax[48] = np.finfo(np.float32).max
    amax[49] = np.finfo(np.float32).tiny
    w *= amax[:, None]
    w[np.arange(rows), rng.integers(0, n, rows)] = amax * rng.choice([-1, 1], rows)
    w[50] = np.float32(1e-40) * rng.uniform(-1, 1, n).astype(np.float32)  # subnormal only
    w[51] = 0
    return w


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
def test_device_scales_match_the_host_bit_for_bit(device, rng, bits, device_scales_calls):
    w = _magnitude_rows(rng, 600, 24)  # 24 columns: one whole block and half of another
    qt = vkcore.quantize(w, bits=bits, device=device)
    assert device_scales_calls == [w.shape]
    q, s, z = reference.quantize(w, bits, True, True)
    bad = np.flatnonzero(qt.scale.view(np.uint32) != s.view(np.uint32))
    assert bad.size == 0, f"scale of row {bad[:5]}: {qt.scale[bad[:5]]} vs {s[bad[:5]]}"
    with np.errstate(over="ignore"):  # 127 * s rounds past the largest float in one row
        check_against_reference(qt, w, bits, True, True)
    if bits > 2:  # qmax > 1: some of the first 40 rows have subnormal scales
        assert (qt.scale[:40] < np.finfo(np.float32).tiny).any()
    qt.release()


@pytest.mark.parametrize("bad", [np.nan, -np.nan, np.inf, -np.inf])
def test_device_scales_path_names_non_finite_positions(device, bad, device_scales_calls):
    w = np.ones((5, 8), np.float32)
    w[2, 3] = bad
    w[4, 0] = bad
    with pytest.raises(ValueError, match=r"w\[2, 3\]"):
        vkcore.quantize(w, device=device)
    assert device_scales_calls == [w.shape]
    big = np.ones((2, 8))
    big[1, 6] = 1e39
    with pytest.raises(ValueError, match=r"w\[1, 6\].*float32 range"):
        vkcore.quantize(big, device=device)


def test_device_scales_past_the_grid_width(device, rng, device_scales_calls):
    """More rows than maxComputeWorkGroupCount[0]: the grid wraps onto a second line."""
    width = device.info.max_compute_work_group_count[0]
    w = rng.standard_normal((width + 3, 4)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    assert device_scales_calls == [w.shape]
    check_against_reference(qt, w, 8, True, True)
    qt.release()


def test_device_scales_can_be_turned_off(device, rng, monkeypatch, device_scales_calls):
    w = _magnitude_rows(rng, 64, 8)
    monkeypatch.setenv("VKCORE_DEVICE_SCALES", "0")
    host = vkcore.quantize(w, device=device)
    assert device_scales_calls == []
    monkeypatch.delenv("VKCORE_DEVICE_SCALES")
    on_device = vkcore.quantize(w, device=device)
    assert device_scales_calls == [w.shape]
    assert np.array_equal(host.q, on_device.q)
    assert np.array_equal(host.scale.view(np.uint32), on_device.scale.view(np.uint32))


@pytest.mark.parametrize("workgroup", [16, 64])
def test_device_scales_with_several_subgroups(device, rng, monkeypatch, workgroup):
    """A GPU-sized workgroup spans several subgroups: the row maximum then goes through
    shared memory and a barrier (on lavapipe a workgroup is otherwise one subgroup)."""
    monkeypatch.setattr(rtn, "_row_workgroup", lambda dev: workgroup)
    w = _magnitude_rows(rng, 80, 200)  # rows of 50 vec4: several steps for every lane
    qt = vkcore.quantize(w, device=device)
    with np.errstate(over="ignore"):
        check_against_reference(qt, w, 8, True, True)
    bad = w.copy()
    bad[7, 150] = np.nan
    with pytest.raises(ValueError, match=r"w\[7, 150\]"):
        vkcore.quantize(bad, device=device)
