"""vkcore tune: the stored choices are keyed like the pipeline cache and used by the kernels
(softmax workgroup, matvec and quantize rows), and every value it may store is correct."""

import json
import logging

import numpy as np
import pytest
from checks import assert_every_matvec_mode

import vkcore
from vkcore import reference
from vkcore.kernels import programs, tuning
from vkcore.kernels.matvec import program as mv
from vkcore.kernels.quant import launch
from vkcore.kernels.softmax import stages as sm
from vkcore.tools import tuner


@pytest.fixture
def clean(device):
    tuning.reset(device)
    yield
    tuning.reset(device)


def test_tune_stores_the_fastest_candidate_and_softmax_uses_it(device, clean, rng):
    record = tuner.tune(device, shape=(16, 1024), rows_shape=(64, 256), repeats=1)
    path = tuning.tune_path(device)
    assert path.name.endswith(tuning.SUFFIX)
    assert path.parent == device.pipeline_cache.folder or device.pipeline_cache.folder is None
    stored = json.loads(path.read_text())
    assert stored == record
    assert record["clock"] == "device"  # lavapipe's queue has timestamps
    times = {int(k): v for k, v in record["measured"]["softmax_workgroup"]["total_seconds"].items()}
    assert set(times) == set(tuning.candidates(device))
    best = record["choices"]["softmax_workgroup"]
    assert times[best] == min(times.values())
    assert sm.workgroup_size(device) == best
    x = rng.standard_normal((5, 999)).astype(np.float32)
    np.testing.assert_allclose(
        vkcore.softmax(x, device=device), vkcore.reference.softmax(x), atol=1e-6
    )


def test_tune_chooses_every_rows_parameter_and_the_kernels_use_it(device, clean):
    record = tuner.tune(device, shape=(16, 1024), rows_shape=(64, 256), repeats=1)
    assert set(record["choices"]) == set(tuning.PARAMETERS)
    for name, values in tuning.ROW_CANDIDATES.items():
        measured = record["measured"][name]
        times = {int(k): v for k, v in measured["total_seconds"].items()}
        assert set(times) == set(values)
        assert all(t > 0 for t in times.values()), name
        assert times[record["choices"][name]] == min(times.values())
        for value in values:  # the total is the sum over the paths the value steers
            parts = [t[str(value)] for t in measured["median_seconds"].values()]
            assert times[value] == pytest.approx(sum(parts), rel=1e-12)
    assert mv.rows_per_workgroup(device, 0) == record["choices"]["matvec_rows"]
    assert mv.rows_per_workgroup(device, mv.MODE_F32) == record["choices"]["matvec_f32_rows"]
    assert launch.quant_rows(device) == record["choices"]["quant_rows"]


@pytest.mark.parametrize("value", tuning.ROW_CANDIDATES["matvec_rows"])
def test_any_stored_matvec_rows_gives_correct_results(device, clean, rng, value):
    write_choices(device, matvec_rows=value, matvec_f32_rows=min(value, 16))
    m, n = 37, 100  # rows not a multiple of any candidate: the last workgroup is partial
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    assert_every_matvec_mode(device, w, x)  # exact modes bit for bit
    assert value in specialized_rows(device, "matvec.comp")
    assert min(value, 16) in specialized_rows(device, "matvec.comp")


# The kernel paths each choice steers, as (public function, mode) pairs.
PATHS = {
    "softmax_workgroup": {("softmax", "online"), ("softmax", "safe"), ("log_softmax", "online")},
    "matvec_rows": {("matvec", "float"), ("matvec", "int8"), ("matvec", "uint8")},
    "matvec_f32_rows": {("matvec_f32", "float32")},
    "quant_rows": {("quantize", "asymmetric"), ("dequantize", "")},
    "matvec_dot": {("matvec", "int8"), ("matvec", "uint8")},
}


PATH_NAMES = {
    "softmax_workgroup": {"online", "safe", "log_softmax"},
    "matvec_rows": {"float", "int8", "uint8"},
    "matvec_f32_rows": {"float32"},
    "quant_rows": {"quantize", "dequantize"},
    "matvec_dot": {"int8", "uint8"},
}


def _counting(monkeypatch, device, seen):
    """Wrap the public kernels so every call records (kernel, mode, the tuned values)."""

    def wrap(name, mode_of):
        original = getattr(vkcore, name)

        def call(*args, **kwargs):
            values = tuple(tuning.choice(device, p) for p in tuning.PARAMETERS)
            seen.append((name, mode_of(kwargs), values))
            return original(*args, **kwargs)

        monkeypatch.setattr(vkcore, name, call)

    wrap("softmax", lambda kw: kw.get("algorithm", "online"))
    wrap("log_softmax", lambda kw: kw.get("algorithm", "online"))
    wrap("matvec", lambda kw: kw.get("activations", "float"))
    wrap("matvec_f32", lambda kw: "float32")
    wrap("quantize", lambda kw: "symmetric" if kw.get("symmetric", True) else "asymmetric")
    wrap("dequantize", lambda kw: "")


