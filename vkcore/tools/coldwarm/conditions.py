"""Which caches a probe process may use, and the environment that enforces it.

Conditions, each with its own empty temporary folders (the user's cache folders are never
read or written):

``cold``    no SPIR-V cache, no pipeline cache, the driver's disk cache disabled
``vkcore``  vkcore's own caches warm (SPIR-V and pipeline cache), driver cache disabled
``driver``  the driver's disk cache warm (Mesa or NVIDIA), vkcore's caches disabled
``all``     everything warm
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Environment variables that point a process at cache folders; never inherited by a probe.
_SCRUBBED = (
    "VKCORE_CACHE_DIR",
    "VKCORE_SPIRV_CACHE",
    "VKCORE_PIPELINE_CACHE",
    "VKCORE_VALIDATION",
    "XDG_CACHE_HOME",
)
_SCRUBBED_PREFIXES = (
    "MESA_SHADER_CACHE",
    "MESA_GLSL_CACHE",
    "MESA_DISK_CACHE",
    "__GL_SHADER_DISK_CACHE",
)
# The variables a probe reports back, so a sample shows which folders it was given.
REPORTED_ENV = (
    "VKCORE_CACHE_DIR",
    "VKCORE_SPIRV_CACHE",
    "VKCORE_PIPELINE_CACHE",
    "MESA_SHADER_CACHE_DIR",
    "MESA_SHADER_CACHE_DISABLE",
    "__GL_SHADER_DISK_CACHE_PATH",
    "__GL_SHADER_DISK_CACHE",
    "XDG_CACHE_HOME",
    "VKCORE_SHADER_DIR",
)
# The folder holding the vkcore package: a probe imports this very copy of it.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


@dataclass(frozen=True)
class Condition:
    """Which caches a sample may use."""

    name: str
    vkcore_caches: bool  # vkcore's SPIR-V cache and persisted pipeline cache
    driver_cache: bool  # Mesa's / NVIDIA's own disk cache
    description: str


CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition("cold", False, False, "no cache at all"),
        Condition(
            "vkcore", True, False, "vkcore's SPIR-V and pipeline caches warm, driver disk cache off"
        ),
        Condition("driver", False, True, "driver disk cache warm, vkcore's caches off"),
        Condition("all", True, True, "every cache warm"),
    )
}


def child_env(
    condition: Condition,
    vkcore_dir: str,
    driver_dir: str,
    xdg_dir: str,
    selector: str | None = None,
    base: dict[str, str] | None = None,
    shader_dir: str | None = None,
) -> dict[str, str]:
    """The environment of one probe process: a copy of ``base`` (default ``os.environ``)
    with every cache variable removed, then pointed at the given temporary folders
    (and at a copy of the GLSL sources, ``shader_dir``, when given).

    The driver's cache is disabled *and* pointed at its folder when ``condition`` keeps
    it off, so even a driver that ignores the switch writes nothing outside it.
    """
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)
    }
    flag = "1" if condition.vkcore_caches else "0"
    env.update(
        VKCORE_CACHE_DIR=vkcore_dir,
        VKCORE_SPIRV_CACHE=flag,
        VKCORE_PIPELINE_CACHE=flag,
        VKCORE_VALIDATION="0",  # the layer would dominate every stage
        XDG_CACHE_HOME=xdg_dir,  # anything that falls back to it stays in the temp folder
        MESA_SHADER_CACHE_DIR=driver_dir,
        __GL_SHADER_DISK_CACHE_PATH=driver_dir,
    )
    if condition.driver_cache:
        env["__GL_SHADER_DISK_CACHE"] = "1"
        env["__GL_SHADER_DISK_CACHE_SKIP_CLEANUP"] = "1"
    else:
        env["MESA_SHADER_CACHE_DISABLE"] = "true"
        env["__GL_SHADER_DISK_CACHE"] = "0"
    if selector is not None:
        env["VKCORE_DEVICE"] = str(selector)
    if shader_dir is not None:
        env["VKCORE_SHADER_DIR"] = shader_dir
    parts = (_PACKAGE_PARENT, env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in parts if p)
    return env
