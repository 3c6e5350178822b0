"""``vkcore bench --peers`` without the peers: vkcore's own child process, the script's
imports, the exact check, and the medians, ratios and table on made-up records (a peer
not installed, one that did not build, one that failed). ``make peers`` is never run."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from vkcore.tools.bench import peer_cases, peers, program_cases
from vkcore.tools.cli import main

NO_PEERS = "not installed: run make peers"


def record(package, us, ok=True, **extra):
    """A child's record as peer_cases.figures_of writes it."""
    doc = {"package": package, "ok": ok, "installed": True, "version": "1.0", "info": {}}
    if ok:
        doc["us"] = dict(zip(peer_cases.FIGURES, us, strict=True))
    doc.update(extra)
    return doc


VKCORE_INFO = {"device": "llvmpipe", "driver": "Mesa 22.3.6", "vulkan": "1.3.230"}


def rounds_of(**per_package):
    """Rounds from each package's list of records, one per run."""
    runs = max(len(docs) for docs in per_package.values())
    return [{p: docs[r] for p, docs in per_package.items() if r < len(docs)} for r in range(runs)]


def result_of(rounds, missing, runs=3):
    """What run_peers returns, around ``summarize`` of the records."""
    return {
        "date": "2026-12-03T15:00:00+00:00",
        "machine": {"nproc": 2, "cpu_model": "AMD EPYC", "load_average": [0.5, 0.4, 0.3]},
        "load_average_after": [0.6, 0.4, 0.3],
        "workload": {**peer_cases.WORKLOAD, "calls": 200, "warmup": 20, "runs": runs},
        **peers.summarize(rounds, missing),
        "runs": rounds,
    }


def table_row(table, figure):
    return next(line for line in table.splitlines() if line.startswith(peers.LABELS[figure]))


# --- vkcore's child ------------------------------------------------------------------


def test_the_vkcore_child_makes_correct_positive_figures():
    """A real child process: every figure measured, positive, checked exactly against
    numpy inside the child (ok is False on any difference)."""
    doc = peers.run_child(Path(sys.executable), "vkcore", calls=3, warmup=1)
    assert doc["ok"], doc
    assert set(doc["us"]) == set(peer_cases.FIGURES)
    assert all(v > 0 for v in doc["us"].values()), doc["us"]
    assert doc["info"]["device"] and doc["info"]["driver"] and doc["version"]


def test_without_the_peers_venv_the_vkcore_column_still_prints(tmp_path):
    rounds, missing = peers.measure_runs(tmp_path / "absent", runs=2, calls=2, warmup=1)
    assert missing == dict.fromkeys(peers.PEERS, NO_PEERS)
    assert [sorted(r) for r in rounds] == [["vkcore"], ["vkcore"]]
    result = result_of(rounds, missing, runs=2)
    vk = result["packages"]["vkcore"]
    assert vk["status"] == "ok" and vk["runs"] == 2
    table = peers.format_table(result)
    for figure in peer_cases.FIGURES:
        row = table_row(table, figure)
        assert row.count(NO_PEERS) == 3, row
        assert f"{vk['us'][figure]:,.1f}" in row
    assert vk["info"]["device"] in table


