"""``vkcore coldwarm``: fresh processes, isolated temp folders, JSON schema, words of the report."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from repo_paths import REPO

import vkcore
from vkcore.tools import coldwarm
from vkcore.tools.cli import main
from vkcore.tools.coldwarm import cases, harness
from vkcore.tools.coldwarm.report import cell


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short end-to-end run of the command, with a fake user home full of caches."""
    base = tmp_path_factory.mktemp("coldwarm")
    home, tmp = base / "home", base / "tmp"
    user = {
        "VKCORE_CACHE_DIR": home / ".cache" / "vkcore",
        "MESA_SHADER_CACHE_DIR": home / ".cache" / "mesa",
        "__GL_SHADER_DISK_CACHE_PATH": home / ".nv",
        "XDG_CACHE_HOME": home / ".cache",
    }
    for folder in user.values():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sentinel").write_text("the user's own cache")
    tmp.mkdir()
    env = {
        **os.environ,
        **{k: str(v) for k, v in user.items()},
        "HOME": str(home),
        "TMPDIR": str(tmp),
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    before = _snapshot(home)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vkcore",
            "coldwarm",
            "--json",
            "--kernels",
            "softmax-online",
            "--repeats",
            "1",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {
        "report": json.loads(proc.stdout),
        "home": home,
        "tmp": tmp,
        "before": before,
        "user": user,
    }


def test_json_has_every_stage_for_every_condition_with_median_and_spread(run):
    report = run["report"]
    assert report["schema"] == coldwarm.SCHEMA
    assert report["settings"] == {
        "kernels": ["softmax-online"],
        "conditions": list(coldwarm.CONDITIONS),
        "repeats": 1,
        "repeats_done": 1,
        "max_seconds": 100.0,
    }
    for scope in (report["summary"]["pooled"], report["summary"]["per_kernel"]["softmax-online"]):
        assert set(scope) == set(coldwarm.CONDITIONS)
        for cond in coldwarm.CONDITIONS:
            for stage in coldwarm.STAGES:
                s = scope[cond][stage]
                assert set(s) == {"median", "min", "max", "spread", "n"}
                assert s["n"] == 1 and s["min"] <= s["median"] <= s["max"] and s["spread"] >= 0
                assert s["median"] > 0, (cond, stage)
    assert set(report["ratios"]) == {"vkcore", "driver", "all"}
    assert set(report["ratios_per_kernel"]) == {"softmax-online"}
    for by_stage in report["ratios"].values():
        assert set(by_stage) == set(coldwarm.STAGES) and all(r > 0 for r in by_stage.values())
    env = report["environment"]
    for key in (
        "name",
        "driver_name",
        "driver_info",
        "driver_version",
        "mesa_version",
        "nvidia_version",
        "vkcore_version",
        "cpu_count",
        "python",
        "load_average",
    ):
        assert key in env
    assert len(report["samples"]) == 4 and len(report["findings"]) >= 5
    assert Path(report["shader_sources"]) == REPO / "shaders"


def test_every_sample_is_a_fresh_process(run):
    samples = run["report"]["samples"]
    pids = [s["pid"] for s in samples]
    assert len(set(pids)) == len(pids) and os.getpid() not in pids
    for s in samples:
        assert s["spirv_origins"] and "memory" not in s["spirv_origins"]
        assert s["stages"]["import"] > 0 and s["stages"]["device"] > 0


def test_conditions_get_the_caches_they_claim(run):
    by_cond = {s["condition"]: s for s in run["report"]["samples"]}
    cold, warm_vk, driver = by_cond["cold"], by_cond["vkcore"], by_cond["driver"]
    assert (
        cold["env"]["VKCORE_SPIRV_CACHE"] == "0"
        and cold["env"]["MESA_SHADER_CACHE_DISABLE"] == "true"
    )
    assert cold["env"]["__GL_SHADER_DISK_CACHE"] == "0"
    assert set(cold["spirv_origins"]) <= {"compiled", "shipped"}
    assert set(warm_vk["spirv_origins"]) <= {"cache", "shipped"}
    assert (
        warm_vk["env"]["VKCORE_PIPELINE_CACHE"] == "1"
        and warm_vk["env"]["MESA_SHADER_CACHE_DISABLE"] == "true"
    )
    assert (
        driver["env"]["MESA_SHADER_CACHE_DISABLE"] is None
        and driver["env"]["VKCORE_SPIRV_CACHE"] == "0"
    )
    primed = run["report"]["primed_cache_bytes"]
    assert primed["driver"]["driver"] > 0 and primed["driver"]["spirv"] == 0
    assert primed["vkcore"]["driver"] == 0
    loaded = warm_vk["pipeline_cache"]["loaded_bytes"]
    if loaded is not None:  # a pipeline cache that reports what it loaded
        assert loaded > 0 and cold["pipeline_cache"]["loaded_bytes"] == 0


def test_temp_folders_are_used_and_removed(run):
    report, tmp = run["report"], run["tmp"]
    root = Path(report["temp_root"])
    assert root.parent == tmp and root.name.startswith("vkcore-coldwarm-")
    assert report["temp_root_removed"] and not root.exists()
    assert list(tmp.iterdir()) == []  # nothing left behind, not even compiler temp files
    for s in report["samples"]:
        for var in (
            "VKCORE_CACHE_DIR",
            "MESA_SHADER_CACHE_DIR",
            "__GL_SHADER_DISK_CACHE_PATH",
            "XDG_CACHE_HOME",
            "VKCORE_SHADER_DIR",  # a copy: edits to the sources during a run change nothing
        ):
            assert Path(s["env"][var]).is_relative_to(root), (var, s["env"][var])
    cold_dirs = {
        s["env"]["VKCORE_CACHE_DIR"] for s in report["samples"] if s["condition"] == "cold"
    }
    warm_dirs = {
        s["env"]["VKCORE_CACHE_DIR"] for s in report["samples"] if s["condition"] != "cold"
    }
    assert cold_dirs.isdisjoint(warm_dirs) and len(warm_dirs) == 3


def test_user_cache_folders_are_untouched(run):
    assert _snapshot(run["home"]) == run["before"]
    for folder in run["user"].values():
        assert (folder / "sentinel").read_text() == "the user's own cache"


def test_child_env_replaces_every_cache_variable():
    user = {
        "VKCORE_CACHE_DIR": "/home/u/.cache/vkcore",
        "MESA_SHADER_CACHE_DIR": "/home/u/mesa",
        "MESA_SHADER_CACHE_DISABLE": "false",
        "MESA_GLSL_CACHE_DIR": "/home/u/glsl",
        "__GL_SHADER_DISK_CACHE_PATH": "/home/u/nv",
        "__GL_SHADER_DISK_CACHE": "1",
        "XDG_CACHE_HOME": "/home/u/.cache",
        "VKCORE_VALIDATION": "1",
        "VKCORE_DEVICE": "1",
        "PATH": "/usr/bin",
    }
    for cond in coldwarm.CONDITIONS.values():
        env = coldwarm.child_env(cond, "/t/vk", "/t/drv", "/t/xdg", base=user)
        assert not [k for k, v in env.items() if "/home/u" in v]
        assert (
            env["VKCORE_DEVICE"] == "1"
            and env["PATH"] == "/usr/bin"
            and env["VKCORE_VALIDATION"] == "0"
        )
        assert env["VKCORE_CACHE_DIR"] == "/t/vk" and env["MESA_SHADER_CACHE_DIR"] == "/t/drv"
        assert env["__GL_SHADER_DISK_CACHE_PATH"] == "/t/drv" and env["XDG_CACHE_HOME"] == "/t/xdg"
        assert (
            env["VKCORE_SPIRV_CACHE"]
            == env["VKCORE_PIPELINE_CACHE"]
            == ("1" if cond.vkcore_caches else "0")
        )
        assert ("MESA_SHADER_CACHE_DISABLE" in env) != cond.driver_cache
        assert env["__GL_SHADER_DISK_CACHE"] == ("1" if cond.driver_cache else "0")
    assert (
        coldwarm.child_env(
            coldwarm.CONDITIONS["cold"], "a", "b", "c", selector="nvidia", base=user
        )["VKCORE_DEVICE"]
        == "nvidia"
    )


def test_registry_includes_the_quantized_kernels_only_when_present(monkeypatch):
    base = set(cases.registry())
    assert {"softmax-online", "softmax-safe"} <= base
    for name in ("quantize", "dequantize", "matvec"):
        monkeypatch.delattr(vkcore, name, raising=False)
    assert set(cases.registry()) == {"softmax-online", "softmax-safe"}
    for name in ("quantize", "dequantize", "matvec"):
        monkeypatch.setattr(vkcore, name, lambda *a, **k: None, raising=False)
    assert set(cases.registry()) == {
        "softmax-online",
        "softmax-safe",
        "quantize",
        "dequantize",
        "matvec-float",
        "matvec-int8",
        "matvec-uint8",
    }


def test_every_kernel_case_runs_and_returns_host_data(device):
    for name, case in coldwarm.KERNELS.items():
        run_once = case(device)
        result = np.asarray(run_once())
        assert result.size > 0 and np.isfinite(result.astype(np.float64)).all(), name


def _fake_probe(condition, folders, kernels, selector, shader_dir=None):
    """A probe that takes no time: one second on the fake clock per process."""
    _fake_probe.now += 1.0
    stages = {stage: 0.001 for stage in coldwarm.STAGES}
    result = {
        "stages": stages,
        "pipelines": [],
        "first_dispatch_device_seconds": None,
        "second_dispatch_device_seconds": None,
    }
    data = {
        "pid": int(_fake_probe.now),
        "kernels": {k: result for k in kernels},
        "pipeline_cache": {},
        "close_seconds": 0.0,
        "env": {},
        "device": {"name": "fake", "driver_name": "fake", "driver_info": "", "driver_version": "0"},
    }
    return data, 1.0


def test_max_seconds_stops_before_a_round_that_would_end_too_late(monkeypatch):
    _fake_probe.now = 0.0
    monkeypatch.setattr(harness, "_run_probe", _fake_probe)
    monkeypatch.setattr(harness, "_clock", lambda: _fake_probe.now)
    # 3 priming processes (3 s), then rounds of 4 processes (4 s): after 5 rounds the
    # clock says 23 s and a sixth round would end at 27 s, past 25.
    report = coldwarm.measure(["softmax-online"], repeats=10, max_seconds=25)
    assert report["settings"]["repeats_done"] == 5 and len(report["samples"]) == 20
    assert "5 repetitions (of 10" in coldwarm.format_report(report)
    _fake_probe.now = 0.0
    report = coldwarm.measure(["softmax-online"], repeats=2, max_seconds=None)
    assert report["settings"]["repeats_done"] == 2
    _fake_probe.now = 0.0
    report = coldwarm.measure(["softmax-online"], repeats=3, max_seconds=0.5)
    assert report["settings"]["repeats_done"] == 1  # the first round always runs
    with pytest.raises(ValueError, match="max_seconds"):
        coldwarm.measure(max_seconds=-1)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="kernels: unknown 'nope'"):
        coldwarm.measure(kernels=["nope"])
    with pytest.raises(ValueError, match="conditions"):
        coldwarm.measure(conditions=[])
    with pytest.raises(ValueError, match="repeats"):
        coldwarm.measure(repeats=0)
    assert main(["coldwarm", "--kernels", "nope"]) == 2
    assert main(["coldwarm", "--repeats", "0"]) == 2
    assert main(["coldwarm", "--plot", "out.txt"]) == 2


