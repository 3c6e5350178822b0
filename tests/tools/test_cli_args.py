"""Every option of every subcommand, given a bad value, is exit status 2 with one line
naming the option, before any device is opened or any measurement starts; outputs are
written after the results are printed."""

from __future__ import annotations

import os

import numpy as np
import pytest

import vkcore.tools.cli.bench as cli_bench
import vkcore.tools.cli.demo as cli_demo
import vkcore.tools.cli.quant_report as cli_quant
import vkcore.tools.cli.tune as cli_tune
from vkcore.tools import bench, coldwarm
from vkcore.tools.cli import main

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


class NoDevice:
    """Stands in for Device in the CLI modules: creating one fails the test."""

    def __init__(self, *args, **kwargs):
        raise AssertionError("a device was created before the options were checked")


@pytest.fixture
def no_work(monkeypatch):
    for module in (cli_bench, cli_demo, cli_quant, cli_tune):
        monkeypatch.setattr(module, "Device", NoDevice)

    def measure(*args, **kwargs):
        raise AssertionError("coldwarm measured before the options were checked")

    monkeypatch.setattr(coldwarm, "measure", measure)


def bad_values(tmp_path):
    """(argv, the option the message must name) for every option that takes a value."""
    folder = tmp_path / "folder.png"
    folder.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("x")
    missing = str(tmp_path / "missing" / "x.png")
    cases = [
        (["demo", "--rows", "-3"], "--rows"),
        (["demo", "--rows", "0"], "--rows"),
        (["demo", "--rows", "three"], "--rows"),
        (["demo", "--cols", "0"], "--cols"),
        (["demo", "--cols", "-1"], "--cols"),
        (["demo", "--cols", "1.5"], "--cols"),
        (["quant-report", "--top", "-1"], "--top"),
        (["quant-report", "--rows", "0"], "--rows"),
        (["quant-report", "--rows", "-4"], "--rows"),
        (["quant-report", "--cols", "0"], "--cols"),
        (["quant-report", "--bits", "1"], "--bits"),
        (["quant-report", "--bits", "9"], "--bits"),
        (["quant-report", "--bits", "eight"], "--bits"),
        (["quant-report", "--seed", "-1"], "--seed"),
        (["quant-report", "--outlier", "nan"], "--outlier"),
        (["quant-report", "--outlier", "inf"], "--outlier"),
        (["quant-report", "--outlier", "big"], "--outlier"),
        (["quant-report", "--weights", str(tmp_path / "missing.npy")], "--weights"),
        (["quant-report", "--weights", str(tmp_path)], "--weights"),
        (["quant-report", "--weights", str(text)], "--weights"),
        (["quant-report", "--array", "w"], "--array"),
        (["bench", "--repeats", "0"], "--repeats"),
        (["bench", "--repeats", "-2"], "--repeats"),
        (["bench", "--plot", missing], "--plot"),
        (["bench", "--plot", str(text)], "--plot"),
        (["bench", "--plot", str(folder)], "--plot"),
        (["bench", "--peers", "--peers-json", str(text)], "--peers-json"),
        (["bench", "--peers", "--peers-json", missing.replace(".png", ".json")], "--peers-json"),
        (["bench", "--peers", "--peers-venv", str(text)], "--peers-venv"),
        (["coldwarm", "--repeats", "0"], "--repeats"),
        (["coldwarm", "--repeats", "x"], "--repeats"),
        (["coldwarm", "--max-seconds", "-1"], "--max-seconds"),
        (["coldwarm", "--max-seconds", "nan"], "--max-seconds"),
        (["coldwarm", "--plot", missing], "--plot"),
        (["coldwarm", "--plot", str(text)], "--plot"),
        (["coldwarm", "--plot", str(folder)], "--plot"),
        (["coldwarm", "--kernels", "no-such-kernel"], "--kernels"),
        (["coldwarm", "--conditions", "lukewarm"], "--conditions"),
        (["cache", "--dir", str(text), "ls"], "--dir"),
        (["cache", "--dir", str(text), "clear"], "--dir"),
        (["tune", "--repeats", "0"], "--repeats"),
        (["tune", "--repeats", "-5"], "--repeats"),
        (["--device", "", "info"], "selector"),
        (["--device", "-1", "info"], "negative"),
        (["--device", "99", "info"], "out of range"),
    ]
    if not ROOT:  # permissions do not stop root
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        unreadable = tmp_path / "secret.npy"
        np.save(unreadable, np.ones((2, 2), np.float32))
        unreadable.chmod(0)
        cases += [
            (["bench", "--plot", str(locked / "x.png")], "--plot"),
            (["coldwarm", "--plot", str(locked / "x.png")], "--plot"),
            (["quant-report", "--weights", str(unreadable)], "--weights"),
        ]
    return cases


