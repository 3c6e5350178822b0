"""Smoke tests of ``vkcore bench``: the JSON schema and the table, never timings."""

import json

import numpy as np
import pytest

from vkcore.tools import bench
from vkcore.tools.bench import run as bench_run
from vkcore.tools.cli import main

COMPARISON_KEYS = {
    "group",
    "title",
    "shape",
    "clock",
    "baseline",
    "candidate",
    "baseline_s",
    "candidate_s",
    "candidate_device_s",
    "min_bytes",
    "overhead",
    "ratio",
    "ratio_spread",
    "baseline_median_s",
    "candidate_median_s",
    "candidate_device_median_s",
    "bandwidth_bytes_per_s",
    "ratio_of_minimums",
}


@pytest.fixture(scope="module")
def quick_json(tmp_path_factory):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", "--quick", "--json", "--repeats", "1", "--no-progress"])
    assert code == 0
    return json.loads(out.getvalue())


def test_quick_json_has_every_comparison_and_sample(quick_json):
    env = quick_json["environment"]
    for key in (
        "date",
        "cpu_model",
        "cpu_count",
        "lp_num_threads",
        "device",
        "driver",
        "device_info",
    ):
        assert key in env
    assert quick_json["quick"] is True and quick_json["repeats"] == 1
    groups = {c["group"] for c in quick_json["comparisons"]}
    expected = {
        "online_vs_safe",
        "online_vs_safe_long",
        "softmax_vs_numpy_e2e",
        "softmax_vs_numpy_resident",
        "log_softmax_vs_numpy",
        "tiny_overhead",
        "softmax_topk_vs_numpy",
        "softmax_topk_vs_two_calls_resident",
        "sequence_vs_separate",
        "sequence_replay",
    }
    if quick_json["quant_kernels"]:
        expected |= {"int8_vs_fp32", "int8_vs_blas", "quantize_vs_numpy", "lm_head_step"}
    assert expected <= groups
    for c in quick_json["comparisons"]:
        assert set(c) >= COMPARISON_KEYS
        assert len(c["baseline_s"]) >= 1 and len(c["candidate_s"]) >= 1
        assert all(s > 0 for s in c["baseline_s"] + c["candidate_s"])
        assert c["ratio"] > 0
    assert quick_json["copy_bandwidth_median"] > 0
    assert quick_json["kernel_copy_bandwidth_median"] > 0


