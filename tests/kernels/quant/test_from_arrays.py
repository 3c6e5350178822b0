"""QuantizedTensor.from_arrays / to_arrays / save / load: round trips bit for bit, the
stored bytes against the reference packing, ggml Q8_0 / Q4_0 and torchao int4 built in
numpy from their own formulas, and every bad argument or damaged file a clear error."""

import gc

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels.quant import qarrays

QT = vkcore.QuantizedTensor


def random_layout(rng, m, n, bits, symmetric, group_size):
    """Codes over the whole range, positive scales and zero points in range."""
    qmin, qmax = reference.integer_range(bits, symmetric)
    q = rng.integers(qmin, qmax + 1, (m, n)).astype(np.int8 if symmetric else np.uint8)
    shape = (m, -(-n // group_size)) if group_size else (m,)
    s = (rng.random(shape) * 3 + 0.01).astype(np.float32)
    z = None if symmetric else rng.integers(0, 2**bits, shape).astype(np.int32)
    return q, s, z


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("shape", "group_size"), [((3, 37), 8), ((2, 64), 32), ((4, 5), None)])
def test_round_trip_and_stored_bytes(device, rng, bits, symmetric, shape, group_size):
    q, s, z = random_layout(rng, *shape, bits, symmetric, group_size)
    qt = QT.from_arrays(q, s, z, bits=bits, group_size=group_size, device=device)
    m, n = shape
    assert (qt.bits, qt.symmetric, qt.group_size, qt.packed) == (
        bits,
        symmetric,
        group_size,
        bits <= 4,
    )
    assert qt.groups == (-(-n // group_size) if group_size else 1)
    assert qt.group_cols == (group_size or n)
    per_byte = 2 if bits <= 4 else 1
    assert qt.row_bytes == int(np.ceil(np.ceil(n / per_byte) / 16)) * 16
    assert qt.nbytes == m * qt.row_bytes + 8 * s.size
    got = qt.q
    assert got.dtype == q.dtype and np.array_equal(got, q)
    assert qt.scale.dtype == np.float32 and np.array_equal(qt.scale, s)
    zz = np.zeros(s.shape, np.int32) if z is None else z
    assert qt.zero_point.dtype == np.int32 and np.array_equal(qt.zero_point, zz)
    expected = reference.stored_rows(q, zz, bits, group_size)
    assert np.array_equal(qt.stored_rows(), expected)
    back = qt.to_arrays()
    assert back["bits"] == bits and back["group_size"] == group_size
    assert (back["zero_point"] is None) == symmetric
    again = QT.from_arrays(**back, device=device)
    assert np.array_equal(again.stored_rows(), expected)
    assert np.array_equal(again.scale, s)


def test_nibble_order_by_hand(device):
    """Byte k: column 2k low nibble, 2k + 1 high; -1 is 0xF; the odd tail pads with z."""
    q = np.array([[1, 2, 3], [-1, 7, -7]], np.int8)
    qt = QT.from_arrays(q, np.ones(2, np.float32), bits=4, device=device)
    rows = qt.stored_rows()
    assert rows.shape == (2, 16)
    assert rows[0, :2].tolist() == [0x21, 0x03] and rows[1, :2].tolist() == [0x7F, 0x09]
    assert not rows[:, 2:].any()
    qa = np.array([[1, 2, 3]], np.uint8)
    qt = QT.from_arrays(qa, np.ones((1, 2), np.float32), np.array([[4, 9]]), bits=4, group_size=2)
    assert qt.stored_rows()[0, :3].tolist() == [0x21, 0x93, 0x99]  # last group's z pads


def test_per_tensor_and_reference_unpack(device, rng):
    q = rng.integers(-3, 4, (5, 9)).astype(np.int8)
    qt = QT.from_arrays(q, np.float32(0.25), bits=3, device=device)
    assert not qt.per_channel and qt.scale.shape == () and qt.nbytes == 5 * 16 + 8
    raw = qt.stored_rows()
    assert np.array_equal(reference.unpack_nibbles(raw, 9, signed=True), q)


# --------------------------------------------------------------------------- formats
def ggml_q8_0(x):
    """ggml's quantize_row_q8_0_ref: per block of 32, d = amax / 127 (fp16), q = roundf(x / d)."""
    blocks = x.reshape(x.shape[0], -1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=2)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = blocks * inv[..., None]
    q = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)  # roundf: half away from 0
    return q.reshape(x.shape), d.astype(np.float16)


def ggml_q4_0(x):
    """ggml's quantize_row_q4_0_ref: d = (signed max-magnitude value) / -8, codes
    min(15, int8(x / d + 8.5)), block bytes qs[j] = code[j] | code[j + 16] << 4."""
    blocks = x.reshape(x.shape[0], -1, 32).astype(np.float32)
    pick = np.abs(blocks).argmax(axis=2)
    vmax = np.take_along_axis(blocks, pick[..., None], axis=2)[..., 0]
    d = (vmax / np.float32(-8)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    codes = np.minimum(15, np.trunc(blocks * inv[..., None] + np.float32(8.5))).astype(np.uint8)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    return qs, d.astype(np.float16)


def ggml_q4_0_dequant(qs, d):
    lo, hi = (qs & 0xF).astype(np.int32) - 8, (qs >> 4).astype(np.int32) - 8
    codes = np.concatenate([lo, hi], axis=2).astype(np.float32)
    return (codes * d.astype(np.float32)[..., None]).reshape(qs.shape[0], -1)


def q4_0_arrays(qs, d):
    """The documented mapping: codes 0..15 (the nibbles unpacked to ggml's in-block
    order) with zero point 8, and ggml's d as it is (negative and zero included)."""
    codes = np.concatenate([qs & 0xF, qs >> 4], axis=2)
    z = np.full(d.shape, 8, np.int32)
    return codes.reshape(qs.shape[0], -1).astype(np.uint8), d, z


def bits_of(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_ggml_q8_0(device, rng):
    x = (rng.standard_normal((6, 128)) * 2).astype(np.float32)
    x[2, 32:64] = 0  # an all-zero block: d = 0
    q, d = ggml_q8_0(x)
    assert (d == 0).any()
    w_ggml = q.astype(np.float32) * np.repeat(d.astype(np.float32), 32, axis=1)
    qt = QT.from_arrays(q, d, bits=8, group_size=32, device=device)  # fp16 d as stored
    assert qt.groups == 4 and qt.scale.shape == (6, 4) and not qt.packed
    a = qt.to_arrays()
    assert np.array_equal(a["q"], q) and np.array_equal(bits_of(a["scale"]), bits_of(d))
    w_hat = reference.dequantize(a["q"], a["scale"], np.zeros(d.shape, np.int32), 32)
    assert np.array_equal(bits_of(w_hat), bits_of(w_ggml))
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(w_ggml))
    assert not vkcore.dequantize(qt)[2, 32:64].any()  # the d = 0 block: zeros


def test_ggml_q4_0(device, rng):
    x = rng.standard_normal((4, 96)).astype(np.float32)
    x[0, :32] = np.abs(x[0, :32])  # largest magnitude positive: d < 0
    x[1, :32] = -np.abs(x[1, :32])  # negative: d > 0
    x[3, 64:] = 0  # d = 0
    qs, d = ggml_q4_0(x)
    assert (d < 0).any() and (d > 0).any() and (d == 0).any()
    codes, s, z = q4_0_arrays(qs, d)
    qt = QT.from_arrays(codes, s, z, bits=4, group_size=32, device=device)
    assert qt.packed and qt.nbytes == 4 * 48 + 8 * 12
    a = qt.to_arrays()
    assert np.array_equal(a["q"], codes) and np.array_equal(a["zero_point"], z)
    assert np.array_equal(bits_of(a["scale"]), bits_of(d))
    # Bit for bit, signed zeros included: d * 0 is -0.0 in the blocks with d < 0.
    want = ggml_q4_0_dequant(qs, d)
    assert (np.signbit(want) & (want == 0)).any()
    w_hat = reference.dequantize(a["q"], a["scale"], a["zero_point"], 32)
    assert np.array_equal(bits_of(w_hat), bits_of(want))
    assert np.array_equal(bits_of(vkcore.dequantize(qt)), bits_of(want))


@pytest.mark.parametrize("mode", ["float", "int8", "uint8"])
def test_negative_and_zero_scales_in_matvec(device, rng, mode):
    """ggml's negative and zero d (and -0.0) in every matvec mode, vector and batch, against
    the reference: integers bit for bit, float within float32 summation error."""
    x = rng.standard_normal((5, 96)).astype(np.float32)
    x[3, 64:] = 0
    qs, d = ggml_q4_0(x)
    codes, s, z = q4_0_arrays(qs, d)
    s = s.astype(np.float32)
    s[4, 0] = -0.0
    qt = QT.from_arrays(codes, s, z, bits=4, group_size=32, device=device)
    v = rng.standard_normal((96, 3)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    want = reference.matvec(codes, s, z, v, bias, mode, group_size=32)
    got = vkcore.matvec(qt, v, bias=bias, activations=mode)
    one = vkcore.matvec(qt, np.ascontiguousarray(v[:, 0]), bias=bias, activations=mode)
    if mode == "float":
        w_hat = reference.dequantize(codes, s, z, 32).astype(np.float64)
        tol = (
            100 * 2.0**-23 * (np.abs(w_hat) @ np.abs(v.astype(np.float64)) + np.abs(bias)[:, None])
        )
        assert np.all(np.abs(got - want) <= tol) and np.all(np.abs(one - want[:, 0]) <= tol[:, 0])
    else:
        assert np.array_equal(bits_of(got), bits_of(want))
        assert np.array_equal(bits_of(one), bits_of(want[:, 0]))


def test_torchao_int4_group_128(device, rng):
    """torchao's asymmetric int4 with integer zero points (ZeroPointDomain.INT)."""
    x = rng.standard_normal((3, 300)).astype(np.float32)  # 300: the last group is short
    qmin, qmax, eps = 0, 15, np.finfo(np.float32).eps
    s_list, z_list, q = [], [], np.empty(x.shape, np.uint8)
    for g0 in range(0, 300, 128):
        blk = x[:, g0 : g0 + 128]
        lo = np.minimum(blk.min(axis=1), 0)
        hi = np.maximum(blk.max(axis=1), 0)
        s = np.maximum((hi - lo) / np.float32(qmax - qmin), eps).astype(np.float32)
        zp = np.clip(qmin - np.rint(lo / s), qmin, qmax).astype(np.int32)
        q[:, g0 : g0 + 128] = np.clip(np.rint(blk / s[:, None]) + zp[:, None], qmin, qmax)
        s_list.append(s)
        z_list.append(zp)
    s, zp = np.stack(s_list, 1), np.stack(z_list, 1)
    w_torchao = np.concatenate(
        [
            (q[:, g0 : g0 + 128].astype(np.int32) - zp[:, [k]]).astype(np.float32) * s[:, [k]]
            for k, g0 in enumerate(range(0, 300, 128))
        ],
        axis=1,
    )
    qt = QT.from_arrays(q, s, zp, bits=4, group_size=128, device=device)
    assert qt.groups == 3
    a = qt.to_arrays()
    w_hat = reference.dequantize(a["q"], a["scale"], a["zero_point"], 128)
    assert np.array_equal(w_hat, w_torchao)


# --------------------------------------------------------------------------- save / load
@pytest.mark.parametrize(
    ("bits", "symmetric", "group_size", "shape"),
    [
        (4, False, 32, (3, 77)),
        (4, True, None, (2, 9)),
        (8, True, 16, (2, 40)),
        (6, False, None, (3, 5)),
    ],
)
def test_save_load_round_trip(device, rng, tmp_path, bits, symmetric, group_size, shape):
    q, s, z = random_layout(rng, *shape, bits, symmetric, group_size)
    qt = QT.from_arrays(q, s, z, bits=bits, group_size=group_size, device=device)
    path = tmp_path / "w.qt"  # saved under exactly this name
    qt.save(path)
    back = QT.load(path, device=device)
    assert (back.shape, back.bits, back.symmetric, back.group_size, back.per_channel) == (
        qt.shape, qt.bits, qt.symmetric, qt.group_size, qt.per_channel,
    )  # fmt: skip
    assert np.array_equal(back.stored_rows(), qt.stored_rows())
    assert np.array_equal(back.scale, qt.scale) and np.array_equal(back.zero_point, qt.zero_point)


def test_save_load_negative_and_zero_scales(device, tmp_path):
    """ggml-style scales (negative, 0, -0.0) survive save/load bit for bit."""
    q = np.array([[1, -2, 3, 0], [7, 0, -7, 1]], np.int8)
    s = np.array([[-0.5, 0.0], [-0.0, 2.0]], np.float32)
    qt = QT.from_arrays(q, s, bits=4, group_size=2, device=device)
    qt.save(tmp_path / "s.npz")
    back = QT.load(tmp_path / "s.npz", device=device)
    assert np.array_equal(bits_of(back.scale), bits_of(s)) and np.array_equal(back.q, q)
    assert np.array_equal(bits_of(vkcore.dequantize(back)), bits_of(vkcore.dequantize(qt)))


def test_save_load_per_tensor(device, tmp_path):
    qt = QT.from_arrays(np.array([[3, 250]], np.uint8), np.float32(0.5), np.int32(7), bits=8)
    qt.save(tmp_path / "t.npz")
    back = QT.load(tmp_path / "t.npz", device=device)
    assert not back.per_channel and back.zero_point == 7 and back.q.tolist() == [[3, 250]]


@pytest.fixture
def saved(device, tmp_path):
    """The fields of a saved 3-bit asymmetric group tensor with an odd n, as a dict."""
    q = np.array([[0, 7, 3, 1, 5], [2, 2, 6, 4, 0]], np.uint8)
    qt = QT.from_arrays(
        q, np.ones((2, 2), np.float32), np.array([[1, 2], [3, 4]]), bits=3, group_size=3
    )
    qt.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as f:
        return {k: f[k] for k in f.files}


def write(tmp_path, fields, name="bad.npz", redigest=True):
    """Save ``fields``, with a digest recomputed over them (so the other checks are seen)."""
    path = tmp_path / name
    if redigest and "digest" in fields:
        fields = {**fields, "digest": np.array(qarrays.digest(fields))}
    np.savez(path, **fields)
    return path


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda f: f.update(version=np.array(2)), "format version 2 .*newer"),
        (lambda f: f.update(format=np.array("something.else")), "format is 'something.else'"),
        (lambda f: f.pop("format"), "not a saved vkcore.QuantizedTensor"),
        (lambda f: f.pop("zero_point"), "missing \\['zero_point'\\]"),
        (lambda f: f.update(extra=np.zeros(1)), "extra \\['extra'\\]"),
        (lambda f: f.update(codes=f["codes"].astype(np.int16)), "field 'codes' must be uint8"),
        (lambda f: f.update(codes=f["codes"][:, :2]), "field 'codes' must be uint8 of shape"),
        (lambda f: f.update(codes=f["codes"] | 0x8), "q\\[.*outside the 3-bit asymmetric"),
        (lambda f: f.update(codes=f["codes"] ^ 0x10), "padding nibble|outside"),
        (lambda f: f.update(scale=f["scale"] * np.nan), "scale must be finite"),
        (lambda f: f.update(scale=f["scale"] * np.inf), "scale must be finite"),
        (lambda f: f.update(scale=f["scale"].astype(np.float64)), "'scale' must be float32"),
        (lambda f: f.update(scale=f["scale"][:, :1]), "scale must have shape"),
        (lambda f: f.update(zero_point=f["zero_point"] + 8), "zero_point.*outside the 3-bit"),
        (lambda f: f.update(zero_point=f["zero_point"].astype(np.int64)), "must be int32"),
        (lambda f: f.update(bits=np.array(9)), "bits must be from 2 to 8"),
        (lambda f: f.update(group_size=np.array(-3)), "group_size must be a positive int"),
        (lambda f: f.update(shape=np.array([2, 7])), "field 'codes' must be uint8 of shape"),
        (lambda f: f.update(shape=np.array([3, 5])), "field 'codes' must be uint8 of shape"),
        (lambda f: f.update(shape=np.array([2, 5, 1])), "'shape' must be two positive"),
        (lambda f: f.update(shape=np.array([0, 5])), "'shape' must be two positive"),
        (lambda f: f.pop("digest"), "missing \\['digest'\\]"),
        (lambda f: f.update(shape=np.array([2.0, 5.0])), "field 'shape' must be a 1-D array"),
        (lambda f: f.update(per_channel=np.array(False)), "per_channel"),
        (lambda f: f.update(symmetric=np.array(True)), "fields must be"),
    ],
)
def test_load_refuses_damaged_fields(saved, tmp_path, device, change, match):
    change(saved)
    with pytest.raises(ValueError, match=match):
        QT.load(write(tmp_path, saved), device=device)


def test_load_refuses_an_edit_that_keeps_the_old_digest(saved, tmp_path, device):
    """n = 5 -> 6 fits the same packed bytes: only the digest tells the file was changed."""
    assert QT.load(write(tmp_path, saved, redigest=False), device=device).shape == (2, 5)
    saved["shape"] = np.array([2, 6])
    with pytest.raises(ValueError, match="digest does not match"):
        QT.load(write(tmp_path, saved, redigest=False), device=device)
    with pytest.raises(ValueError, match="field 'digest' must be"):
        QT.load(write(tmp_path, {**saved, "digest": np.array(7)}, redigest=False), device=device)
    saved["codes"] = saved["codes"] ^ 1  # a code changed, in range
    saved["shape"] = np.array([2, 5])
    with pytest.raises(ValueError, match="digest does not match"):
        QT.load(write(tmp_path, saved, redigest=False), device=device)


def test_load_refuses_foreign_files(saved, tmp_path, device):
    good = write(tmp_path, saved, "good.npz")
    data = good.read_bytes()
    cases = {
        "truncated.npz": data[: len(data) // 2],
        "noise.npz": bytes(range(256)) * 4,
        "empty.npz": b"",
    }
    for name, raw in cases.items():
        (tmp_path / name).write_bytes(raw)
        with pytest.raises(ValueError, match="is not a readable vkcore.QuantizedTensor"):
            QT.load(tmp_path / name, device=device)
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(ValueError, match="single array"):
        QT.load(tmp_path / "one.npy", device=device)
    np.savez(tmp_path / "other.npz", weights=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="not a saved vkcore.QuantizedTensor"):
        QT.load(tmp_path / "other.npz", device=device)
    data = bytearray(data)
    data[len(data) // 3] ^= 0xFF  # a flipped byte inside a stored member: its CRC fails
    (tmp_path / "flipped.npz").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="is not a readable"):
        QT.load(tmp_path / "flipped.npz", device=device)
    np.savez(tmp_path / "pickled.npz", **{**saved, "codes": np.array([None], dtype=object)})
    with pytest.raises(ValueError, match="not a readable|pickle"):
        QT.load(tmp_path / "pickled.npz", device=device)
    with pytest.raises(FileNotFoundError):
        QT.load(tmp_path / "missing.npz", device=device)


# --------------------------------------------------------------------------- errors
GOOD_Q = np.zeros((2, 6), np.int8)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"q": GOOD_Q.astype(np.float32)}, TypeError, "q must have an integer dtype"),
        ({"q": GOOD_Q.astype(bool)}, TypeError, "q must have an integer dtype"),
        ({"q": np.zeros(6, np.int8)}, ValueError, "q must be a non-empty 2-D"),
        ({"q": np.zeros((0, 6), np.int8)}, ValueError, "q must be a non-empty 2-D"),
        (
            {"q": np.full((2, 6), -128, np.int8)},
            ValueError,
            "outside the 8-bit symmetric code range \\[-127, 127\\]",
        ),
        ({"q": GOOD_Q + 8, "bits": 4}, ValueError, "q\\[0, 0\\] is 8, outside the 4-bit"),
        ({"q": GOOD_Q - 1, "zero_point": np.zeros(2, int)}, ValueError, "asymmetric code range"),
        ({"bits": 9}, ValueError, "bits must be from 2 to 8"),
        ({"bits": 1}, ValueError, "bits must be from 2 to 8"),
        ({"bits": True}, TypeError, "bits must be an int"),
        ({"bits": 4.0}, TypeError, "bits must be an int"),
        ({"group_size": 0}, ValueError, "group_size must be a positive int"),
        ({"group_size": True}, TypeError, "group_size must be a positive int"),
        ({"group_size": 2.0}, TypeError, "group_size must be a positive int"),
        ({"scale": np.ones(3, np.float32)}, ValueError, "scale must have shape \\(\\) .* \\(2,\\)"),
        ({"scale": np.ones((2, 3), np.float32)}, ValueError, "give group_size"),
        ({"scale": np.ones((2, 2), np.float32), "group_size": 2}, ValueError, "= \\(2, 3\\)"),
        ({"scale": np.ones((2, 3), np.float32), "group_size": 4}, ValueError, "\\(2, 2\\)"),
        ({"scale": np.ones(2, np.int32)}, TypeError, "scale must have a float16, float32"),
        ({"scale": np.array([1.0, np.inf], np.float32)}, ValueError, "scale\\[1\\] is inf"),
        ({"scale": np.array([1.0, -np.inf], np.float16)}, ValueError, "scale must be finite"),
        ({"scale": np.array([1.0, np.nan], np.float32)}, ValueError, "scale must be finite"),
        ({"group_size": 2**31}, ValueError, "group_size must be at most 2\\^31 - 1"),
        ({"group_size": np.int64(2**40)}, ValueError, "group_size must be at most"),
        ({"scale": np.array([1.0, 0.1])}, ValueError, "scale\\[1\\] is 0.1, not a float32 value"),
        ({"scale": np.float64(1e300)}, ValueError, "not a float32 value"),
        ({"scale": "1"}, TypeError, "scale must be a numpy float array"),
        ({"zero_point": np.zeros(3, np.int32)}, ValueError, "zero_point must have the scale's"),
        ({"zero_point": np.full(2, 256)}, ValueError, "zero_point\\[0\\] is 256, outside"),
        ({"zero_point": np.full(2, -1)}, ValueError, "zero_point\\[0\\] is -1, outside"),
        ({"zero_point": np.full(2, 16), "bits": 4}, ValueError, "outside the 4-bit range"),
        ({"zero_point": np.zeros(2, np.float32)}, TypeError, "zero_point must have an integer"),
    ],
)
def test_from_arrays_errors(device, kwargs, exc, match):
    args = {"q": GOOD_Q, "scale": np.ones(2, np.float32), "zero_point": None, "bits": 8}
    args.update(kwargs)
    if args["zero_point"] is not None and "q" not in kwargs:
        args["q"] = GOOD_Q.astype(np.uint8)
    with pytest.raises(exc, match=match):
        QT.from_arrays(**args, device=device)


