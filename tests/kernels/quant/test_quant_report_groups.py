"""quant_error and `vkcore quant-report` per group, on grouped and packed tensors: the
measured errors against an independent per-group computation, the bounds s_g / 2 and
sum_g s_g / 2 ||x_g||_1 held (and reached, and failed when the codes do not fit w)."""

import json
import warnings

import numpy as np
import pytest

import vkcore
from vkcore.kernels.quant.report import format_report, ratio
from vkcore.tools.cli import main


def by_hand(w, qt, x):
    """Per group, column slices in float64: max |err|, RMS, and the per-row output sums."""
    m, n = qt.shape
    g = qt.group_cols
    q = qt.q.astype(np.float64)
    s, z = qt.scale.astype(np.float64), qt.zero_point.astype(np.float64)
    max_err, rms, bound = np.zeros((m, qt.groups)), np.zeros((m, qt.groups)), np.zeros(m)
    dy = np.zeros(m)
    for i in range(m):
        for k, c0 in enumerate(range(0, n, g)):
            cols = slice(c0, min(c0 + g, n))
            e = s[i, k] * (q[i, cols] - z[i, k]) - w[i, cols].astype(np.float64)
            max_err[i, k] = np.abs(e).max()
            rms[i, k] = np.sqrt(np.mean(e**2))
            bound[i] += s[i, k] / 2 * np.abs(x[cols].astype(np.float64)).sum()
            dy[i] += e @ x[cols].astype(np.float64)
    return max_err, rms, bound, np.abs(dy)


