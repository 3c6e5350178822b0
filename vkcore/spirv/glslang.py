"""glslangValidator (and spirv-val) on a GLSL compute shader, and what a compile depends on:
the defines, the target environment, the included files, the compiler's version."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from functools import cache
from numbers import Integral
from pathlib import Path

from vkcore.errors import ShaderCompileError, shown

log = logging.getLogger("vkcore")
TARGET_ENV = "vulkan1.1"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
Defines = Mapping[str, int | str]


def define_args(defines: Defines) -> list[str]:
    """``-DNAME=VALUE`` for each define, checked (a ValueError or TypeError naming
    ``defines``): a name is a C identifier, a value an int or a string of one line (the
    compiler reads a value only up to its first newline)."""
    if not isinstance(defines, Mapping):
        raise TypeError(
            f"defines must be a mapping of names to values, got {type(defines).__name__}"
        )
    for name, value in defines.items():
        if not isinstance(name, str):
            raise TypeError(f"defines: a name must be a str, got {type(name).__name__}")
        if not _IDENTIFIER.fullmatch(name):
            raise ValueError(
                f"defines: a name must be an identifier (A-Z, a-z, 0-9, _), got {shown(name)}"
            )
        if isinstance(value, bool) or not isinstance(value, (Integral, str)):
            raise TypeError(
                f"defines: {name} must be an int or a str, got "
                f"{type(value).__name__} {shown(value)}"
            )
        if isinstance(value, str) and any(c in value for c in "\n\r\0"):
            raise ValueError(
                f"defines: {name} must be one line (no newline, carriage return or NUL), "
                f"got {shown(value)}"
            )
    return [f"-D{k}={v}" for k, v in sorted(defines.items())]


@cache
def _probe(exe: str) -> tuple[bool, str]:
    """(runs, first line of ``exe --version`` or why it cannot run), once per path."""
    try:
        out = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, check=False, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:  # no permission, not executable
        why = f"`{Path(exe).name} --version` could not be run: {exc}"
    else:
        if out.returncode == 0:
            lines = out.stdout.strip().splitlines()
            return True, lines[0] if lines else "unknown"
        said = (out.stderr.strip() or out.stdout.strip()).splitlines()
        why = f"`{Path(exe).name} --version` {_status(out.returncode)}" + (
            f": {shown(said[0])}" if said else ""
        )
    log.warning("%s ignored (as if it were not installed): %s", exe, why)
    return False, why


def _status(code: int) -> str:
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


def tool(name: str) -> str | None:
    """The path of the program ``name`` on PATH when it runs (``--version`` succeeds),
    else None: a broken install counts as absent."""
    exe = shutil.which(name)
    return exe if exe is not None and _probe(exe)[0] else None


@cache
def compiler_version() -> str:
    """First line of ``glslangValidator --version``; empty when it is not installed or
    cannot run (a broken install is treated as absent: cached SPIR-V is used). Looked up
    once per process, as the cache keys that include it must stay the same."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        return ""
    runs, text = _probe(exe)
    return text if runs else ""


def compile_file(source: Path, include_dirs: Sequence[Path], defines: Defines, what: str) -> bytes:
    """glslangValidator on the file ``source`` (a compute shader whatever its name), then
    spirv-val; a GLSL error is a :class:`ShaderCompileError` with the compiler's lines. A
    compiler that is missing, cannot run, or fails without a GLSL error is a RuntimeError
    that says so."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        raise RuntimeError(
            f"SPIR-V for shader {what} is neither shipped nor cached, and "
            "glslangValidator is not installed (Debian: glslang-tools)"
        )
    runs, why = _probe(exe)
    if not runs:
        raise RuntimeError(
            f"SPIR-V for shader {what} is neither shipped nor cached, and glslangValidator "
            f"({exe}) cannot run: {why}"
        )
    args = define_args(defines)
    with tempfile.TemporaryDirectory(prefix="vkcore-glsl-") as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [exe, "-V", "-S", "comp", "--target-env", TARGET_ENV, *args]
        cmd += [f"-I{d}" for d in include_dirs] + ["-o", str(out), str(source)]
        proc = _run(cmd, "glslangValidator", what)
        if proc.returncode != 0:
            log_text = proc.stdout + proc.stderr
            errors = [
                line[len("ERROR: ") :].strip()
                for line in log_text.splitlines()
                if line.startswith("ERROR: ")
            ]
            errors = [e for e in errors if e and not e[0].isdigit() and ":" in e]
            if proc.returncode < 0 or not errors:
                said = shown(log_text.strip()) if log_text.strip() else "no output"
                raise RuntimeError(
                    f"glslangValidator ({exe}) {_status(proc.returncode)} on {what} without "
                    f"reporting a GLSL error: {said}"
                )
            raise ShaderCompileError(what, errors, log_text)
        code = out.read_bytes()
        val = tool("spirv-val")
        if val is not None:
            proc = _run([val, "--target-env", TARGET_ENV, str(out)], "spirv-val", what)
            if proc.returncode != 0:
                verdict = "rejected" if proc.returncode > 0 else _status(proc.returncode) + " on"
                raise RuntimeError(f"spirv-val {verdict} {what}:\n{proc.stdout}{proc.stderr}")
    return code


def _run(cmd: list[str], program: str, what: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:  # it ran for --version, then not (replaced, permissions changed)
        raise RuntimeError(f"{program} ({cmd[0]}) could not be run on {what}: {exc}") from None


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
