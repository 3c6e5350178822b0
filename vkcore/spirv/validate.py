"""Validation of users' SPIR-V bytes before any reaches the driver (``Program(spirv=...)``).

``spirv-val`` when it is installed and runs (``--target-env`` from the device's Vulkan
version), else vkcore's structural checks (:mod:`vkcore.spirv.structure`);
``VKCORE_SPIRV_VAL=0`` picks the structural checks even where ``spirv-val`` is installed.
A module that passed is remembered by its SHA-256 and target in this process, so repeated
Programs of the same bytes pay once. The contract: docs/programs.md#validation.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import threading
from collections import OrderedDict

from vkcore.base import config
from vkcore.errors import InvalidSpirvError, cut
from vkcore.spirv import glslang, structure

log = logging.getLogger("vkcore")

SPIRV_VAL_ENV = "VKCORE_SPIRV_VAL"
STRUCTURAL = "vkcore's structural checks"
_TIMEOUT_S = 120
_REMEMBERED = 256  # modules that passed, by digest and target
_passed: OrderedDict[tuple[bytes, str, str], None] = OrderedDict()
_lock = threading.Lock()


def target_env(api_version: int) -> str:
    """The ``spirv-val`` target for a device of this Vulkan ``api_version`` (the packed
    VK_MAKE_API_VERSION value): vulkan1.0 to vulkan1.3 (a newer device: vulkan1.3)."""
    major, minor = (api_version >> 22) & 0x7F, (api_version >> 12) & 0x3FF
    if major != 1:
        return "vulkan1.3" if major > 1 else "vulkan1.0"
    return f"vulkan1.{min(minor, 3)}"


def max_spirv_minor(api_version: int) -> int:
    """The newest SPIR-V 1.x a device of this Vulkan version must accept (Vulkan 1.0:
    1.0; 1.1: 1.3; 1.2: 1.5; 1.3: 1.6)."""
    return {"vulkan1.0": 0, "vulkan1.1": 3, "vulkan1.2": 5}.get(target_env(api_version), 6)


def validator() -> str | None:
    """The ``spirv-val`` to run (None: use the structural checks)."""
    if not config.env_flag(SPIRV_VAL_ENV, True):
        return None
    return glslang.tool("spirv-val")


def check(code: bytes, api_version: int, what: str = "spirv") -> str:
    """Refuse ``code`` unless it validates for a device of ``api_version``
    (:class:`vkcore.InvalidSpirvError` with the validator's messages); returns which
    validator passed it."""
    exe = validator()
    env = target_env(api_version)
    name = "spirv-val" if exe is not None else STRUCTURAL
    key = (hashlib.sha256(code).digest(), env, name)
    with _lock:
        if key in _passed:
            _passed.move_to_end(key)
            return name
    if exe is not None:
        _run_spirv_val(exe, code, env, what)
    try:
        if exe is not None:  # what spirv-val passes and still fails or crashes a driver
            structure.check_compute_interface(code)
        else:
            structure.check(code, max_spirv_minor(api_version))
    except structure.StructureError as exc:
        raise InvalidSpirvError(what, name, [str(exc)]) from None
    with _lock:
        _passed[key] = None
        while len(_passed) > _REMEMBERED:
            _passed.popitem(last=False)
    return name


def _run_spirv_val(exe: str, code: bytes, env: str, what: str) -> None:
    cmd = [exe, "--target-env", env, "-"]
    try:
        proc = subprocess.run(cmd, input=code, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise InvalidSpirvError(
            what, "spirv-val", [f"spirv-val did not finish in {_TIMEOUT_S} s"]
        ) from None
    except OSError as exc:  # ran for --version, then not: say so rather than guess
        raise RuntimeError(f"spirv-val ({exe}) could not be run to check {what}: {exc}") from None
    if proc.returncode == 0:
        return
    said = (proc.stderr + proc.stdout).decode("utf-8", "replace").strip()
    lines = [cut(line.strip()) for line in said.splitlines() if line.strip()][:20]
    if proc.returncode < 0:  # the validator itself died on these bytes: not usable
        lines.insert(0, f"spirv-val was killed by signal {-proc.returncode} checking them")
    raise InvalidSpirvError(what, "spirv-val", lines or [f"exit status {proc.returncode}"])