@pytest.mark.parametrize(
    ("bits", "symmetric", "group_size"),
    [(4, True, 32), (4, False, 7), (8, False, 128), (2, True, 1)],
)
def test_per_group_errors_and_bounds(device, rng, bits, symmetric, group_size):
    w = rng.standard_normal((5, 300)).astype(np.float32)
    w[:, 17] *= 50  # a loud column
    x = rng.standard_normal(300).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, group_size=group_size, device=device)
    e = vkcore.quant_error(w, qt, x)
    groups = -(-300 // group_size)
    assert e.group_size == group_size
    for field in (e.scale, e.max_err, e.bound_max, e.rms_err, e.typical_rms):
        assert field.shape == (5, groups)
    assert e.out_err.shape == e.bound_out.shape == e.typical_out.shape == (5,)
    max_err, rms, bound, dy = by_hand(w, qt, x)
    np.testing.assert_allclose(e.max_err, max_err, rtol=1e-12, atol=0)
    np.testing.assert_allclose(e.rms_err, rms, rtol=1e-12, atol=0)
    np.testing.assert_allclose(e.bound_out, bound, rtol=1e-12)
    np.testing.assert_allclose(e.out_err, dy, rtol=1e-9, atol=1e-12 * bound.max())
    assert np.array_equal(e.bound_max, qt.scale.astype(np.float64) / 2)
    assert e.holds()
    assert np.all(e.max_err <= e.bound_max * (1 + 2**-15))


def test_groups_bound_the_output_tighter_than_one_scale_per_row(device, rng):
    w = rng.standard_normal((8, 256)).astype(np.float32)
    w[:, 5] = 100  # a loud column: per channel, every row's scale grows with it
    x = rng.standard_normal(256).astype(np.float32)
    pc = vkcore.quant_error(w, vkcore.quantize(w, bits=4, device=device), x)
    g = vkcore.quant_error(w, vkcore.quantize(w, bits=4, group_size=32, device=device), x)
    assert np.all(g.bound_out < pc.bound_out / 4)
    # the loud group still carries its large scale: the measured error shrinks less
    assert np.sqrt(np.mean(g.out_err**2)) < np.sqrt(np.mean(pc.out_err**2)) / 2


def test_ties_reach_the_group_bound_exactly(device):
    """Symmetric 4-bit group of 8 with max 7: s = 1, and k + 1/2 lies exactly s / 2 away."""
    w = np.array([[7, 0.5, 1.5, -2.5, 3.5, 0, 0, 0, 14, 1, 2, 3, 4, 5, 6, 7]], np.float32)
    qt = vkcore.quantize(w, bits=4, group_size=8, device=device)
    assert qt.scale.tolist() == [[1.0, 2.0]]
    e = vkcore.quant_error(w, qt)
    assert e.max_err[0, 0] == 0.5 == e.bound_max[0, 0]
    assert e.max_err[0, 1] == 1.0 == e.bound_max[0, 1]  # 1, 3, 5, 7 are ties of s = 2
    assert e.holds()


def test_codes_that_do_not_fit_w_fail_the_bound(device, rng):
    w = rng.standard_normal((3, 64)).astype(np.float32)
    qt = vkcore.quantize(w, bits=4, symmetric=False, group_size=16, device=device)
    a = qt.to_arrays()
    a["zero_point"] = np.clip(a["zero_point"] + 2, 0, 15)  # shifted by two steps
    wrong = vkcore.QuantizedTensor.from_arrays(**a, device=device)
    assert not vkcore.quant_error(w, wrong).holds()


def test_cli_group_rows(capsys):
    args = ["quant-report", "--rows", "6", "--cols", "70", "--bits", "4", "--group-size", "32"]
    assert main([*args, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "group 32" in out and "groups of 32, the 2 closest to their bound" in out
    table = out[out.index("groups of 32") :].splitlines()[2:]
    cells = [line.split()[0].split("/") for line in table if line.startswith("  ")]
    cells = [c for c in cells if len(c) == 2 and c[0].isdigit()]
    assert len(cells) == 2 and all(int(row) < 6 and int(g) < 3 for row, g in cells)
    assert "all worst-case bounds hold" in out
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["holds"] is True
    group = data["group_32"]
    assert np.asarray(group["rows"]["scale"]).shape == (6, 3)
    assert len(group["rows"]["out_err"]) == 6
    assert group["worst"]["max_err/bound_max"] <= 1 + 2**-15
    assert main([*args[:-2], "--group-size", "0", "--json"]) == 0
    assert not any(k.startswith("group") for k in json.loads(capsys.readouterr().out))
    assert main([*args[:-2], "--group-size", "-1"]) == 2


def test_quant_error_with_negative_and_zero_scales(device, rng):
    """The bounds use |s|; a zero scale bounds its group by 0: reproduced exactly it holds
    (ratio 0, no NaN or warning), anything else fails (ratio inf)."""
    q = rng.integers(0, 16, (2, 64)).astype(np.uint8)
    s = np.array([[-0.25, 0.0], [0.5, -0.0]], np.float32)
    z = np.full((2, 2), 8, np.int32)
    qt = vkcore.QuantizedTensor.from_arrays(q, s, z, bits=4, group_size=32, device=device)
    w = vkcore.dequantize(qt)
    x = rng.standard_normal(64).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = vkcore.quant_error(w, qt, x)
        assert np.array_equal(e.bound_max, np.abs(s.astype(np.float64)) / 2)
        assert np.array_equal(e.scale, s) and e.holds()
        assert "nan" not in format_report("zero scales", e)
        assert np.array_equal(ratio(e.max_err, e.bound_max), np.zeros((2, 2)))
        off = w.copy()
        off[0, 40] = 1e-3  # in the s = 0 group: not reproduced
        bad = vkcore.quant_error(off, qt)
        assert not bad.holds() and ratio(bad.max_err, bad.bound_max)[0, 1] == np.inf


def test_cli_damaged_weights_zip_is_an_argument_error(tmp_path, capsys):
    """A zip whose central directory names an unsupported compression method (zipfile:
    NotImplementedError) is exit status 2 with the file named, no traceback."""
    path = tmp_path / "w.npz"
    np.savez(path, w=np.ones((2, 8), np.float32))
    raw = bytearray(path.read_bytes())
    at = raw.find(b"PK\x01\x02")
    raw[at + 10 : at + 12] = (1).to_bytes(2, "little")  # compression method 1 (shrink)
    path.write_bytes(bytes(raw))
    assert main(["quant-report", "--weights", str(path)]) == 2
    err = capsys.readouterr().err
    assert "w.npz" in err and "not a readable" in err and "Traceback" not in err
