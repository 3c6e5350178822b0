"""glslangValidator (and spirv-val) on a GLSL compute shader, and what a compile depends on:
the defines, the target environment, the included files, the compiler's version."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path

from vkcore.errors import ShaderCompileError

TARGET_ENV = "vulkan1.1"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
Defines = Mapping[str, int | str]


def define_args(defines: Defines) -> list[str]:
    return [f"-D{k}={v}" for k, v in sorted(defines.items())]


@cache
def compiler_version() -> str:
    """First line of ``glslangValidator --version``; empty when it is not installed."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"


def compile_file(source: Path, include_dirs: Sequence[Path], defines: Defines, what: str) -> bytes:
    """glslangValidator on the file ``source`` (a compute shader whatever its name), then
    spirv-val; a GLSL error is a :class:`ShaderCompileError` with the compiler's lines."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        raise RuntimeError(
            f"SPIR-V for shader {what} is neither shipped nor cached, and "
            "glslangValidator is not installed (Debian: glslang-tools)"
        )
    with tempfile.TemporaryDirectory(prefix="vkcore-glsl-") as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [exe, "-V", "-S", "comp", "--target-env", TARGET_ENV, *define_args(defines)]
        cmd += [f"-I{d}" for d in include_dirs] + ["-o", str(out), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            log_text = proc.stdout + proc.stderr
            errors = [line[len("ERROR: ") :].strip() for line in log_text.splitlines()]
            errors = [e for e in errors if e and not e[0].isdigit() and ":" in e]
            raise ShaderCompileError(what, errors, log_text)
        code = out.read_bytes()
        val = shutil.which("spirv-val")
        if val is not None:
            proc = subprocess.run(
                [val, "--target-env", TARGET_ENV, str(out)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                raise RuntimeError(f"spirv-val rejected {what}:\n{proc.stdout}{proc.stderr}")
    return code


def find_include(name: str, include_dirs: Sequence[Path]) -> Path:
    for folder in include_dirs:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f'#include "{name}" not found in {[str(d) for d in include_dirs]}')


def user_text(text: str, include_dirs: Sequence[Path], seen: set[Path]) -> str:
    """``text`` followed by every file it includes (as glslang resolves them), recursively."""
    parts = [text]
    for inc in INCLUDE.findall(text):
        path = find_include(inc, include_dirs).resolve()
        if path not in seen:
            seen.add(path)
            parts += [f"--- {inc}\n", user_text(path.read_text(), include_dirs, seen)]
    return "".join(parts)
