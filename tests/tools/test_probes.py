"""``vkcore bench --probes``: each probe measures both of its sides and says so in words."""

import math

from vkcore.tools import probes


def _positive(*values):
    return all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values)


def test_page_fault_probe_times_fresh_and_reused_fills():
    r = probes.page_faults(2, nbytes=4 << 20)
    assert r["bytes"] == 4 << 20
    assert _positive(r["fresh_ms"], r["reused_ms"])
    assert math.isclose(r["first_touch_ms"], r["fresh_ms"] - r["reused_ms"])
    assert r["minor_faults"] is None or r["minor_faults"] >= 0


def test_blas_spin_and_dequantize_probes_time_both_sides(device):
    spin = probes.blas_spin(device, 1, shape=(64, 256))
    assert spin["shape"] == [64, 256] and _positive(spin["after_blas_ms"], spin["after_rest_ms"])
    deq = probes.dequantize(device, 1, shape=(64, 256))
    assert _positive(deq["numpy_ms"], deq["vkcore_ms"])
    assert math.isclose(deq["ratio"], deq["numpy_ms"] / deq["vkcore_ms"])
    text = probes.format_probes([probes.page_faults(1, nbytes=1 << 20), spin, deq])
    assert "first touch costs" in text
    assert "right after numpy W @ x" in text
    assert "dequantize 64x256" in text


def test_softmax_pass_probe_times_every_pass_of_both_algorithms(device):
    r = probes.softmax_passes(device, 1, shape=(64, 1024))
    assert list(r["online"]) == ["statistics", "write"]
    assert list(r["safe"]) == ["max", "sum", "write"]
    assert _positive(*r["online"].values(), *r["safe"].values(), r["copy_ms"])
    text = probes.format_probes([r])
    assert "softmax online 64x1024, device ms per pass: statistics" in text
    assert "copy kernel" in text


def test_softmax_pass_probe_without_timestamps_says_na(device, monkeypatch):
    monkeypatch.setattr(device.submitter, "timestamps", False)
    r = probes.softmax_passes(device, 1, shape=(8, 256))
    assert "n/a" in probes.format_probes([r])


def test_bench_probes_command_prints_every_probe(monkeypatch, capsys):
    from vkcore.tools.cli import main

    page_faults, blas_spin = probes.page_faults, probes.blas_spin
    dequantize, softmax_passes = probes.dequantize, probes.softmax_passes
    topk_rows, lm_head_matvec = probes.topk_rows, probes.lm_head_matvec
    small = {
        "page_faults": lambda repeats: page_faults(repeats, nbytes=1 << 20),
        "blas_spin": lambda dev, repeats: blas_spin(dev, repeats, shape=(64, 256)),
        "dequantize": lambda dev, repeats: dequantize(dev, repeats, shape=(64, 256)),
        "softmax_passes": lambda dev, repeats: softmax_passes(dev, repeats, (8, 512)),
        "topk_rows": lambda dev, repeats: topk_rows(dev, repeats, (2, 1000)),
        "lm_head_matvec": lambda dev, repeats: lm_head_matvec(dev, repeats, (64, 256)),
    }
    for name, f in small.items():
        monkeypatch.setattr(probes, name, f)
    code = main(["bench", "--probes", "--repeats", "1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    for text in (
        "first touch costs",
        "right after numpy W @ x",
        "dequantize 64x256",
        "per pass",
        "topk k=40 ascending, 2x1000",
        "INT8 matvec 64x256 (the LM head)",
    ):
        assert text in out


def test_topk_and_lm_head_probes_time_what_they_name(device):
    from vkcore.kernels.sampling import topk_steps

    r = probes.topk_rows(device, 1, shape=(2, 1000))
    assert len(r["device_ms"]) == 3 * 4 * 2  # row orders x k x (topk, softmax_topk)
    assert _positive(*r["device_ms"].values(), r["sort_s"], r["numpy_argsort_s"])
    assert r["sort_k"] == topk_steps.select_k_max(device) + 1
    m = probes.lm_head_matvec(device, 1, shape=(64, 256))
    assert _positive(m["device_ms"], m["weight_gb_per_s"])
    assert math.isclose(m["weight_gb_per_s"], 64 * 256 / m["device_ms"] / 1e6)


def test_host_gap_probe_times_every_gap(device):
    r = probes.host_gap(device, 1, calls=5)
    costs = r["us_per_submission"]
    assert sorted(costs) == list(probes.HOST_GAPS_US)
    assert all(us > 0 for us in costs.values())
    line = probes.format_probes([r])
    assert all(f"{gap} us:" in line for gap in probes.HOST_GAPS_US)
