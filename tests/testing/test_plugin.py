"""The pytest plugin vkcore.testing, as a user's project runs it: pytest in a subprocess
on a test file outside this repository (no conftest of ours)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import pytest
from repo_paths import REPO

from vkcore import testing
from vkcore.tools import ci
from vkcore.tools.cli import main

USER_TESTS = """
import os
import numpy as np
import vkcore
from vkcore import _vk


def test_softmax_runs(vk_device):
    y = vkcore.softmax(np.array([1.0, 2.0, 3.0], np.float32), device=vk_device)
    assert abs(float(y.sum()) - 1.0) < 1e-6
    assert vk_device.validation_messages == []


def test_an_invalid_call_fails_the_test(vk_device):
    keep = _vk.Keep()
    info = keep.struct("VkBufferCreateInfo", size=0, usage=0x20, sharingMode=0)
    out = vk_device.ffi.new("VkBuffer*")
    vk_device.lib.vkCreateBuffer(vk_device.handle, info, vk_device.ffi.NULL, out)
    if out[0] != vk_device.ffi.NULL:
        vk_device.lib.vkDestroyBuffer(vk_device.handle, out[0], vk_device.ffi.NULL)


def test_settings(vk_device):
    for name in ("LP_NUM_THREADS", "VK_DRIVER_FILES", "MESA_SHADER_CACHE_DIR"):
        print(name + "=" + os.environ.get(name, ""))
"""


def _pytest(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-s", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_passing_and_a_failing_test(tmp_path):
    run = _pytest(tmp_path, "-p", "vkcore.testing", "test_user.py")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "1 failed, 2 passed" in out, out
    assert "FAILED test_user.py::test_an_invalid_call_fails_the_test" in out, out
    assert "validation messages during the test" in out and "VUID-VkBufferCreateInfo-size" in out


def test_the_plugin_is_there_without_naming_it(tmp_path):
    names = {e.name for e in entry_points(group="pytest11")}
    assert "vkcore.testing" in names
    run = _pytest(tmp_path, "test_user.py::test_softmax_runs")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_no_vulkan_device_is_a_skip_with_the_reason(tmp_path):
    run = _pytest(tmp_path, "test_user.py", env={"VK_DRIVER_FILES": str(tmp_path / "none.json")})
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "3 skipped" in out, out
    assert "no Vulkan device" in out and "VK_ERROR_INCOMPATIBLE_DRIVER" in out, out


def test_vk_lavapipe_applies_the_ci_settings(tmp_path):
    run = _pytest(
        tmp_path, "--vk-lavapipe", "test_user.py::test_settings", env={"LP_NUM_THREADS": "77"}
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert f"LP_NUM_THREADS={os.cpu_count()}" in out, out
    assert "lvp_icd" in out.split("VK_DRIVER_FILES=")[1].split()[0], out
    assert "mesa-shader-cache-" in out.split("MESA_SHADER_CACHE_DIR=")[1].split()[0], out


def test_lavapipe_settings_are_fresh_and_complete():
    a, b = testing.lavapipe_settings(3), testing.lavapipe_settings()
    assert a["LP_NUM_THREADS"] == "3" and b["LP_NUM_THREADS"] == str(os.cpu_count())
    assert a["VK_DRIVER_FILES"] == a["VK_ICD_FILENAMES"] and "lvp_icd" in a["VK_DRIVER_FILES"]
    assert a["MESA_SHADER_CACHE_DIR"] != b["MESA_SHADER_CACHE_DIR"]
    assert a["VKCORE_VALIDATION"] == "1"
    for name in ("MESA_SHADER_CACHE_DIR", "VKCORE_CACHE_DIR"):  # named, made on first use
        folder = Path(a[name])
        assert folder.parent == Path(tempfile.gettempdir()) and not folder.exists()


def test_lavapipe_settings_without_lavapipe(monkeypatch):
    monkeypatch.setattr(ci, "LAVAPIPE_ICD_GLOBS", ("/nonexistent/lvp*.json",))
    with pytest.raises(RuntimeError, match="mesa-vulkan-drivers"):
        testing.lavapipe_settings()


def test_ci_env_command(capsys):
    assert main(["ci-env", "--threads", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "export LP_NUM_THREADS=2" in lines
    assert any(line.startswith("export VK_DRIVER_FILES=") for line in lines)
    assert main(["ci-env", "--github"]) == 0
    assert all(
        "=" in line and not line.startswith("export")
        for line in capsys.readouterr().out.splitlines()
    )


def test_the_example_workflow_installs_what_the_plugin_needs():
    """examples/ci/vulkan-tests.yml: the Debian packages of `make`, the plugin, ci-env."""
    root = REPO
    workflow = (root / "examples" / "ci" / "vulkan-tests.yml").read_text()
    makefile = (root / "Makefile").read_text()
    packages = makefile.split("APT_PACKAGES :=")[1].splitlines()[0].split()
    for package in packages:
        assert f" {package}" in workflow, package
    assert 'vkcore ci-env --github >> "$GITHUB_ENV"' in workflow
    assert "pytest -p vkcore.testing" in workflow


def test_the_command_line_does_not_need_pytest():
    """An installed vkcore has no pytest: only the plugin module imports it."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "from vkcore.tools.cli import main\n"
        "raise SystemExit(main(['ci-env']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "LP_NUM_THREADS=" in run.stdout