def test_stats_median_and_spread():
    assert coldwarm.stats([3.0, 1.0, None, 2.0, 10.0]) == {
        "median": 2.5,
        "min": 1.0,
        "max": 10.0,
        "spread": 9.0,
        "n": 4,
    }
    assert coldwarm.stats([None])["n"] == 0
    assert cell(coldwarm.stats([0.003, 0.001, 0.002])) == "2.0 [1.0-3.0]"


# ------------------------------------------------------------------ findings on synthetic samples
COLD = {
    "import": 0.2,
    "device": 0.06,
    "spirv": 0.15,
    "module": 0.0002,
    "pipeline": 0.004,
    "first_dispatch": 0.14,
    "second_dispatch": 0.003,
    "first_result": 0.6,
}


def _report(
    pipeline_warm: float,
    hits: bool,
    loaded: int | None,
    name: str = "llvmpipe (LLVM 15.0.6, 256 bits)",
):
    warm = {
        "vkcore": {**COLD, "spirv": 0.01, "pipeline": pipeline_warm},
        "driver": {**COLD, "first_dispatch": 0.004},
        "all": {
            **COLD,
            "spirv": 0.01,
            "pipeline": pipeline_warm,
            "first_dispatch": 0.004,
            "first_result": 0.3,
        },
    }
    samples = [
        {
            "condition": "cold",
            "kernel": "k",
            "stages": COLD,
            "spirv_origins": ["compiled"],
            "cache_hits": [False],
            "pipeline_cache": {"loaded_bytes": 0},
        }
    ]
    for cond, stages in warm.items():
        samples.append(
            {
                "condition": cond,
                "kernel": "k",
                "stages": stages,
                "spirv_origins": ["cache"],
                "cache_hits": [hits and cond != "driver"],
                "pipeline_cache": {"loaded_bytes": loaded},
            }
        )
    conditions = list(coldwarm.CONDITIONS)
    summary = coldwarm.summarize(samples, conditions, ["k"])
    report = {
        "settings": {"kernels": ["k"], "conditions": conditions, "repeats": 1},
        "summary": summary,
        "ratios": coldwarm.ratios(summary),
        "samples": samples,
        "environment": {
            "name": name,
            "driver_name": "x",
            "driver_info": "",
            "vkcore_version": "0",
            "cpu_count": 2,
        },
        "primed_cache_bytes": {c: {"spirv": 1, "pipeline_cache": 688, "driver": 0} for c in warm},
        "elapsed_seconds": 1.0,
    }
    report["findings"] = coldwarm.findings(report)
    return report


