"""The parent: priming processes, then rounds of fresh probe processes, then the report.

A warm condition's folders are filled by one priming process (all kernels) that is not
counted. Every probe compiles a copy of the GLSL sources taken when the run starts, so
an edit during a run cannot turn warm samples cold. Samples run one at a time so that
they do not compete for the CPU.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import vkcore
from vkcore import spirv
from vkcore.tools.coldwarm.cases import KERNELS, check_names
from vkcore.tools.coldwarm.child import PROBE_CODE
from vkcore.tools.coldwarm.conditions import CONDITIONS, Condition, child_env
from vkcore.tools.coldwarm.prose import findings
from vkcore.tools.coldwarm.summary import kernel_ratios, ratios, summarize

if TYPE_CHECKING:
    from vkcore.tools.coldwarm.shader import ShaderCase

SCHEMA = "vkcore-coldwarm/1"
_PROBE_TIMEOUT_S = 300

Progress = Callable[[int, int, str], None]
# The parent's clock (a seam for tests of the time cap).
_clock = time.perf_counter


def measure(
    kernels: Sequence[str] | None = None,
    conditions: Sequence[str] | None = None,
    repeats: int = 3,
    *,
    max_seconds: float | None = None,
    selector: str | None = None,
    progress: Progress | None = None,
    tmp_parent: str | None = None,
    shader: ShaderCase | None = None,
) -> dict[str, Any]:
    """Measure every kernel under every condition, ``repeats`` fresh processes each.

    A repetition is one round over every condition and kernel. With ``max_seconds``, no
    new round starts when the rounds so far say it would end past that time (the first
    round always runs); the report's ``settings.repeats_done`` says how many ran.

    Returns the report (see :data:`SCHEMA`): settings, environment, every sample, the
    median/min/max per stage and condition (pooled over kernels and per kernel), the
    warm/cold ratios and the findings in words. All temporary folders live under one
    ``vkcore-coldwarm-*`` folder in ``tmp_parent`` (default: the system temp folder),
    removed before this returns, also on failure. ``shader`` adds a user's compute shader
    (:mod:`vkcore.tools.coldwarm.shader`); with it, ``kernels=None`` measures only that shader.
    """
    known = dict(KERNELS)
    probe_args: list[str] = []
    if shader is not None:
        shader.check(selector)
        known[shader.name] = shader.prepare
        probe_args.append(shader.to_arg())
        kernels = [*(kernels or []), shader.name]
    kernels = check_names(KERNELS if kernels is None else kernels, known, "kernels")
    conditions = check_names(
        CONDITIONS if conditions is None else conditions, CONDITIONS, "conditions"
    )
    _check_limits(repeats, max_seconds)
    run = _Run(kernels, conditions, repeats, selector, progress, probe_args)
    started = _clock()
    load_before = _load_average()
    root = Path(tempfile.mkdtemp(prefix="vkcore-coldwarm-", dir=tmp_parent))
    try:
        run.snapshot_shaders(root / "shaders")
        primed = run.prime(root)
        rounds = run.rounds(root, started, max_seconds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "schema": SCHEMA,
        "settings": {
            "kernels": kernels,
            "conditions": conditions,
            "repeats": repeats,
            "repeats_done": rounds,
            "max_seconds": max_seconds,
        },
        "conditions": {
            n: {
                "description": CONDITIONS[n].description,
                "vkcore_caches": CONDITIONS[n].vkcore_caches,
                "driver_cache": CONDITIONS[n].driver_cache,
            }
            for n in conditions
        },
        "environment": {
            **environment(run.samples),
            "load_average": {"before": load_before, "after": _load_average()},
        },
        "shader_sources": run.shader_sources,
        "temp_root": str(root),
        "temp_root_removed": not root.exists(),
        "primed_cache_bytes": primed,
        "samples": run.samples,
        "elapsed_seconds": _clock() - started,
    }
    return _conclude(report)


def _check_limits(repeats: int, max_seconds: float | None) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if max_seconds is not None and (
        isinstance(max_seconds, bool)
        or not isinstance(max_seconds, (int, float))
        or max_seconds <= 0
    ):
        raise ValueError(f"max_seconds must be a positive number or None, got {max_seconds!r}")


def _conclude(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its summary, ratios and findings added."""
    settings = report["settings"]
    summary = summarize(report["samples"], settings["conditions"], settings["kernels"])
    report["summary"] = summary
    report["ratios"] = ratios(summary)
    report["ratios_per_kernel"] = kernel_ratios(summary)
    report["findings"] = findings(report)
    return report