def test_float16_and_exact_float64_scales_are_taken(device):
    q = np.ones((2, 2), np.int8)
    for s in (
        np.array([0.5, 3.0], np.float16),
        np.array([0.5, 0.1], np.float32).astype(np.float64),
    ):
        qt = QT.from_arrays(q, s, device=device)
        assert np.array_equal(qt.scale, s.astype(np.float32))


def test_to_arrays_checks_its_argument():
    with pytest.raises(TypeError, match="qt must be a vkcore.QuantizedTensor"):
        qarrays.to_arrays(np.zeros(2))


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_failed_upload_frees_what_it_made(device, rng, monkeypatch, fail_at):
    """An error in the k-th buffer write (codes, scales, zero points) leaves no buffer
    behind: the chunks go back to the pool, the parameter buffers are destroyed."""
    from vkcore.device.memory.buffer import Buffer

    q, s, z = random_layout(rng, 4, 50, 4, False, 16)
    QT.from_arrays(q, s, z, bits=4, group_size=16, device=device).release()  # warms the pool
    gc.collect()  # garbage of earlier tests freed now, not in the middle
    before = device.live_objects()["buffers"]
    real, calls = Buffer.write, []

    def write(self, data, offset=0):
        calls.append(1)
        if len(calls) == fail_at:
            raise RuntimeError("injected")
        return real(self, data, offset)

    monkeypatch.setattr(Buffer, "write", write)
    with pytest.raises(RuntimeError, match="injected") as info:
        QT.from_arrays(q, s, z, bits=4, group_size=16, device=device)
    monkeypatch.setattr(Buffer, "write", real)
    # info keeps the failed call's frames (and so its lists of buffers) alive: only an
    # explicit free, not the collector, makes the count come back
    assert info.traceback and device.live_objects()["buffers"] == before
    qt = QT.from_arrays(q, s, z, bits=4, group_size=16, device=device)
    assert np.array_equal(qt.q, q)


def test_a_row_longer_than_one_binding_is_refused(device, monkeypatch):
    from vkcore.kernels import storage

    monkeypatch.setattr(storage, "binding_limit", lambda dev: 64)
    with pytest.raises(ValueError, match="one row of q stored needs 80 bytes"):
        QT.from_arrays(np.zeros((2, 65), np.int8), np.ones(2, np.float32), device=device)
    qt = QT.from_arrays(np.zeros((9, 64), np.int8), np.ones(9, np.float32), device=device)
    assert len(qt.chunks) == 9 and not qt.q.any()  # one 64-byte row a binding