def test_every_bad_option_is_status_2_before_any_work(tmp_path, capsys, no_work):
    failures = []
    for argv, option in bad_values(tmp_path):
        code = main(argv)
        out = capsys.readouterr()
        errors = [line for line in out.err.splitlines() if "error:" in line]
        if code != 2 or "Traceback" in out.err + out.out:
            failures.append(f"{argv}: status {code}, stderr {out.err!r}")
        elif len(errors) != 1 or option not in errors[0]:  # (argparse adds a usage first)
            failures.append(f"{argv}: not one error line naming {option}: {out.err!r}")
    assert not failures, "\n".join(failures)


def write_npz(tmp_path, name="w.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


def test_quant_report_weights_files(tmp_path, capsys, no_work):
    """Bad weight files are status 2 with the reason, before a device is opened."""
    w = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    two = write_npz(tmp_path, "two.npz", a=w, b=w)
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"PK\x03\x04 not really a zip file")
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    pickled = tmp_path / "obj.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases = [
        ([two], "pick one with --array"),
        ([two, "--array", "c"], "'c' is not in"),
        ([write_npz(tmp_path, "none.npz")], "holds 0 arrays"),
        ([write_npz(tmp_path, "vec.npz", v=w[0])], "2-D"),
        ([write_npz(tmp_path, "ints.npz", q=w.astype(np.int8))], "floats"),
        ([write_npz(tmp_path, "zero.npz", z=np.zeros((0, 4), np.float32))], "non-empty"),
        ([str(damaged)], "not a readable"),
        ([str(empty)], "not a readable"),
        ([str(pickled)], "not a readable"),
    ]
    npy = tmp_path / "w.npy"
    np.save(npy, w)
    cases.append(([str(npy), "--array", "a"], "--array is for .npz"))
    for extra, message in cases:
        code = main(["quant-report", "--weights", *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (extra, code, err)


def test_quant_report_reads_npz_and_top(tmp_path, capsys):
    w = np.random.default_rng(1).standard_normal((6, 32)).astype(np.float32)
    single = write_npz(tmp_path, "one.npz", weight=w)
    several = write_npz(tmp_path, "many.npz", weight=w, bias=w[:, 0])
    assert main(["quant-report", "--weights", single, "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "6 x 32 weights" in out and "the 2 rows closest" in out
    rows = [
        line for line in out.splitlines() if line.startswith("  ") and line.split()[0].isdigit()
    ]
    assert len(rows) == 2
    assert main(["quant-report", "--weights", several, "--array", "weight", "--top", "0"]) == 0
    out = capsys.readouterr().out
    assert "6 x 32 weights" in out and "rows closest" not in out
    assert "all worst-case bounds hold" in out
    assert main(["quant-report", "--rows", "3", "--cols", "8", "--top", "10"]) == 0
    assert "the 3 rows closest" in capsys.readouterr().out  # all rows, not rows - 1


def test_bench_prints_results_before_a_failing_plot(tmp_path, capsys, monkeypatch):
    class FakeDevice:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    def broken_plot(result, path):
        raise OSError(f"[Errno 28] No space left on device: {path!r}")

    monkeypatch.setattr(cli_bench, "Device", FakeDevice)
    monkeypatch.setattr(bench, "run_bench", lambda *a, **k: {"targets": [], "errors": []})
    monkeypatch.setattr(bench, "format_table", lambda result: "THE RESULTS TABLE")
    monkeypatch.setattr(bench, "write_plot", broken_plot)
    code = main(["bench", "--quick", "--no-progress", "--plot", str(tmp_path / "b.png")])
    out = capsys.readouterr()
    assert "THE RESULTS TABLE" in out.out
    assert code == 1 and "plot could not be written" in out.err and "Traceback" not in out.err


def test_coldwarm_prints_report_before_a_failing_plot(tmp_path, capsys, monkeypatch):
    def broken_plot(report, path):
        raise OSError("disk full")

    monkeypatch.setattr(coldwarm, "measure", lambda *a, **k: {"fake": True})
    monkeypatch.setattr(coldwarm, "format_report", lambda report: "THE COLDWARM REPORT")
    monkeypatch.setattr(coldwarm, "plot", broken_plot)
    code = main(["coldwarm", "--kernels", "softmax-online", "--plot", str(tmp_path / "c.png")])
    out = capsys.readouterr()
    assert "THE COLDWARM REPORT" in out.out
    assert code == 1 and "disk full" in out.err and "Traceback" not in out.err


@pytest.mark.parametrize("argv", [["cache", "ls", "--no-device"], ["info"]])
def test_a_reader_that_goes_away_is_not_an_error(tmp_path, argv):
    """`vkcore cache ls | head -1`: the pipe closes before vkcore writes; exit 0, quietly."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, VKCORE_CACHE_DIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vkcore", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "error" not in err.lower() and "Traceback" not in err