def test_the_cli_prints_the_table_and_writes_the_json(tmp_path, capsys, monkeypatch):
    real = peers.run_peers
    monkeypatch.setattr(peers, "run_peers", lambda *a, **k: real(*a, **k, calls=2, warmup=1))
    out = tmp_path / "peers.json"
    argv = ["bench", "--peers", "--repeats", "1", "--no-progress"]
    code = main([*argv, "--peers-venv", str(tmp_path / "absent"), "--peers-json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "vkcore and its peers" in printed and NO_PEERS in printed
    saved = json.loads(out.read_text())
    assert saved["packages"]["vkcore"]["status"] == "ok"
    assert saved["ratios"]["kp"] == dict.fromkeys(peer_cases.FIGURES)
    assert saved["machine"]["nproc"] >= 1 and saved["machine"]["cpu_model"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--peers", "--quick"], "--peers runs alone, not with --quick"),
        (["--peers", "--probes"], "--peers runs alone, not with --probes"),
        (["--peers-venv", "somewhere"], "--peers-venv is for --peers"),
        (["--peers-json", "x.json"], "--peers-json is for --peers"),
    ],
)
def test_peer_options_that_cannot_work_are_usage_errors(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


# --- the script ------------------------------------------------------------------------


def test_the_script_imports_only_the_standard_library_and_numpy():
    """It runs in the peers' environment, which has neither vkcore nor anything else:
    each package is imported inside its own case."""
    tree = ast.parse(Path(peer_cases.__file__).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert names - set(sys.stdlib_module_names) == {"numpy"}, names


def test_vkcore_and_kp_run_the_kernel_of_the_call_path_rows():
    assert peer_cases.GLSL == program_cases.TINY
    assert peer_cases.N == program_cases.N and peer_cases.CALLS == program_cases.CALLS


class NumpyCase(peer_cases.Case):
    """A stand-in package computing on the host; ``broken`` drops one output's work."""

    def __init__(self, broken=False):
        self.x, _ = peer_cases.inputs()
        self.outs = [np.zeros(peer_cases.N, np.float32) for _ in range(peer_cases.CALLS)]
        self.broken = broken
        self.info = {}

    def reset(self):
        for out in self.outs:
            out[:] = 0

    def numpy_call(self):
        return np.float32(peer_cases.A) * self.x

    def device_call(self):
        self.outs[0][:] = np.float32(peer_cases.A) * self.x

    def record16(self):
        for out in self.outs[: -1 if self.broken else None]:
            out[:] = np.float32(peer_cases.A) * self.x

    def replay16(self):
        return None

    def outputs(self, figure):
        return self.outs[:1] if figure == "device" else self.outs


def test_measure_checks_every_output_of_every_figure():
    figures = peer_cases.measure(NumpyCase(), calls=3, warmup=1)
    assert figures["replay16"] is None
    assert all(figures[f] > 0 for f in ("numpy", "device", "record16"))
    with pytest.raises(AssertionError, match=r"record16\[15\]: 256 of 256 values differ"):
        peer_cases.measure(NumpyCase(broken=True), calls=3, warmup=1)


def test_a_package_that_is_not_installed_is_a_record_not_a_crash(monkeypatch):
    def absent():
        raise ModuleNotFoundError("No module named 'kp'", name="kp")

    monkeypatch.setitem(peer_cases.CASES, "kp", absent)
    monkeypatch.setattr(peer_cases.importlib.metadata, "version", lambda name: "0.9.0")
    doc = peer_cases.figures_of("kp", calls=1, warmup=0)
    assert doc["ok"] is False and doc["installed"] is False
    assert peers.column([doc], None)["status"] == NO_PEERS


# --- medians, ratios and the table on made-up records --------------------------------


def test_medians_of_run_medians_and_the_ratios():
    vk = [
        record("vkcore", [40, 50, 600, 400], info=VKCORE_INFO),
        record("vkcore", [60, 45, 700, 350], info=VKCORE_INFO),
        record("vkcore", [50, 55, 650, 500], info=VKCORE_INFO),
    ]
    kp = [record("kp", [100, 100, 600, 800]), record("kp", [120, 90, 650, 900])]
    kp.append(record("kp", None, ok=False, error="AssertionError: numpy[0]: 3 of 256 differ"))
    wgpu = [record("wgpu", [150, 50, 325, None], info={"notes": "replay16 n/a: single-use"})] * 3
    vd = [record("vkdispatch", None, ok=False, error="RuntimeError: no device")] * 3
    result = result_of(rounds_of(vkcore=vk, kp=kp, wgpu=wgpu, vkdispatch=vd), {})
    cols, ratios = result["packages"], result["ratios"]
    assert cols["vkcore"]["us"] == {"numpy": 50, "device": 50, "record16": 650, "replay16": 400}
    assert cols["kp"]["us"] == {"numpy": 110, "device": 95, "record16": 625, "replay16": 850}
    assert cols["kp"]["runs"] == 2 and "1 of 3 runs failed" in cols["kp"]["notes"][0]
    assert ratios["kp"] == pytest.approx(
        {"numpy": 2.2, "device": 1.9, "record16": 625 / 650, "replay16": 2.125}
    )
    assert ratios["wgpu"]["replay16"] is None and ratios["wgpu"]["record16"] == 0.5
    assert cols["vkdispatch"]["status"] == "failed: RuntimeError: no device"
    assert ratios["vkdispatch"] == dict.fromkeys(peer_cases.FIGURES)

    table = peers.format_table(result)
    assert "110.0 (2.20x)" in table_row(table, "numpy")
    replay = table_row(table, "replay16")
    assert replay.split()[-1] == "n/a" and "failed" in replay and "850.0 (2.12x)" in replay
    assert "vkdispatch: failed: RuntimeError: no device" in table
    assert "wgpu: replay16 n/a: single-use" in table
    assert "kp: 1 of 3 runs failed: AssertionError" in table
    assert "nproc 2, AMD EPYC" in table and "2026-12-03" in table
    assert "llvmpipe, driver Mesa 22.3.6, Vulkan 1.3.230" in table


def test_a_peer_that_did_not_build_says_why(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "failed").mkdir()
    (venv / "failed" / "kp.txt").write_text("building kp 0.9.0 failed: CMake Error at x\n")
    missing = peers.unavailable(venv)
    assert missing == {"kp": "not installed: building kp 0.9.0 failed: CMake Error at x"}
    vk = [record("vkcore", [50, 50, 650, 400], info=VKCORE_INFO)]
    others = {p: [record(p, [100, 100, 100, 100])] for p in ("vkdispatch", "wgpu")}
    result = result_of(rounds_of(vkcore=vk, **others), missing, runs=1)
    table = peers.format_table(result)
    assert "kp: not installed: building kp 0.9.0 failed: CMake Error at x" in table
    row = table_row(table, "numpy")
    assert "not installed" in row and "100.0 (2.00x)" in row
    assert "median over 1 run of" in table


def test_a_failed_vkcore_child_leaves_no_ratio():
    vk = [record("vkcore", None, ok=False, error="exit status 1: Segmentation fault")]
    kp = [record("kp", [100, 100, 100, 100])]
    result = result_of(rounds_of(vkcore=vk, kp=kp), {"vkdispatch": NO_PEERS, "wgpu": NO_PEERS})
    assert result["ratios"]["kp"] == dict.fromkeys(peer_cases.FIGURES)
    table = peers.format_table(result)
    assert "unknown (the vkcore child failed)" in table
    assert "vkcore: failed: exit status 1: Segmentation fault" in table