def test_a_failing_comparison_is_reported_and_the_rest_still_run(device, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("shader compile failed\nsecond line")

    monkeypatch.setattr(bench_run, "tiny_overhead", broken)
    monkeypatch.setattr(bench_run, "SOFTMAX_SHAPES_QUICK", [(2, 256)])
    monkeypatch.setattr(bench_run, "has_quant_kernels", lambda: False)
    monkeypatch.setattr(bench_run, "softmax_vs_numpy", lambda *a: iter(()))
    monkeypatch.setattr(bench_run.program_cases, "call_path_rows", lambda *a: iter(()))
    monkeypatch.setattr(bench_run.topk_cases, "softmax_topk_rows", lambda *a: iter(()))
    monkeypatch.setattr(bench_run.sequence_cases, "sequence_rows", lambda *a: iter(()))
    monkeypatch.setattr(bench_run.attention_cases, "attention_rows", lambda *a, **k: iter(()))
    result = bench.run_bench(device, quick=True, repeats=1, progress=False)
    assert result["errors"] == [
        {"step": "tiny softmax overhead", "error": "RuntimeError: shader compile failed"}
    ]
    assert [c["shape"] for c in result["comparisons"]] == [(2, 256)]
    assert "FAILED tiny softmax overhead" in bench.format_table(result)


def test_every_target_is_reported(quick_json):
    reported = {t["group"] for t in quick_json["targets"]}
    assert reported == set(bench.TARGETS)
    for t in quick_json["targets"]:
        if t["value"] is None:
            assert t["met"] is None and t["note"]
        else:
            assert t["met"] in (True, False)


def test_table_and_plot_render(quick_json, tmp_path):
    table = bench.format_table(quick_json)
    for t in bench.TARGETS.values():
        assert t[2] in table
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    bench.write_plot(quick_json, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ratio_direction_and_spread():
    c = bench.Comparison("g", "t", (1,), "wall", "b", "c", [2.0, 4.0, 2.0], [1.0, 1.0, 1.0])
    assert c.ratio == 2.0
    assert c.spread == (2.0, 4.0)
    over = bench.Comparison("g", "t", (1,), "wall", "floor", "call", [1.0], [3.0], overhead=True)
    assert over.ratio == 3.0


def test_numpy_baselines_compute_what_they_claim(rng):
    x = rng.standard_normal((3, 50)).astype(np.float32)
    np.testing.assert_allclose(
        bench.numpy_softmax(x), np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5
    )
    w = rng.standard_normal((4, 9)).astype(np.float32)
    q, s = bench.numpy_quantize(w)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    np.testing.assert_allclose(q * s[:, None], w, atol=float(s.max()) / 2 + 1e-7)


def test_bad_options_are_usage_errors(capsys):
    assert main(["bench", "--repeats", "0"]) == 2
    assert main(["bench", "--plot", "out.svg"]) == 2
    err = capsys.readouterr().err
    assert "--repeats" in err and "--plot" in err


@pytest.mark.parametrize(("repeats", "block"), [(4, 1), (5, 2), (6, 3), (3, 5)])
def test_side_by_side_runs_blocks_in_alternating_order(repeats, block):
    calls: list[str] = []
    base, cand, dev_s = bench.side_by_side(
        lambda: calls.append("b"), lambda: calls.append("c"), repeats, block=block
    )
    assert len(base) == len(cand) == repeats and dev_s == []
    timed = "".join(calls[2:])  # after one warm-up call of each
    assert calls[:2] == ["b", "c"] and timed.count("b") == timed.count("c") == repeats
    expected = []
    for i in range(-(-repeats // block)):
        size = min(block, repeats - i * block)
        first, second = ("b", "c") if i % 2 == 0 else ("c", "b")
        expected += [first * size, second * size]
    assert "".join(expected) == timed


def test_a_device_without_timestamps_prints_na_for_device_time_rows(device, monkeypatch):
    """timestampValidBits == 0 is a normal device: device-time rows are n/a, not a crash."""
    monkeypatch.setattr(device.submitter, "timestamps", False)
    monkeypatch.setattr(bench_run, "SOFTMAX_SHAPES_QUICK", [(4, 256)])
    monkeypatch.setattr(bench_run, "MATVEC_SHAPES_QUICK", [(64, 256)])
    result = bench.run_bench(device, quick=True, repeats=1, progress=False)
    assert result["errors"] == []
    rows = {c["group"]: c for c in result["comparisons"]}
    for group in ("online_vs_safe", "int8_vs_fp32"):
        assert rows[group]["ratio"] is None and rows[group]["candidate_s"] == []
    assert rows["softmax_vs_numpy_e2e"]["ratio"] > 0  # wall-clock rows still measured
    assert result["kernel_copy_bandwidth_median"] is None
    by_group = {t["group"]: t for t in result["targets"]}
    assert by_group["int8_vs_fp32"]["met"] is None
    assert "no timestamps" in by_group["int8_vs_fp32"]["note"]
    table = bench.format_table(result)
    assert "n/a" in table
    json.loads(bench.to_json(result))


def test_log_softmax_baseline_is_a_log_softmax(monkeypatch):
    """The baseline the bench times computes the same function (scipy or numpy fallback)."""
    import builtins

    from vkcore import reference

    x = np.random.default_rng(3).standard_normal((4, 300)).astype(np.float32) * 10
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    name, f = bench.numpy_log_softmax()
    assert name.startswith("numpy")
    np.testing.assert_allclose(f(x), reference.log_softmax(x), atol=2e-5, rtol=1e-6)


def test_decode_floor_is_the_cache_bytes_at_the_copy_kernels_bandwidth(monkeypatch):
    """The attention rows' floor: the decode cache's bytes over the copy kernel's median
    bandwidth; NaN (never a made-up figure) where the device gives no times."""
    from vkcore.tools.bench import attention_cases

    _, hkv, d, n = attention_cases.DECODE
    cache_bytes = 2 * hkv * n * d * 2  # k and v, two bytes per float16
    monkeypatch.setattr(attention_cases, "kernel_copy_bandwidth", lambda dev, r: [1e9, 4e9, 2e9])
    assert attention_cases.decode_floor(None, 3) == pytest.approx(cache_bytes / 2e9)
    monkeypatch.setattr(attention_cases, "kernel_copy_bandwidth", lambda dev, r: [])
    assert np.isnan(attention_cases.decode_floor(None, 3))