def test_tune_times_every_path_each_choice_steers_with_every_candidate(device, clean, monkeypatch):
    """The quantize rows also drive dequantize, the INT8 matvec rows all three activation
    modes, the softmax workgroup both algorithms and log_softmax: each candidate runs on each."""
    seen = []
    _counting(monkeypatch, device, seen)
    repeats = 2
    record = tuner.tune(device, shape=(8, 512), rows_shape=(32, 128), repeats=repeats)
    for index, name in enumerate(tuning.PARAMETERS):
        measured = record["measured"][name]
        assert set(measured["median_seconds"]) == PATH_NAMES[name]
        for kernel, mode in PATHS[name]:
            for value in tuning.values(device, name):
                runs = [s for s in seen if s[:2] == (kernel, mode) and s[2][index] == value]
                assert len(runs) >= repeats + 1, (name, kernel, mode, value)  # warm-up + timed


def test_tune_on_a_device_without_timestamps_measures_wall_time(device, clean, capsys):
    """timestampValidBits == 0 (simulated: the submitter then records no timestamps and
    last_device_seconds is None): wall time, said so, and only allowed values stored."""
    device.submitter.timestamps = False
    try:
        x = np.ones((2, 64), np.float32)
        vkcore.softmax(x, device=device)
        assert device.submitter.last_device_seconds is None
        assert tuner.clock(device) == "wall"
        record = tuner.tune(device, shape=(8, 512), rows_shape=(32, 128), repeats=1)
    finally:
        device.submitter.timestamps = True
    assert record["clock"] == "wall"
    stored = json.loads(tuning.tune_path(device).read_text())
    assert stored == record and stored["clock"] == "wall"
    for name in tuning.PARAMETERS:
        assert record["choices"][name] in tuning.allowed(device, name)
        totals = record["measured"][name]["total_seconds"]
        assert all(t > 0 for t in totals.values()), name  # host time is never zero
    assert tuning.load(device) == record["choices"]


def test_the_cli_says_which_clock_it_used(device, clean, monkeypatch, capsys):
    from vkcore.tools.cli import tune as cli_tune

    records = {"device": None, "wall": None}
    for clock in records:
        body = {
            "clock": clock,
            "choices": {"quant_rows": 4},
            "measured": {
                "quant_rows": {
                    "shape": [32, 128],
                    "repeats": 1,
                    "median_seconds": {"quantize": {"4": 0.002}, "dequantize": {"4": 0.001}},
                    "total_seconds": {"4": 0.003},
                }
            },
        }
        monkeypatch.setattr(tuner, "tune", lambda dev, repeats, body=body: body)
        args = type("A", (), {"device": None, "reset": False, "show": False, "json": False})
        args.repeats = 1
        assert cli_tune.run(args) == 0
        out = capsys.readouterr().out
        assert ("wall time" in out) == (clock == "wall"), out
        assert ("timestampValidBits = 0" in out) == (clock == "wall"), out
        assert "3.00 ms = 2.00 + 1.00" in out


def test_device_time_sums_every_submission_of_a_call(device):
    """A call that submits twice (e.g. one submission per row chunk) counts both."""
    x = vkcore.asarray(np.ones((4, 256), np.float32), device=device)

    def twice():
        vkcore.softmax(x).buffer.destroy()
        vkcore.softmax(x).buffer.destroy()

    with tuner.timing.device_seconds(device) as spent:
        twice()
    assert len(spent) == 2 and all(t > 0 for t in spent)
    twice()
    assert len(spent) == 2, "nothing is counted after the block"
    assert not device.timed, "calls are untimed again after the block"
    x.buffer.destroy()


def test_device_time_counts_exact_repeats(device, rng):
    """Kept calls (vkcore.compute.repeat) resubmit without a new recording: the tuner
    still times each one, and with timestamps."""
    x = rng.standard_normal((4, 256)).astype(np.float32)
    with tuner.timing.device_seconds(device) as spent:
        for _ in range(6):
            vkcore.softmax(x, device=device)
    assert len(spent) == 6 and all(t > 0 for t in spent)


def test_best_chooses_the_smallest_sum_over_paths():
    per_path = {"a": {1: 3.0, 2: 1.0, 4: 2.0}, "b": {1: 0.5, 2: 3.0, 4: 1.0}}
    value, totals = tuner.best(per_path)
    assert totals == {1: 3.5, 2: 4.0, 4: 3.0} and value == 4
    assert tuner.best({"a": {8: 1.0, 16: 1.0}})[0] == 8  # a tie: the first candidate


