"""The package as a user gets it: sdist and wheel built, the wheel installed into a clean
virtual environment and run from a folder outside the repository with no compiler on PATH.

Building needs glslangValidator (it compiles every shader variant into the wheel); the
clean environment gets numpy and vulkan through pip from the configured index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import kernel_tour
import pytest

from vkcore import spirv

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TOUR_SCRIPT = Path(kernel_tour.__file__).resolve()
# Variables that choose or configure the Vulkan driver pass through to the clean run.
_DRIVER_VARS = (
    "VK_ICD_FILENAMES",
    "VK_DRIVER_FILES",
    "VK_LAYER_PATH",
    "VK_ADD_LAYER_PATH",
    "LD_LIBRARY_PATH",
    "LP_NUM_THREADS",
    "VKCORE_DEVICE",
    "DISPLAY",
    "XDG_RUNTIME_DIR",
)


def _run(cmd: list[str], timeout: float = 300, **kwargs) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """``python -m build``: the sdist, then the wheel built from that sdist."""
    if shutil.which("glslangValidator") is None:
        pytest.fail("building the wheel needs glslangValidator (Debian: glslang-tools)")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)])
    wheels, sdists = list(out.glob("vkcore-*.whl")), list(out.glob("vkcore-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


@pytest.fixture(scope="module")
def clean_venv(dist, tmp_path_factory) -> Path:
    """A new virtual environment (no system packages) with only the wheel and its deps."""
    root = tmp_path_factory.mktemp("venv")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    _run([*pip, "install", "--quiet", str(dist["wheel"])])
    return venv


def _shader_sources() -> list[Path]:
    return [p for p in (REPO / "shaders").iterdir() if p.suffix in (".comp", ".glsl")]


def _clean_env(venv: Path, work: Path, *, path: str) -> dict[str, str]:
    """Nothing from the repository or this test run leaks in: no PYTHONPATH, own caches."""
    env = {k: os.environ[k] for k in _DRIVER_VARS if k in os.environ}
    env.update(
        HOME=str(work),
        PATH=path,
        XDG_CACHE_HOME=str(work / "xdg-cache"),
        VKCORE_CACHE_DIR=str(work / "vkcore-cache"),
        VKCORE_SPIRV_CACHE="0",  # SPIR-V must come from the wheel, not from a cache
        VKCORE_VALIDATION="1",
        MESA_SHADER_CACHE_DIR=str(work / "mesa-cache"),
    )
    return env


def test_sdist_carries_sources_not_generated_spirv(dist):
    with tarfile.open(dist["sdist"]) as tar:
        names = {Path(*Path(n).parts[1:]).as_posix() for n in tar.getnames()}
    assert {f"shaders/{p.name}" for p in _shader_sources()} <= names
    assert {"setup.py", "pyproject.toml", "vkcore/spirv.py", "vkcore/cli/__init__.py"} <= names
    assert not [n for n in names if n.endswith(".spv")]


def test_wheel_carries_every_declared_variant_and_the_sources(dist):
    with zipfile.ZipFile(dist["wheel"]) as whl:
        names = set(whl.namelist())
        index = json.loads(whl.read("vkcore/spirv/index.json"))
    declared = spirv.variants()
    expected = {f"vkcore/spirv/{spirv.source_key(n, d)}.spv" for n, d in declared}
    assert expected <= names, sorted(expected - names)
    assert len(index) == len(declared)
    assert {(e["shader"], json.dumps(e["defines"], sort_keys=True)) for e in index} == {
        (n, json.dumps(d, sort_keys=True)) for n, d in declared
    }
    assert {f"vkcore/shaders/{p.name}" for p in _shader_sources()} <= names
    assert {"vkcore/py.typed", "vkcore/cli/__init__.py", "vkcore/kernels/softmax.py"} <= names


def test_installed_wheel_runs_everything_without_a_compiler(clean_venv, tmp_path):
    work = tmp_path / "outside"
    work.mkdir()
    shutil.copy(TOUR_SCRIPT, work / "kernel_tour.py")
    bin_dir = clean_venv / "bin"
    env = _clean_env(clean_venv, work, path=str(bin_dir))  # the venv's bin only: no glslang
    python = str(bin_dir / "python")

    tour = _run([python, "kernel_tour.py", "--installed"], cwd=work, env=env)
    summary = json.loads(tour.stdout)
    assert summary["shipped_variants"] == len(spirv.variants())
    assert str(clean_venv) in summary["package"]

    demo = _run([python, "-m", "vkcore", "demo", "--rows", "8", "--cols", "512"], cwd=work, env=env)
    assert "0.09003057" in demo.stdout and "all checks passed" in demo.stdout

    version = _run([str(bin_dir / "vkcore"), "--version"], cwd=work, env=env)
    assert version.stdout.startswith("vkcore ")


def test_installed_wheel_still_compiles_a_changed_shader(clean_venv, tmp_path):
    """Runtime compilation stays available: an edited copy of the shaders is compiled."""
    work = tmp_path / "outside"
    work.mkdir()
    site = next((clean_venv / "lib").glob("python3*/site-packages"))
    shaders = work / "my-shaders"
    shutil.copytree(site / "vkcore" / "shaders", shaders)
    with open(shaders / "softmax_online.comp", "a") as fh:
        fh.write("\n// edited by the user\n")
    compiler_dir = str(Path(shutil.which("glslangValidator") or "/usr/bin/x").parent)
    env = _clean_env(clean_venv, work, path=f"{clean_venv / 'bin'}:{compiler_dir}")
    env["VKCORE_SHADER_DIR"] = str(shaders)
    script = (
        "import numpy as np, vkcore\n"
        "from vkcore import spirv\n"
        "print(spirv.get('softmax_online.comp', {'STAGE': 0, 'VEC4': 0}).origin)\n"
        "x = np.array([1000, 1001, 1002], np.float32)\n"
        "print(vkcore.softmax(x).tolist())\n"
    )
    out = _run([str(clean_venv / "bin" / "python"), "-c", script], cwd=work, env=env)
    origin, probs = out.stdout.strip().splitlines()
    assert origin == "compiled"
    expected = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]
    assert max(abs(a - b) for a, b in zip(json.loads(probs), expected, strict=True)) < 1e-6


def test_every_variant_a_kernel_requests_is_declared(device):
    """In this process: the kernel tour reaches every declared variant, and nothing the
    kernels requested (here or in earlier tests) is missing from the declarations."""
    kernel_tour.tour(device)
    missing = sorted(kernel_tour.unregistered_requests())
    assert not missing, (
        f"kernels requested shader variants they never declared: {missing}; declare them with "
        "vkcore.spirv.register_variants in the kernel module, or the wheel will not ship them"
    )
    unrun = sorted(kernel_tour.unrequested_variants())
    assert not unrun, f"declared variants nothing ran (extend tests/kernel_tour.py): {unrun}"
