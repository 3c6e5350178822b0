"""The CI side of vkcore.testing and ``vkcore ci-env``: the lavapipe manifest for this
interpreter's architecture on a multiarch runner (made-up manifest folders), no device
under --vk-lavapipe an error rather than a skip, nothing left in the temporary
directory, the name that turns the plugin off, and a test that closes vk_device."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import vkcore
from vkcore import testing
from vkcore.tools import ci
from vkcore.tools.cli import main

REPO = Path(vkcore.__file__).resolve().parent.parent
X86_64 = ci.Arch(64, "little", 62)
I686 = ci.Arch(32, "little", 3)


def fake_elf(path: Path, bits: int, machine: int, order: str = "little") -> Path:
    """A file that starts as an ELF shared object of that class and machine (not loadable)."""
    ident = b"\x7fELF" + bytes([1 if bits == 32 else 2, 1 if order == "little" else 2, 1])
    head = ident.ljust(16, b"\0") + (3).to_bytes(2, order) + machine.to_bytes(2, order)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(head.ljust(64, b"\0"))
    return path


def manifest(folder: Path, name: str, library: str | Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    icd = {"library_path": str(library), "api_version": "1.1.0"}
    text = {"file_format_version": "1.0.0", "ICD": icd}
    path.write_text(json.dumps(text))
    return path


@pytest.fixture
def icd_dir(tmp_path, monkeypatch):
    folder = tmp_path / "icd.d"
    folder.mkdir()
    monkeypatch.setattr(ci, "LAVAPIPE_ICD_GLOBS", (str(folder / "lvp_icd*.json"),))
    return folder


def real_lavapipe_library() -> str:
    """The system lavapipe library this interpreter loads (the test machine has it)."""
    for path in sorted(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json")):
        library = json.loads(path.read_text())["ICD"]["library_path"]
        arch = ci.elf_arch(library)
        if arch is not None and arch.matches(ci.interpreter_arch()):
            return library
    pytest.fail("this machine has no lavapipe for the interpreter (install mesa-vulkan-drivers)")


# --------------------------------------------------------------------------- choosing
def test_multiarch_manifests_by_library_elf(icd_dir, tmp_path):
    """lvp_icd.i686.json sorts first; a 64-bit Python gets the x86_64 one, a 32-bit the
    i686 one, whatever the order of the names."""
    lib32 = fake_elf(tmp_path / "lib32" / "libvulkan_lvp.so", 32, 3)
    lib64 = fake_elf(tmp_path / "lib64" / "libvulkan_lvp.so", 64, 62)
    m32 = manifest(icd_dir, "lvp_icd.i686.json", lib32)
    m64 = manifest(icd_dir, "lvp_icd.x86_64.json", lib64)
    assert ci.lavapipe_icd(X86_64) == str(m64)
    assert ci.lavapipe_icd(I686) == str(m32)
    # The ELF header decides, not the name: swapped names are still told apart.
    manifest(icd_dir, "lvp_icd.i686.json", lib64)
    manifest(icd_dir, "lvp_icd.x86_64.json", lib32)
    assert ci.lavapipe_icd(X86_64) == str(m32)
    assert ci.lavapipe_icd(I686) == str(m64)


def test_the_default_is_this_interpreters_manifest(icd_dir, tmp_path):
    """Without an argument (as ci-env and --vk-lavapipe call it): the running Python's."""
    me = ci.interpreter_arch()
    assert me is not None and me.bits == struct.calcsize("P") * 8
    assert me == ci.elf_arch(sys.executable)
    other = ci.Arch(32, "little", 3) if me.bits == 64 else ci.Arch(64, "little", 62)
    mine = manifest(icd_dir, "lvp_icd.zz.json", fake_elf(tmp_path / "a.so", me.bits, me.machine))
    manifest(icd_dir, "lvp_icd.aa.json", fake_elf(tmp_path / "b.so", other.bits, other.machine))
    assert ci.lavapipe_icd() == str(mine)
    settings = ci.lavapipe_settings()
    assert settings["VK_DRIVER_FILES"] == settings["VK_ICD_FILENAMES"] == str(mine)


