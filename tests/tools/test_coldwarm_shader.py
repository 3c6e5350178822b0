"""``vkcore coldwarm --shader``: a user's compute shader measured like the built-in kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from repo_paths import REPO

import vkcore
from vkcore.tools import coldwarm
from vkcore.tools.cli import main
from vkcore.tools.coldwarm.shader import ShaderCase

BLUR = REPO / "examples" / "gaussian_blur.comp"
DEFINES = ["--define", "WIDTH=32", "--define", "HEIGHT=16", "--define", "RADIUS=2"]


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "vkcore", "coldwarm", "--shader", str(BLUR), *DEFINES]
    cmd += ["--elements", "512", "--repeats", "1", "--json"]
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_shader_is_measured_in_every_condition_with_every_stage(report):
    assert report["settings"]["kernels"] == ["shader:gaussian_blur.comp"]
    samples = report["samples"]
    assert {s["condition"] for s in samples} == set(coldwarm.CONDITIONS)
    for s in samples:
        assert s["kernel"] == "shader:gaussian_blur.comp"
        assert s["pipelines"] == [str(BLUR)]  # one pipeline: the user's program
        for stage in coldwarm.STAGES:
            assert s["stages"][stage] is not None and s["stages"][stage] >= 0, stage
    origins = {s["condition"]: s["spirv_origins"] for s in samples}
    assert origins["cold"] == ["compiled"] and origins["vkcore"] == ["cache"]
    assert origins["driver"] == ["compiled"] and origins["all"] == ["cache"]
    assert report["findings"]


def test_the_shader_case_round_trips_through_the_probe_argument():
    case = ShaderCase(str(BLUR), defines={"WIDTH": 8, "HEIGHT": 8}, elements=64, push={})
    back = ShaderCase.from_arg(case.to_arg())
    assert back.path == str(BLUR.resolve()) and dict(back.defines) == {"WIDTH": 8, "HEIGHT": 8}
    assert back.elements == 64 and back.name == "shader:gaussian_blur.comp"


def test_the_probe_runs_the_case_on_a_device(device):
    case = ShaderCase(str(BLUR), defines={"WIDTH": 8, "HEIGHT": 8, "RADIUS": 1}, elements=64)
    run = case.prepare(device)
    out = run()
    assert out is not None and out.nbytes == 64 * 4  # the written buffer, read back
    assert run() is not None  # the second call reuses the program


def test_errors_before_any_probe_starts(tmp_path):
    bad = tmp_path / "bad.comp"
    bad.write_text("#version 450\nlayout(local_size_x=1) in;\nvoid main() { oops; }\n")
    with pytest.raises(vkcore.ShaderCompileError, match="bad.comp:3"):
        coldwarm.measure([], repeats=1, shader=ShaderCase(str(bad)))
    with pytest.raises(ValueError, match="no push constant 'nope'"):
        coldwarm.measure([], repeats=1, shader=ShaderCase(str(BLUR), push={"nope": 1}))
    with pytest.raises(ValueError, match="no shader file"):
        ShaderCase(str(tmp_path / "missing.comp"))
    with pytest.raises(ValueError, match="elements must be positive"):
        ShaderCase(str(BLUR), elements=0)
    assert main(["coldwarm", "--define", "A=1"]) == 2  # --define needs --shader
    assert main(["coldwarm", "--shader", str(BLUR), "--define", "1A=2"]) == 2
    assert main(["coldwarm", "--shader", str(tmp_path / "missing.comp")]) == 2