def test_findings_say_why_a_header_only_cache_does_not_help():
    report = _report(pipeline_warm=0.004, hits=False, loaded=32)
    text = " ".join(report["findings"])
    assert "no speedup" in text and "does not serialize pipelines" in text and "32 bytes" in text
    assert "never reported an application-cache hit" in text
    assert "JIT" in text and "first dispatch costs 140.0 ms" in text
    assert "warm/cold = 0.029" in text  # the driver cache on the first dispatch
    assert "warm/cold = 0.067" in text  # the SPIR-V cache


def test_a_header_only_cache_is_never_credited_with_noise():
    text = " ".join(_report(pipeline_warm=0.0029, hits=False, loaded=32)["findings"])
    assert "warm/cold = 0.72, no speedup" in text and "run-to-run noise" in text
    assert "faster" not in text


def test_ratios_are_the_median_of_per_kernel_ratios():
    def sample(cond, kernel, pipeline):
        return {"condition": cond, "kernel": kernel, "stages": {**COLD, "pipeline": pipeline}}

    # Kernel a: 1 ms -> 0.5 ms (0.5); kernel b: 20 ms -> 20 ms (1.0); c: 10 -> 8 (0.8).
    samples = [
        sample("cold", "a", 0.001),
        sample("vkcore", "a", 0.0005),
        sample("cold", "b", 0.020),
        sample("vkcore", "b", 0.020),
        sample("cold", "c", 0.010),
        sample("vkcore", "c", 0.008),
    ]
    summary = coldwarm.summarize(samples, ["cold", "vkcore"], ["a", "b", "c"])
    assert coldwarm.ratios(summary)["vkcore"]["pipeline"] == pytest.approx(0.8)
    per_kernel = coldwarm.kernel_ratios(summary)
    assert per_kernel["a"]["vkcore"]["pipeline"] == pytest.approx(0.5)
    assert per_kernel["b"]["vkcore"]["first_dispatch"] == pytest.approx(1.0)