def test_by_name_where_the_library_cannot_be_read(icd_dir, tmp_path):
    """A bare library name (the loader searches for it) or a missing file: the
    architecture in the manifest's name decides."""
    for library in ("libvulkan_lvp.so", tmp_path / "missing" / "libvulkan_lvp.so"):
        m32 = manifest(icd_dir, "lvp_icd.i686.json", library)
        m64 = manifest(icd_dir, "lvp_icd.x86_64.json", library)
        assert ci.lavapipe_icd(X86_64) == str(m64)
        assert ci.lavapipe_icd(I686) == str(m32)
        arm = ci.Arch(64, "little", 183)
        m_arm = manifest(icd_dir, "lvp_icd.aarch64.json", library)
        assert ci.lavapipe_icd(arm) == str(m_arm)
        m_arm.unlink()


def test_a_relative_library_path_is_relative_to_the_manifest(icd_dir):
    fake_elf(icd_dir / "lib" / "lvp64.so", 64, 62)
    fake_elf(icd_dir / "lib" / "lvp32.so", 32, 3)
    m32 = manifest(icd_dir, "lvp_icd.a.json", "./lib/lvp32.so")
    m64 = manifest(icd_dir, "lvp_icd.b.json", "lib/lvp64.so")
    assert ci.lavapipe_icd(X86_64) == str(m64)
    assert ci.lavapipe_icd(I686) == str(m32)


def test_byte_order_and_machine_count(icd_dir, tmp_path):
    big = manifest(icd_dir, "lvp_icd.a.json", fake_elf(tmp_path / "be.so", 64, 21, "big"))
    little = manifest(icd_dir, "lvp_icd.b.json", fake_elf(tmp_path / "le.so", 64, 21))
    manifest(icd_dir, "lvp_icd.c.json", fake_elf(tmp_path / "arm.so", 64, 183))
    assert ci.lavapipe_icd(ci.Arch(64, "little", 21)) == str(little)
    assert ci.lavapipe_icd(ci.Arch(64, "big", 21)) == str(big)


