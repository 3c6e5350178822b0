"""A glslangValidator (or spirv-val) on PATH that cannot run (a broken install: a missing
library, a file that is not a program, a crash) counts as absent: a user's SPIR-V that
another process cached is used; a shader that must be compiled is a RuntimeError saying
the compiler cannot run, never an empty ShaderCompileError."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import vkcore
from vkcore import spirv
from vkcore.spirv import glslang

SOURCE = """#version 450
layout(local_size_x = 4) in;
layout(std430, binding = 0) buffer B { float b[]; };
void main() { b[gl_GlobalInvocationID.x] *= %s; }
"""

# Ways an installed glslangValidator fails to run, each a file on PATH.
BROKEN = {
    "missing-library": "#!/bin/sh\n"
    "echo 'glslangValidator: error while loading shared libraries: libglslang.so.12' >&2\n"
    "exit 127\n",
    "silent-failure": "#!/bin/sh\nexit 1\n",
    "crash": "#!/bin/sh\nkill -SEGV $$\n",
    "not-a-program": b"\x7fELF\x02\x01\x01garbage",
    "version-only": "#!/bin/sh\n"  # answers --version, fails every compile without a word
    'if [ "$1" = --version ]; then echo "Glslang Version: 11:12.0.0"; exit 0; fi\n'
    "exit 2\n",
}


def _install(folder: Path, name: str, body: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(body.encode() if isinstance(body, str) else body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def real_compiler():
    exe = shutil.which("glslangValidator")
    if exe is None:
        pytest.skip("needs glslangValidator to write the cache first")
    return exe


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh SPIR-V cache, and the compiler looked up anew (once per process otherwise)."""
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path / "cache"))
    spirv.clear_memory_cache()
    glslang.compiler_version.cache_clear()
    yield tmp_path / "cache"
    spirv.clear_memory_cache()
    glslang.compiler_version.cache_clear()


def test_a_user_program_cached_by_another_process_runs_with_a_broken_compiler(
    tmp_path, real_compiler
):
    env = dict(os.environ, VKCORE_CACHE_DIR=str(tmp_path / "cache"))
    script = (
        "import numpy as np, vkcore\n"
        f"prog = vkcore.Program({SOURCE % '2.0'!r})\n"
        "b = np.arange(8, dtype=np.float32)\n"
        "prog(b, groups=2)\n"
        "assert np.array_equal(b, np.arange(8) * 2), b\n"
        "print(prog.code.origin)\n"
    )
    run = [sys.executable, "-c", script]
    first = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["compiled"]
    for kind, body in BROKEN.items():
        if kind == "version-only":
            continue  # a compiler that runs: its own version's key, see the test below
        bin_dir = tmp_path / kind
        _install(bin_dir, "glslangValidator", body)
        second = subprocess.run(
            run, env=dict(env, PATH=str(bin_dir)), capture_output=True, text=True, timeout=300
        )
        assert second.returncode == 0, (kind, second.stderr)
        assert second.stdout.split() == ["cache"], kind


@pytest.mark.parametrize("kind", [k for k in BROKEN if k != "version-only"])
def test_a_compiler_that_fails_its_version_counts_as_absent(
    tmp_path, cache, monkeypatch, kind, real_compiler
):
    text = SOURCE % f"3.0 /* {kind} */"
    assert spirv.compile_source(text).origin == "compiled"  # with the real compiler
    spirv.clear_memory_cache()
    bin_dir = tmp_path / "bin"
    _install(bin_dir, "glslangValidator", BROKEN[kind])
    monkeypatch.setenv("PATH", str(bin_dir))
    glslang.compiler_version.cache_clear()  # as a new process would look it up
    assert glslang.compiler_version() == ""
    assert spirv.compile_source(text).origin == "cache"
    # Not cached: an error that says the compiler cannot run (and why), not a GLSL error.
    with pytest.raises(RuntimeError) as info:
        spirv.compile_source(SOURCE % "4.0")
    assert not isinstance(info.value, vkcore.ShaderCompileError)
    assert "glslangValidator" in str(info.value) and "cannot run" in str(info.value)
    assert str(bin_dir) in str(info.value)


def test_a_compiler_failing_without_a_glsl_error_says_so(tmp_path, cache, monkeypatch):
    bin_dir = tmp_path / "bin"
    _install(bin_dir, "glslangValidator", BROKEN["version-only"])
    monkeypatch.setenv("PATH", str(bin_dir))
    glslang.compiler_version.cache_clear()  # as a new process would look it up
    assert glslang.compiler_version() == "Glslang Version: 11:12.0.0"
    with pytest.raises(RuntimeError, match="exited with status 2 .* without reporting") as info:
        spirv.compile_source(SOURCE % "5.0")
    assert not isinstance(info.value, vkcore.ShaderCompileError)


def test_a_real_glsl_error_is_still_a_shader_compile_error(cache, real_compiler):
    with pytest.raises(vkcore.ShaderCompileError) as info:
        spirv.compile_source(SOURCE % "undeclared_name")
    assert info.value.messages and "undeclared_name" in str(info.value)


@pytest.mark.parametrize("kind", ["missing-library", "crash", "not-a-program"])
def test_a_broken_spirv_val_counts_as_absent(tmp_path, cache, monkeypatch, kind, real_compiler):
    bin_dir = tmp_path / "bin"
    _install(
        bin_dir,
        "spirv-val",
        BROKEN[kind].replace("glslangValidator", "spirv-val")
        if isinstance(BROKEN[kind], str)
        else BROKEN[kind],
    )
    os.symlink(real_compiler, bin_dir / "glslangValidator")
    monkeypatch.setenv("PATH", str(bin_dir))
    glslang.compiler_version.cache_clear()  # as a new process would look it up
    assert glslang.tool("spirv-val") is None
    assert spirv.compile_source(SOURCE % f"6.0 /* {kind} */").origin == "compiled"