def test_warm_samples_that_compiled_their_spirv_are_flagged_first():
    report = _report(pipeline_warm=0.004, hits=False, loaded=32)
    assert not any(f.startswith("WARNING") for f in report["findings"])
    report["samples"][1]["spirv_origins"] = ["cache", "compiled"]
    findings = coldwarm.findings(report)
    assert findings[0].startswith("WARNING: samples with the SPIR-V cache warm compiled")
    assert "vkcore k" in findings[0]


def test_findings_report_the_ratio_when_the_pipeline_cache_helps():
    report = _report(pipeline_warm=0.0004, hits=True, loaded=50_000, name="NVIDIA H200")
    text = " ".join(report["findings"])
    assert "warm/cold = 0.10 (10.0x faster)" in text and "reported an application-cache hit" in text
    assert "no speedup" not in text and "JIT" not in text
    table = coldwarm.format_report(report)
    assert "| vkCreateComputePipelines | 4.0 | 0.4 | 4.0 | 0.4 | 0.10 | 1.00 | 0.10 |" in table


def test_plot_writes_an_image(tmp_path):
    path = tmp_path / "coldwarm.png"
    coldwarm.plot(_report(0.004, False, 32), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_what_to_install(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(RuntimeError, match=r"pip install 'vkcore\[plot\]'"):
        coldwarm.plot(_report(0.004, False, 32), str(tmp_path / "x.png"))