def test_only_other_architectures_is_an_error_naming_them(icd_dir, tmp_path, capsys):
    manifest(icd_dir, "lvp_icd.i686.json", fake_elf(tmp_path / "lib32.so", 32, 3))
    with pytest.raises(RuntimeError, match="other architectures only: .*lvp_icd.i686.json"):
        ci.lavapipe_icd(X86_64)
    with pytest.raises(RuntimeError, match="x86_64 \\(64-bit\\)"):
        ci.lavapipe_icd(X86_64)
    if ci.interpreter_arch() == X86_64:
        assert main(["ci-env"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "other architectures only" in err


def test_a_manifest_nobody_can_place_is_the_fallback(icd_dir, tmp_path):
    """A manifest without an architecture in its name whose library cannot be read is
    what the loader would try: taken after every matching one, before an error."""
    manifest(icd_dir, "lvp_icd.i686.json", fake_elf(tmp_path / "lib32.so", 32, 3))
    unknown = manifest(icd_dir, "lvp_icd.json", "libvulkan_lvp.so")
    assert ci.lavapipe_icd(X86_64) == str(unknown)
    (icd_dir / "lvp_icd.broken.json").write_text("{not json")
    assert ci.lavapipe_icd(X86_64) in (str(unknown), str(icd_dir / "lvp_icd.broken.json"))
    lib64 = fake_elf(tmp_path / "lib64.so", 64, 62)
    matching = manifest(icd_dir, "lvp_icd.zzz.json", lib64)
    assert ci.lavapipe_icd(X86_64) == str(matching)


# --------------------------------------------------------------------------- temp folders
@pytest.fixture
def empty_tmp(tmp_path, monkeypatch):
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_ci_env_leaves_nothing_in_the_temp_directory(empty_tmp, capsys):
    assert main(["ci-env"]) == 0
    assert main(["ci-env", "--github"]) == 0
    ci.lavapipe_settings()
    out = capsys.readouterr().out
    assert list(empty_tmp.iterdir()) == []
    cache_lines = [line for line in out.splitlines() if "CACHE_DIR" in line]
    assert len(cache_lines) == 4 and all(str(empty_tmp) in line for line in cache_lines)
    paths = re.findall(r"CACHE_DIR=(\S+)", out)
    assert len(set(paths)) == 4  # every run its own folders


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update(extra)
    return env


def run_pytest(folder: Path, *args: str, **env: str) -> tuple[int, str]:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-s", "-p", "no:cacheprovider", *args],
        cwd=folder,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return run.returncode, run.stdout + run.stderr


USES_THE_DEVICE = """
import os
import numpy as np
import vkcore


def test_softmax(vk_device):
    y = vkcore.softmax(np.arange(64, dtype=np.float32), device=vk_device)
    assert abs(float(y.sum()) - 1) < 1e-5
    env = os.environ.get
    print("FOLDERS", env("MESA_SHADER_CACHE_DIR"), env("VKCORE_CACHE_DIR"))
"""


def test_vk_lavapipe_removes_its_folders(tmp_path):
    """The run's cache folders are made (Mesa and vkcore write into them) and removed at
    the end of the session; the temporary directory is as it was."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmp_path / "test_user.py").write_text(USES_THE_DEVICE)
    code, out = run_pytest(tmp_path, "--vk-lavapipe", "test_user.py", TMPDIR=str(tmpdir))
    assert code == 0 and "1 passed" in out, out
    folders = out.split("FOLDERS ")[1].split()[:2]
    assert all(Path(f).parent == tmpdir for f in folders), folders
    assert list(tmpdir.iterdir()) == [], out


# --------------------------------------------------------------------------- no device
CHILD_CONFTEST = """
import vkcore.tools.ci
vkcore.tools.ci.LAVAPIPE_ICD_GLOBS = ({pattern!r},)
"""


def multiarch_run(tmp_path, manifests: dict[str, Path]) -> tuple[int, str]:
    """pytest --vk-lavapipe in a child whose lavapipe manifests are ``manifests``."""
    icd = tmp_path / "icd.d"
    for name, library in manifests.items():
        manifest(icd, name, library)
    (tmp_path / "conftest.py").write_text(CHILD_CONFTEST.format(pattern=str(icd / "lvp_icd*.json")))
    (tmp_path / "test_user.py").write_text(USES_THE_DEVICE)
    return run_pytest(tmp_path, "--vk-lavapipe", "test_user.py", TMPDIR=str(tmp_path))


@pytest.mark.skipif(ci.interpreter_arch() != X86_64, reason="made-up x86 multiarch folders")
def test_a_multiarch_runner_runs_the_tests(tmp_path):
    """lvp_icd.i686.json first by name, lvp_icd.x86_64.json the real driver: the tests
    run on lavapipe (they were all skipped: the 32-bit driver has no device here)."""
    lib32 = fake_elf(tmp_path / "lib32" / "libvulkan_lvp.so", 32, 3)
    code, out = multiarch_run(
        tmp_path, {"lvp_icd.i686.json": lib32, "lvp_icd.x86_64.json": real_lavapipe_library()}
    )
    assert code == 0 and "1 passed" in out and "skipped" not in out, out


@pytest.mark.skipif(ci.interpreter_arch() != X86_64, reason="made-up x86 multiarch folders")
def test_only_a_32_bit_lavapipe_is_a_usage_error(tmp_path):
    lib32 = fake_elf(tmp_path / "lib32" / "libvulkan_lvp.so", 32, 3)
    code, out = multiarch_run(tmp_path, {"lvp_icd.i686.json": lib32})
    assert code == pytest.ExitCode.USAGE_ERROR, out
    assert "--vk-lavapipe: lavapipe is installed for other architectures only" in out, out
    assert "passed" not in out and "skipped" not in out


def test_no_device_under_vk_lavapipe_is_an_error_not_a_skip(tmp_path):
    """The manifest matches this Python but its driver gives no device: every test that
    uses vk_device errors, the run fails."""
    me = ci.interpreter_arch()
    broken = fake_elf(tmp_path / "lib" / "libvulkan_lvp.so", me.bits, me.machine, me.order)
    code, out = multiarch_run(tmp_path, {"lvp_icd.json": broken})
    assert code == pytest.ExitCode.TESTS_FAILED, out
    assert "1 error" in out and "skipped" not in out, out
    assert "--vk-lavapipe: no Vulkan device on lavapipe" in out, out


# --------------------------------------------------------------------------- turning it off
def test_the_documented_name_turns_the_plugin_off(tmp_path):
    """The docstring's ``-p no:NAME`` turns the plugin off, loaded through its entry
    point or named by a conftest (pytest_plugins)."""
    names = re.findall(r"-p no:([\w.]+)", testing.__doc__ or "")
    assert names, "the docstring says how to turn the plugin off"
    (tmp_path / "test_user.py").write_text(USES_THE_DEVICE)
    for conftest in ("", "pytest_plugins = ['vkcore.testing']\n"):
        (tmp_path / "conftest.py").write_text(conftest)
        for name in names:
            code, out = run_pytest(tmp_path, "-p", f"no:{name}", "--vk-lavapipe", "test_user.py")
            assert code == pytest.ExitCode.USAGE_ERROR, (conftest, name, out)
            assert "unrecognized arguments: --vk-lavapipe" in out, out
            code, out = run_pytest(tmp_path, "-p", f"no:{name}", "test_user.py")
            assert code == pytest.ExitCode.TESTS_FAILED, (conftest, name, out)
            assert "fixture 'vk_device' not found" in out, out
        code, out = run_pytest(tmp_path, "test_user.py")  # and it is on by default
        assert code == 0 and "1 passed" in out, out


# --------------------------------------------------------------------------- closing it
CLOSING_TESTS = """
import numpy as np
import pytest
import vkcore


def works(dev):
    return abs(float(vkcore.softmax(np.ones(4, np.float32), device=dev).sum()) - 1) < 1e-6


def test_0_before(vk_device):
    assert works(vk_device)


def test_1_closes(vk_device):
    vk_device.close()


def test_2_after_close(vk_device):
    assert works(vk_device) and not vk_device.closed


def test_3_with_block(vk_device):
    with vk_device:
        pass


def test_4_after_with(vk_device):
    assert works(vk_device)


def test_5_swallows_the_failure(vk_device):
    try:
        vk_device.close()
    except BaseException:
        pass


def test_6_after_swallowing(vk_device):
    assert works(vk_device)


def test_7_closes_by_the_class(vk_device):
    vkcore.Device.close(vk_device)


def test_8_after_the_class(vk_device):
    assert works(vk_device) and not vk_device.closed


@pytest.fixture
def closer(vk_device):
    yield vk_device
    vk_device.close()


def test_9_a_fixture_closes(closer):
    assert works(closer)


def test_z_last(vk_device):
    assert works(vk_device)
"""


@pytest.mark.parametrize("validation", ["1", "0"])
def test_a_test_that_closes_vk_device_fails_and_the_next_ones_work(tmp_path, validation):
    (tmp_path / "test_user.py").write_text(CLOSING_TESTS)
    code, out = run_pytest(tmp_path, "-p", "vkcore.testing", "test_user.py",
                           VKCORE_VALIDATION=validation)  # fmt: skip
    lines = re.finditer(r"^(FAILED|ERROR) test_user.py::(\w+)", out, re.M)
    summary = {m.group(2): m.group(1) for m in lines}
    assert summary == {
        "test_1_closes": "FAILED",
        "test_3_with_block": "FAILED",
        "test_5_swallows_the_failure": "FAILED",
        "test_7_closes_by_the_class": "FAILED",
        "test_9_a_fixture_closes": "ERROR",
    }, out
    assert "4 failed, 7 passed, 1 error" in out, out
    assert out.count("a test closed vk_device") >= 5, out
    assert "validation messages when the Vulkan device closed" not in out, out


# --------------------------------------------------------------------------- threads
@pytest.mark.parametrize(
    ("threads", "exc"),
    [(0, ValueError), (-3, ValueError), (2**32, ValueError), (True, TypeError), (2.0, TypeError),
     ("4", TypeError)],
)  # fmt: skip
def test_bad_thread_counts_are_refused(threads, exc, capsys):
    """0 fell back to the CPU count, -3 was written as LP_NUM_THREADS=-3, and 2^32 reads
    as 0 threads in Mesa's unsigned int."""
    with pytest.raises(exc, match="threads"):
        ci.lavapipe_settings(threads)
    if isinstance(threads, int) and not isinstance(threads, bool):
        assert main(["ci-env", "--threads", str(threads)]) == 2
        err = capsys.readouterr().err
        assert "--threads" in err and "error:" in err
    assert ci.lavapipe_settings(ci.THREADS_MAX)["LP_NUM_THREADS"] == str(2**31 - 1)
