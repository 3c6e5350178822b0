"""Users' SPIR-V is validated before any reaches the driver (docs/programs.md#validation):
spirv-val where installed, else vkcore's structural checks; damaged modules are refused
with vkcore.InvalidSpirvError and a fuzzed module never crashes the process.

Damaged modules run in forked children of tests/support/spirv_fuzz_worker.py (several
crashed lavapipe), with each validator and with and without the validation layer.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import devices
import numpy as np
import pytest
from checks import python_path_with
from repo_paths import SUPPORT
from spirv_fuzz_worker import RESULT

import vkcore
from vkcore import spirv
from vkcore.spirv import structure, validate

WORKER = SUPPORT / "spirv_fuzz_worker.py"
# Mutations per child run of the fuzz test; VKCORE_SPIRV_FUZZ raises it (e.g. 2000).
FUZZ = int(os.environ.get("VKCORE_SPIRV_FUZZ", "10"))
SPIRV_VAL = validate.validator() is not None
VALIDATORS = [
    pytest.param(
        "spirv-val", marks=pytest.mark.skipif(not SPIRV_VAL, reason="spirv-val not installed")
    ),
    "structural",
]


def _worker(args: list[str], validator: str, layer: str) -> list[str]:
    root = str(Path(vkcore.__file__).resolve().parents[1])
    env = dict(os.environ, VKCORE_VALIDATION=layer, PYTHONPATH=python_path_with(root))
    env["VKCORE_SPIRV_VAL"] = "1" if validator == "spirv-val" else "0"
    out = subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=WORKER.parent,
    )
    text = out.stdout + out.stderr[-3000:]
    assert out.returncode == 0, f"exit status {out.returncode}\n{text}"
    lines = out.stdout.strip().splitlines()
    assert lines and lines[-1] == "OK", f"a child died of a signal:\n{text}"
    return [line[len(RESULT) :] for line in lines if line.startswith(RESULT)]


@pytest.mark.parametrize("validator", VALIDATORS)
def test_damaged_modules_are_refused_before_the_driver(validator):
    lines = _worker(["examples"], validator, "0")  # (the fuzz test runs both layers)
    outcomes = {line.split()[0]: line.split(" ", 2)[2] for line in lines}
    want = "refused spirv-val" if validator == "spirv-val" else "refused vkcore's"
    assert len(outcomes) == 16
    wrong = {name: got for name, got in outcomes.items() if got != want}
    assert not wrong, f"not refused by {validator}: {wrong}"


@pytest.mark.parametrize("layer", ["1", "0"], ids=["validated", "plain"])
@pytest.mark.parametrize("validator", VALIDATORS)
def test_fuzzed_modules_run_or_raise_and_never_crash(validator, layer):
    first = {"spirv-val": 0, "structural": 10_000}[validator] + (0 if layer == "1" else 5_000)
    lines = _worker(["fuzz", str(first), str(FUZZ)], validator, layer)
    assert len(lines) == FUZZ
    for line in lines:
        outcome = line.split()[2]
        assert outcome in ("ran", "refused", "raised"), line
        if outcome == "raised":  # a clear Python error, never one from a dying binding
            assert "Error" in line.split()[3], line


# ------------------------------------------------------------------ in this process
GOOD = """#version 450
layout(local_size_x = 4) in;
layout(std430, binding = 0) buffer Y { uint y[]; };
void main() { y[gl_GlobalInvocationID.x] += 1u; }
"""


@pytest.fixture(params=["spirv-val", "structural"])
def which(request, monkeypatch):
    if request.param == "spirv-val" and not SPIRV_VAL:
        pytest.skip("spirv-val not installed")
    monkeypatch.setenv("VKCORE_SPIRV_VAL", "1" if request.param == "spirv-val" else "0")
    return request.param


def test_a_valid_module_runs_and_a_damaged_one_says_why(device, which):
    code = spirv.compile_source(GOOD).code
    y = np.arange(4, dtype=np.uint32)
    vkcore.Program(spirv=code, device=device)(y)
    assert y.tolist() == [1, 2, 3, 4]
    with pytest.raises(vkcore.InvalidSpirvError) as caught:
        vkcore.Program(spirv=code[:-4], device=device)
    err = caught.value
    assert isinstance(err, ValueError)
    assert err.validator == ("spirv-val" if which == "spirv-val" else validate.STRUCTURAL)
    assert err.messages and all(m for m in err.messages)
    assert str(err).startswith(f"spirv: {err.validator} rejected the SPIR-V module")


def test_without_spirv_val_on_path_the_structural_checks_decide(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no spirv-val
    assert validate.validator() is None
    with pytest.raises(vkcore.InvalidSpirvError, match="vkcore's structural checks"):
        validate.check(b"\x03\x02\x23\x07" + bytes(16), 1 << 22 | 3 << 12)


def test_a_validated_module_is_validated_once(monkeypatch, which):
    code = spirv.compile_source(GOOD.replace("1u", "7u")).code
    runs = []
    real_run, real_check = subprocess.run, structure.check
    monkeypatch.setattr(
        validate.subprocess, "run", lambda *a, **k: runs.append(1) or real_run(*a, **k)
    )
    monkeypatch.setattr(structure, "check", lambda *a: runs.append(1) or real_check(*a))
    api = 1 << 22 | 3 << 12
    for _ in range(3):
        assert validate.check(code, api) == (
            "spirv-val" if which == "spirv-val" else validate.STRUCTURAL
        )
    assert len(runs) == 1


def test_the_kernels_modules_pass_the_structural_checks():
    """The checks refuse nothing valid that vkcore's own shaders use (every 50th variant)."""
    variants = spirv.variants()[::50]
    assert len(variants) >= 8
    for shader, defines in variants:
        structure.check(spirv.get(shader, defines).code)


@pytest.mark.parametrize(
    ("version", "env", "minor"),
    [("1.0.0", "vulkan1.0", 0), ("1.1.170", "vulkan1.1", 3), ("1.2.296", "vulkan1.2", 5)]
    + [("1.3.224", "vulkan1.3", 6), ("1.4.318", "vulkan1.3", 6)],
)
def test_the_target_follows_the_devices_vulkan_version(version, env, minor):
    major, mid, patch = (int(p) for p in version.split("."))
    api = major << 22 | mid << 12 | patch
    assert (validate.target_env(api), validate.max_spirv_minor(api)) == (env, minor)


@pytest.mark.parametrize("name", devices.NAMES)
def test_every_recorded_device_gets_a_target_spirv_val_knows(name):
    api = devices.device_info(devices.load(name)).api_version
    assert validate.target_env(api) in ("vulkan1.0", "vulkan1.1", "vulkan1.2", "vulkan1.3")


def test_a_newer_spirv_than_the_device_takes_is_refused(device, monkeypatch):
    monkeypatch.setenv("VKCORE_SPIRV_VAL", "0")
    code = bytearray(spirv.compile_source(GOOD).code)
    code[4:8] = (0x00010600).to_bytes(4, "little")  # SPIR-V 1.6
    with pytest.raises(vkcore.InvalidSpirvError, match="1.0 to 1.3"):
        validate.check(bytes(code), 1 << 22 | 1 << 12)  # a Vulkan 1.1 device