@dataclass
class _Run:
    """The parent's loop: priming processes, then rounds of samples."""

    kernels: list[str]
    conditions: list[str]
    repeats: int
    selector: str | None
    progress: Progress | None
    probe_args: list[str] = field(default_factory=list)  # e.g. a user's shader case

    def __post_init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.warm = [c for c in self.conditions if c != "cold"]
        self.total = len(self.warm) + self.repeats * len(self.conditions) * len(self.kernels)
        self.done = 0
        self.shader_sources = str(spirv.shader_dir())
        self.shader_copy: str | None = None

    def snapshot_shaders(self, dest: Path) -> None:
        """Copy the GLSL sources once: every probe compiles the same text even if the
        originals are edited during the run (a changed shader would make warm samples cold)."""
        shutil.copytree(self.shader_sources, dest)
        self.shader_copy = str(dest)

    def tick(self, label: str) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total, label)

    def probe(
        self, condition: str, folder: Path, kernels: list[str]
    ) -> tuple[dict[str, Any], float]:
        """One probe process on ``kernels`` with the caches in ``folder``."""
        return _run_probe(
            CONDITIONS[condition],
            _folders(folder),
            [*kernels, *self.probe_args],
            self.selector,
            self.shader_copy,
        )

    def prime(self, root: Path) -> dict[str, dict[str, int]]:
        """Fill each warm condition's folders with one process running every kernel."""
        primed = {}
        for name in self.warm:
            self.tick(f"priming {name}")
            self.probe(name, root / name, self.kernels)
            primed[name] = _cache_sizes(root / name)
            self.done += 1
        return primed

    def rounds(self, root: Path, started: float, max_seconds: float | None) -> int:
        """Run the rounds; how many ran. Cold samples get new folders, removed at once."""
        first_round = _clock()
        rounds = 0
        for rep in range(self.repeats):
            if rep and max_seconds is not None:
                per_round = (_clock() - first_round) / rep
                if _clock() - started + per_round > max_seconds:
                    break
            for name in self.conditions:
                for kernel in self.kernels:
                    self.tick(f"{name} {kernel} #{rep + 1}")
                    folder = root / name if name != "cold" else root / f"cold-{self.done}"
                    data, wall = self.probe(name, folder, [kernel])
                    self.samples.append(_sample(name, kernel, rep, data, wall))
                    if name == "cold":
                        shutil.rmtree(folder)
                    self.done += 1
            rounds = rep + 1
        self.total = self.done
        self.tick("done")
        return rounds


def _load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages: other work on the machine distorts every stage."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _folders(base: Path) -> tuple[str, str, str]:
    folders = (base / "vkcore", base / "driver", base / "xdg")
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    return str(folders[0]), str(folders[1]), str(folders[2])


def _run_probe(
    condition: Condition,
    folders: tuple[str, str, str],
    kernels: Sequence[str],
    selector: str | None,
    shader_dir: str | None = None,
) -> tuple[dict[str, Any], float]:
    """Start one probe process; its JSON and the process's wall seconds."""
    env = child_env(condition, *folders, selector=selector, shader_dir=shader_dir)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE_CODE, *kernels],
        env=env,
        capture_output=True,
        text=True,
        timeout=_PROBE_TIMEOUT_S,
        check=False,
    )
    wall = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(
            f"probe process for {', '.join(k for k in kernels if not k.startswith('--'))} "
            f"({condition.name}) failed: {tail}"
        )
    return json.loads(lines[-1]), wall


def _sample(
    condition: str, kernel: str, rep: int, data: dict[str, Any], wall: float
) -> dict[str, Any]:
    """One sample of the report, from the JSON of the probe that measured it."""
    result = data["kernels"][kernel]
    return {
        "condition": condition,
        "kernel": kernel,
        "repeat": rep,
        "pid": data["pid"],
        "process_seconds": wall,
        "stages": result["stages"],
        "first_dispatch_device_seconds": result["first_dispatch_device_seconds"],
        "second_dispatch_device_seconds": result["second_dispatch_device_seconds"],
        "spirv_origins": [p["spirv_origin"] for p in result["pipelines"]],
        "cache_hits": [p["cache_hit"] for p in result["pipelines"]],
        "pipelines": [p["name"] for p in result["pipelines"]],
        "pipeline_cache": data["pipeline_cache"],
        "close_seconds": data["close_seconds"],
        "device": data["device"],
        "env": data["env"],
    }


def _cache_sizes(base: Path) -> dict[str, int]:
    """Bytes a priming process left: SPIR-V files, vkcore's other files (the pipeline
    cache), and the driver's disk cache."""

    def size(folder: Path, skip: str | None = None) -> int:
        return sum(
            f.stat().st_size
            for f in folder.rglob("*")
            if f.is_file() and (skip is None or skip not in f.relative_to(folder).parts)
        )

    return {
        "spirv": size(base / "vkcore" / "spirv"),
        "pipeline_cache": size(base / "vkcore", skip="spirv"),
        "driver": size(base / "driver"),
    }


def environment(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Device, driver and versions (from the first sample), vkcore version, CPU count."""
    device = dict(samples[0]["device"]) if samples else {}
    info = device.get("driver_info", "")
    mesa = re.search(r"Mesa (\S+)", info)
    nvidia = "nvidia" in device.get("driver_name", "").lower()
    return {
        **device,
        "mesa_version": mesa.group(1) if mesa else None,
        "nvidia_version": (info or device.get("driver_version")) if nvidia else None,
        "vkcore_version": vkcore.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