def specialized_rows(device, shader):
    """Values of the ROWS specialization constant among the device's built-in programs of
    ``shader`` (keyed by shader, defines, workgroup, spec constants, texel formats)."""
    return {dict(key[3]).get("ROWS") for key in programs.made(device) if key[0] == shader}


@pytest.mark.parametrize("value", tuning.ROW_CANDIDATES["quant_rows"])
def test_any_stored_quant_rows_gives_correct_results(device, clean, rng, value):
    write_choices(device, quant_rows=value)
    assert launch.quant_rows(device) == value
    w = rng.standard_normal((37, 99)).astype(np.float32)  # odd rows, odd columns
    for symmetric, per_channel in ((False, True), (True, False), (False, False)):
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        q, s, z = reference.quantize(w, 8, symmetric, per_channel)
        assert np.array_equal(qt.q, q)
        assert np.array_equal(vkcore.dequantize(qt), reference.dequantize(q, s, z))
        qt.release()
    assert value in specialized_rows(device, "quantize.comp")
    assert value in specialized_rows(device, "dequantize.comp")


def test_any_valid_stored_workgroup_gives_correct_softmax(device, clean, rng):
    x = rng.standard_normal((3, 5000)).astype(np.float32)
    for wg in tuning.candidates(device):
        write_choice(device, wg)
        assert sm.workgroup_size(device) == wg
        for alg in ("online", "safe"):
            y = vkcore.softmax(x, algorithm=alg, device=device)
            np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6)


@pytest.mark.parametrize(
    "choices",
    [
        {"softmax_workgroup": 0},
        {"softmax_workgroup": 12},  # not a candidate (not a multiple of the subgroup size)
        {"softmax_workgroup": 1000000},
        {"softmax_workgroup": 8.0},
        {"matvec_rows": 3},
        {"matvec_rows": "16"},
        {"matvec_f32_rows": 64},
        {"quant_rows": True},
        {"quant_rows": [4]},
        {"quant_rows": None},
    ],
)
def test_values_tune_never_stores_are_ignored(device, clean, choices, caplog):
    default = sm.workgroup_size(device)
    write_choices(device, **choices)
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        assert sm.workgroup_size(device) == default
        assert mv.rows_per_workgroup(device, 0) == mv.ROWS
        assert mv.rows_per_workgroup(device, mv.MODE_F32) == mv.ROWS_F32
        assert launch.quant_rows(device) == launch.QUANT_ROWS
    assert caplog.text.count("WARNING") == 1 and "ignoring" in caplog.text


def test_old_format_and_unsigned_files_are_ignored(device, clean, caplog):
    wg = tuning.candidates(device)[-1]
    path = tuning.tune_path(device)
    for content in (
        {"format": 1, "choices": {"softmax_workgroup": wg}},
        {"format": 2, "key": tuning.key_of(device), "choices": {"softmax_workgroup": wg}},
    ):
        path.write_text(json.dumps(content))
        tuning.forget(device)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="vkcore"):
            assert tuning.choice(device, "softmax_workgroup") is None
        assert caplog.text.count("WARNING") == 1


def test_choice_names_are_checked(device):
    with pytest.raises(ValueError, match="name must be one of"):
        tuning.choice(device, "rows_per_group")


def write_choice(device, wg):
    write_choices(device, softmax_workgroup=wg)


def write_choices(device, **choices):
    """A tune file as ``vkcore tune`` writes it (format, key, digest) with ``choices``."""
    path = tuning.tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"format": tuning.FORMAT, "key": tuning.key_of(device), "choices": choices}
    path.write_text(json.dumps(tuning.encode(record)))
    tuning.forget(device)


def test_a_stored_dot_choice_steers_the_integer_matvec(device, clean, rng):
    """matvec_dot = 1 (stored by tune where the device has the instruction but does not
    mark it accelerated) runs the DOT variant, bit for bit; 0 or no file keeps bitfield."""
    from vkcore.kernels.matvec import groups as mg

    assert device.info.integer_dot_product and not device.info.integer_dot_product_8bit_accelerated
    w = (rng.standard_normal((37, 100)) * 0.1).astype(np.float32)
    x = rng.standard_normal(100).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    try:
        assert not mg.use_dot(device, qt, "int8")
        write_choices(device, matvec_dot=1)
        assert mg.use_dot(device, qt, "int8") and mg.use_dot(device, qt, "uint8")
        assert not mg.use_dot(device, qt, "float")
        assert_every_matvec_mode(device, w, x)  # exact modes bit for bit on the DOT path
        assert any("DOT=1" in p["name"] for p in device.pipeline_stats())
        write_choices(device, matvec_dot=0)
        assert not mg.use_dot(device, qt, "int8")
    finally:
        qt.release()
    assert tuning.allowed(device, "matvec_dot") == {0, 1}
