"""Cold versus warm pipeline creation, measured honestly in fresh processes.

The only way to be cold is a new process: nothing in memory, nothing JIT-compiled. So
:func:`measure` (the parent) starts one Python process per sample; each runs
:func:`probe` (the child) on one kernel and prints its stage timings as JSON.

Stages, timed separately in every process (seconds):

``import``            ``import vkcore`` (numpy, the binding, the Vulkan loader)
``device``            ``vkcore.Device()``: instance, ICD, logical device, pipeline-cache load
``spirv``             SPIR-V obtained (compiled, read from the SPIR-V cache, or shipped)
``module``            ``vkCreateShaderModule``
``pipeline``          ``vkCreateComputePipelines``
``first_dispatch``    first submission, submit to fence (lavapipe JIT-compiles here)
``second_dispatch``   the same work again, for comparison
``first_result``      import + device + the first kernel call, to its result on the host
                      (the kernel's input is made before, outside every stage)

Conditions, each with its own empty temporary folders (the user's cache folders are never
read or written):

``cold``    no SPIR-V cache, no pipeline cache, the driver's disk cache disabled
``vkcore``  vkcore's own caches warm (SPIR-V and pipeline cache), driver cache disabled
``driver``  the driver's disk cache warm (Mesa or NVIDIA), vkcore's caches disabled
``all``     everything warm

A warm condition's folders are filled by one priming process (all kernels) that is not
counted. Every probe compiles a copy of the GLSL sources taken when the run starts, so
an edit during a run cannot turn warm samples cold. Since stages are timed separately,
``vkcore`` versus ``cold`` shows the SPIR-V cache on the ``spirv`` stage and the pipeline
cache on the ``pipeline`` stage.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import vkcore

from . import spirv

if TYPE_CHECKING:
    from .coldwarm_shader import ShaderCase

SCHEMA = "vkcore-coldwarm/1"
STAGES = (
    "import",
    "device",
    "spirv",
    "module",
    "pipeline",
    "first_dispatch",
    "second_dispatch",
    "first_result",
)
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
_PROBE_TIMEOUT_S = 300
# A pipeline-cache blob this small is only the VkPipelineCacheHeaderVersionOne header.
_HEADER_BYTES = 32
# Warm/cold above this ratio counts as "no speedup" in the report's words.
_NO_SPEEDUP_RATIO = 0.8


# ---------------------------------------------------------------------------- conditions
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
    package_parent = str(Path(vkcore.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------- kernels
# A kernel case gets a device, makes its small input (outside the timed stages), and
# returns a function that runs the kernel once and brings the result back to the host.
KernelCase = Callable[[vkcore.Device], Callable[[], Any]]
_WEIGHTS = (256, 1024)  # m x n of the quantize/dequantize/matvec weights
# The package seen as Any: the quantized kernels exist only in versions that export them.
_api: Any = vkcore


def _softmax_case(algorithm: str) -> KernelCase:
    def prepare(dev: vkcore.Device) -> Callable[[], Any]:
        x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
        return lambda: vkcore.softmax(x, algorithm=algorithm, device=dev)

    return prepare


def _weights() -> np.ndarray:
    return np.random.default_rng(1).standard_normal(_WEIGHTS).astype(np.float32)


def _quantize_case(dev: vkcore.Device) -> Callable[[], Any]:
    w = _weights()

    def run() -> Any:
        qt = _api.quantize(w, device=dev)
        try:
            return qt.q
        finally:
            qt.release()

    return run


def _dequantize_case(dev: vkcore.Device) -> Callable[[], Any]:
    # The quantized weights are made here, before the clock starts; the quantize
    # pipeline they need is then not counted in the dequantize stages.
    qt = _api.quantize(_weights(), device=dev)
    return lambda: _api.dequantize(qt, device=dev)


def _matvec_case(activations: str) -> KernelCase:
    def prepare(dev: vkcore.Device) -> Callable[[], Any]:
        qt = _api.quantize(_weights(), device=dev)
        x = np.random.default_rng(2).standard_normal(_WEIGHTS[1]).astype(np.float32)
        return lambda: _api.matvec(qt, x, activations=activations)

    return prepare


def _registry() -> dict[str, KernelCase]:
    """Every kernel pipeline family this vkcore has; kernels not present are left out."""
    cases: dict[str, KernelCase] = {
        "softmax-online": _softmax_case("online"),
        "softmax-safe": _softmax_case("safe"),
    }
    if hasattr(vkcore, "quantize"):
        cases["quantize"] = _quantize_case
    if hasattr(vkcore, "quantize") and hasattr(vkcore, "dequantize"):
        cases["dequantize"] = _dequantize_case
    if hasattr(vkcore, "quantize") and hasattr(vkcore, "matvec"):
        for activations in ("float", "int8", "uint8"):
            cases[f"matvec-{activations}"] = _matvec_case(activations)
    return cases


KERNELS: dict[str, KernelCase] = _registry()


def check_names(names: Iterable[str], known: Iterable[str], argument: str) -> list[str]:
    """``names`` as a list; ValueError naming ``argument`` when one is unknown or none given."""
    names, known = list(names), list(known)
    if not names:
        raise ValueError(f"{argument} must name at least one of: {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"{argument}: unknown {', '.join(map(repr, unknown))}; "
            f"expected some of: {', '.join(known)}"
        )
    return names


# ---------------------------------------------------------------------------- the child
def probe(
    kernel_names: Sequence[str],
    started: float,
    cases: Mapping[str, KernelCase] | None = None,
) -> dict[str, Any]:
    """Run each kernel twice on a new device and time every stage (the child's work).

    ``started`` is ``time.perf_counter()`` taken before ``import vkcore``. Returns a
    JSON-ready dict; call it only in a fresh process, where nothing is warm in memory.
    """
    imported = time.perf_counter()
    dev = vkcore.Device(validation=False)
    device_seconds = time.perf_counter() - imported
    submissions: list[tuple[float, float | None]] = []
    original_run = dev.submitter.run

    def timed_run(*args: Any, **kwargs: Any) -> float | None:
        start = time.perf_counter()
        device_time = original_run(*args, **kwargs)
        submissions.append((time.perf_counter() - start, device_time))
        return device_time

    dev.submitter.run = timed_run  # type: ignore[method-assign]
    results = {}
    try:
        for index, name in enumerate(kernel_names):
            run_once = {**KERNELS, **(cases or {})}[name](dev)
            known = len(dev.pipeline_stats())
            submissions.clear()
            t_call = time.perf_counter()
            run_once()
            first_result = (imported - started) + device_seconds + time.perf_counter() - t_call
            first = list(submissions)
            submissions.clear()
            run_once()
            second = list(submissions)
            created = dev.pipeline_stats()[known:]
            stages = {
                "import": imported - started,
                "device": device_seconds,
                "spirv": sum(p["spirv_seconds"] for p in created),
                "module": sum(p["module_seconds"] for p in created),
                "pipeline": sum(p["create_seconds"] for p in created),
                # None, not 0, if a kernel ever bypasses submitter.run: never a silent zero.
                "first_dispatch": sum(w for w, _ in first) if first else None,
                "second_dispatch": sum(w for w, _ in second) if second else None,
                "first_result": first_result,
            }
            results[name] = {
                "stages": stages if index == 0 else {**stages, "import": None, "device": None},
                "pipelines": created,
                "first_dispatch_device_seconds": _device_sum(first),
                "second_dispatch_device_seconds": _device_sum(second),
            }
        cache = dev.pipeline_cache
        evidence = {
            "loaded_bytes": getattr(cache, "loaded_bytes", None),
            "load_status": getattr(cache, "load_status", None),
            "cache_hits": getattr(cache, "hits", None),
            "creations": getattr(cache, "creations", None),
        }
        info = dev.info
    finally:
        t1 = time.perf_counter()
        dev.close()
        close_seconds = time.perf_counter() - t1
    return {
        "pid": os.getpid(),
        "kernels": results,
        "pipeline_cache": evidence,
        "close_seconds": close_seconds,
        "device": {
            "name": info.name,
            "driver_name": info.driver_name,
            "driver_info": info.driver_info,
            "driver_version": info.driver_version_string,
        },
        "env": {
            k: os.environ.get(k)
            for k in (
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
        },
    }


def _device_sum(submissions: list[tuple[float, float | None]]) -> float | None:
    times = [d for _, d in submissions]
    return (
        None
        if not times or any(d is None for d in times)
        else sum(d for d in times if d is not None)
    )


def probe_main(started: float, argv: Sequence[str]) -> None:
    """Entry point of a probe process: kernels on the command line (a user's shader as
    its ``--shader-case=`` argument), JSON on stdout."""
    from .coldwarm_shader import ARG_PREFIX, ShaderCase

    shaders = [ShaderCase.from_arg(a) for a in argv if a.startswith(ARG_PREFIX)]
    cases: dict[str, KernelCase] = {c.name: c.prepare for c in shaders}
    names = [a for a in argv if not a.startswith(ARG_PREFIX)]
    print(json.dumps(probe(check_names(names, {**KERNELS, **cases}, "kernels"), started, cases)))


# The probe's command line: the clock starts before vkcore (and numpy) are imported.
_PROBE_CODE = (
    "import time; _t = time.perf_counter(); import sys; "
    "from vkcore.coldwarm import probe_main; probe_main(_t, sys.argv[1:])"
)


# ---------------------------------------------------------------------------- the parent
Progress = Callable[[int, int, str], None]


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
    removed before this returns, also on failure. Samples run one at a time so that
    they do not compete for the CPU. ``shader`` adds a user's compute shader
    (:mod:`vkcore.coldwarm_shader`); with it, ``kernels=None`` measures only that shader.
    """
    known = dict(KERNELS)
    probe_args: list[str] = []
    if shader is not None:
        shader.check()
        known[shader.name] = shader.prepare
        probe_args.append(shader.to_arg())
        kernels = [*(kernels or []), shader.name]
    kernels = check_names(KERNELS if kernels is None else kernels, known, "kernels")
    conditions = check_names(
        CONDITIONS if conditions is None else conditions, CONDITIONS, "conditions"
    )
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if max_seconds is not None and (
        isinstance(max_seconds, bool)
        or not isinstance(max_seconds, (int, float))
        or max_seconds <= 0
    ):
        raise ValueError(f"max_seconds must be a positive number or None, got {max_seconds!r}")
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
    summary = summarize(run.samples, conditions, kernels)
    report["summary"] = summary
    report["ratios"] = ratios(summary)
    report["ratios_per_kernel"] = kernel_ratios(summary)
    report["findings"] = findings(report)
    return report


# The parent's clock (a seam for tests of the time cap).
_clock = time.perf_counter


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

    def prime(self, root: Path) -> dict[str, dict[str, int]]:
        """Fill each warm condition's folders with one process running every kernel."""
        primed = {}
        for name in self.warm:
            self.tick(f"priming {name}")
            _run_probe(
                CONDITIONS[name],
                _folders(root / name),
                [*self.kernels, *self.probe_args],
                self.selector,
                self.shader_copy,
            )
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
                    self.samples.append(
                        _sample(
                            CONDITIONS[name],
                            folder,
                            kernel,
                            rep,
                            self.selector,
                            self.shader_copy,
                            self.probe_args,
                        )
                    )
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
        [sys.executable, "-c", _PROBE_CODE, *kernels],
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
    condition: Condition,
    folder: Path,
    kernel: str,
    rep: int,
    selector: str | None,
    shader_dir: str | None = None,
    probe_args: Sequence[str] = (),
) -> dict[str, Any]:
    args = [kernel, *probe_args]
    data, wall = _run_probe(condition, _folders(folder), args, selector, shader_dir)
    result = data["kernels"][kernel]
    return {
        "condition": condition.name,
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


# ---------------------------------------------------------------------------- statistics
def stats(values: Iterable[float | None]) -> dict[str, Any]:
    """Median, min, max, max-min spread and count of the values that are not None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "spread": None, "n": 0}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "spread": max(vals) - min(vals),
        "n": len(vals),
    }


def summarize(
    samples: Sequence[dict[str, Any]], conditions: Sequence[str], kernels: Sequence[str]
) -> dict[str, Any]:
    """Per stage and condition: pooled over kernels, and per kernel."""

    def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {s: stats(r["stages"][s] for r in rows) for s in STAGES}

    pooled = {c: table([s for s in samples if s["condition"] == c]) for c in conditions}
    per_kernel = {
        k: {
            c: table([s for s in samples if s["condition"] == c and s["kernel"] == k])
            for c in conditions
        }
        for k in kernels
    }
    return {"pooled": pooled, "per_kernel": per_kernel}


def kernel_ratios(summary: dict[str, Any]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per kernel, warm condition and stage: median warm / median cold of that kernel."""
    out = {}
    for kernel, tables in summary["per_kernel"].items():
        if "cold" not in tables:
            return {}
        out[kernel] = {
            cond: {
                stage: _quotient(table[stage]["median"], tables["cold"][stage]["median"])
                for stage in STAGES
            }
            for cond, table in tables.items()
            if cond != "cold"
        }
    return out


def ratios(summary: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Warm/cold per warm condition and stage: the median over kernels of each kernel's
    ratio, so kernels of very different cost (one pipeline or three) do not mix."""
    per_kernel = kernel_ratios(summary)
    conditions = [c for c in summary["pooled"] if c != "cold"] if per_kernel else []
    out: dict[str, dict[str, float | None]] = {}
    for cond in conditions:
        out[cond] = {}
        for stage in STAGES:
            values: list[float] = []
            for by_cond in per_kernel.values():
                value = by_cond[cond][stage]
                if value is not None:
                    values.append(value)
            out[cond][stage] = statistics.median(values) if values else None
    return out


def _quotient(warm: float | None, cold: float | None) -> float | None:
    return warm / cold if warm is not None and cold else None


# ---------------------------------------------------------------------------- words
def findings(report: dict[str, Any]) -> list[str]:
    """The report's conclusions in sentences, each with its figures."""
    pooled, rat = report["summary"]["pooled"], report["ratios"]
    warnings = _warnings(report)
    if "cold" not in pooled:
        return [*warnings, "no cold condition was measured, so no warm/cold ratio can be given"]
    cold = pooled["cold"]
    env = report["environment"]
    lavapipe = (
        "llvmpipe" in env.get("name", "").lower()
        or "llvmpipe" in env.get("driver_name", "").lower()
    )
    out = [*warnings, _dominant_cost(cold, lavapipe)]
    if "driver" in rat:
        out.append(_driver_cache(rat["driver"], cold, pooled["driver"]))
    if "vkcore" in rat:
        out.append(_spirv_cache(rat["vkcore"], report))
        out.append(_pipeline_cache(rat["vkcore"], report))
    if "all" in rat:
        r = rat["all"]["first_result"]
        out.append(
            "With every cache warm, the time to the first result "
            "(import and device creation included) is "
            f"{_ms(pooled['all']['first_result']['median'])} "
            f"against {_ms(cold['first_result']['median'])} "
            f"cold: warm/cold = {_ratio(r)}."
        )
    return out


def _warnings(report: dict[str, Any]) -> list[str]:
    """What makes this run's warm figures unreliable, said first."""
    out = []
    recompiled = sorted(
        {
            f"{s['condition']} {s['kernel']}"
            for s in report["samples"]
            if CONDITIONS[s["condition"]].vkcore_caches and "compiled" in s["spirv_origins"]
        }
    )
    if recompiled:
        out.append(
            "WARNING: samples with the SPIR-V cache warm compiled SPIR-V anyway "
            f"({', '.join(recompiled)}): their warm figures are not clean."
        )
    return out


def _dominant_cost(cold: dict[str, Any], lavapipe: bool) -> str:
    medians = {
        p: cold[p]["median"] or 0.0 for p in ("spirv", "module", "pipeline", "first_dispatch")
    }
    top = max(medians, key=lambda p: medians[p])
    share = medians[top] / (sum(medians.values()) or 1.0)
    first, create = medians["first_dispatch"], medians["pipeline"]
    text = (
        f"Cold, the first dispatch costs {_ms(first)} "
        f"against {_ms(create)} for vkCreateComputePipelines "
        f"and {_ms(cold['second_dispatch']['median'])} for the second dispatch"
    )
    if create and first > create:
        text += (
            f": the driver's real work ({first / create:.0f}x pipeline creation) "
            "happens at first use."
        )
    else:
        text += "."
    if lavapipe:
        text += (
            " On lavapipe, vkCreateComputePipelines only translates SPIR-V to NIR; "
            "llvmpipe JIT-compiles the shader with LLVM at the first dispatch that uses it."
        )
    text += (
        f" The largest cold stage per kernel is {STAGE_LABELS[top]} "
        f"({_ms(medians[top])}, {share:.0%} of SPIR-V + module + pipeline + first dispatch)."
    )
    return text


def _driver_cache(r: dict[str, Any], cold: dict[str, Any], warm: dict[str, Any]) -> str:
    return (
        "The driver's disk cache brings the first dispatch "
        f"from {_ms(cold['first_dispatch']['median'])} "
        f"to {_ms(warm['first_dispatch']['median'])} "
        f"(warm/cold = {_ratio(r['first_dispatch'])}): the driver finds the compiled shader "
        "on disk instead of compiling it again; vkCreateComputePipelines "
        f"warm/cold = {_ratio(r['pipeline'])}."
    )


def _spirv_cache(r: dict[str, Any], report: dict[str, Any]) -> str:
    origins = sorted(
        {o for s in report["samples"] if s["condition"] == "cold" for o in s["spirv_origins"]}
    )
    warm = sorted(
        {o for s in report["samples"] if s["condition"] == "vkcore" for o in s["spirv_origins"]}
    )
    return (
        f"vkcore's SPIR-V cache: obtaining SPIR-V warm/cold = {_ratio(r['spirv'])} "
        f"(cold SPIR-V was {'/'.join(origins) or 'none'}, warm {'/'.join(warm) or 'none'}; "
        "compiling runs glslangValidator and spirv-val as processes)."
    )


def _pipeline_cache(r: dict[str, Any], report: dict[str, Any]) -> str:
    warm = [s for s in report["samples"] if s["condition"] in ("vkcore", "all")]
    feedback = [h for s in warm for h in s["cache_hits"] if h is not None]
    loaded = [b for s in warm if isinstance(b := s["pipeline_cache"].get("loaded_bytes"), int)]
    on_disk = max((v["pipeline_cache"] for v in report["primed_cache_bytes"].values()), default=0)
    ratio = r["pipeline"]
    blob = f"the blob loaded was {max(loaded)} bytes" if loaded else "no blob size was reported"
    if not feedback:
        hit_text = "creation feedback is not available on this driver"
    else:
        hit_text = (
            f"creation feedback {'reported' if any(feedback) else 'never reported'} an "
            "application-cache hit"
        )
    evidence = (
        f"{blob}, {on_disk} bytes of pipeline-cache files were on disk after priming, "
        f"and {hit_text}"
    )
    head = f"vkcore's pipeline cache: vkCreateComputePipelines warm/cold = {_ratio(ratio)}"
    noise = "so a difference from 1 is run-to-run noise"
    if loaded and max(loaded) <= _HEADER_BYTES and not any(feedback):
        return (
            f"{head}, no speedup, because the driver does not serialize pipelines (the blob is "
            f"the header only, {noise}): {evidence}."
        )
    if not loaded and on_disk == 0 and not any(feedback):
        return f"{head}, no speedup: no pipeline-cache file was written ({noise}); {evidence}."
    if any(feedback) or (ratio is not None and ratio <= _NO_SPEEDUP_RATIO):
        return f"{head} ({_speedup(ratio)} faster); {evidence}."
    return f"{head}, no speedup: the driver did not use the data it was given; {evidence}."


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _ratio(r: float | None) -> str:
    """Two decimals; three below 0.1, where the warm stage is almost free."""
    if r is None:
        return "n/a"
    return f"{r:.3f}" if r < 0.1 else f"{r:.2f}"


def _speedup(r: float | None) -> str:
    return "n/a" if not r else f"{1 / r:.1f}x"


# ---------------------------------------------------------------------------- output
STAGE_LABELS = {
    "import": "import vkcore",
    "device": "device creation",
    "spirv": "SPIR-V obtained",
    "module": "shader module",
    "pipeline": "vkCreateComputePipelines",
    "first_dispatch": "first dispatch",
    "second_dispatch": "second dispatch",
    "first_result": "total to first result",
}


def format_table(report: dict[str, Any]) -> str:
    """Markdown table: stages x conditions, median and [min-max] in ms, plus ratios."""
    conditions = report["settings"]["conditions"]
    pooled, rat = report["summary"]["pooled"], report["ratios"]
    header = ["stage (ms, median [min-max])", *conditions]
    header += [f"{c}/cold" for c in conditions if c in rat]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for stage in STAGES:
        cells = [STAGE_LABELS[stage]]
        for c in conditions:
            s = pooled[c][stage]
            cells.append(_cell(s))
        cells += [_ratio(rat[c][stage]) for c in conditions if c in rat]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(s: dict[str, Any]) -> str:
    """``median [min-max]`` in ms; only the value for a single sample."""
    if s["median"] is None:
        return "n/a"
    if s["n"] == 1:
        return f"{s['median'] * 1e3:.1f}"
    return f"{s['median'] * 1e3:.1f} [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


def _repetitions(settings: dict[str, Any]) -> str:
    done, asked = settings.get("repeats_done", settings["repeats"]), settings["repeats"]
    if done >= asked:
        return f"{done} repetitions"
    return (
        f"{done} repetitions (of {asked}: one more would have ended past "
        f"--max-seconds {settings.get('max_seconds')})"
    )


def format_report(report: dict[str, Any]) -> str:
    """The readable report: environment line, table, per-kernel first results, findings."""
    env, settings = report["environment"], report["settings"]
    lines = [
        f"device: {env.get('name')} ({env.get('driver_name')} {env.get('driver_info')}), vkcore "
        f"{env['vkcore_version']}, {env['cpu_count']} CPUs{_load_text(env.get('load_average'))}",
        f"{len(report['samples'])} fresh processes: {len(settings['kernels'])} kernels x "
        f"{len(settings['conditions'])} conditions x {_repetitions(settings)} "
        f"(+{len(report['primed_cache_bytes'])} priming), {report['elapsed_seconds']:.1f} s",
        "",
        format_table(report),
        "ratio columns: the median over kernels of each kernel's warm median / cold median",
        "",
        "total to first result per kernel (ms, median):",
    ]
    per_kernel = report["summary"]["per_kernel"]
    for kernel, by_cond in per_kernel.items():
        cells = "  ".join(
            f"{c} {_ms(by_cond[c]['first_result']['median'])}" for c in settings["conditions"]
        )
        lines.append(f"  {kernel:<18} {cells}")
    lines += ["", *(f"- {f}" for f in report["findings"])]
    return "\n".join(lines)


def _load_text(load: dict[str, Any] | None) -> str:
    if not load or not load.get("before") or not load.get("after"):
        return ""
    return f", load average {load['before'][0]:.2f} before / {load['after'][0]:.2f} after"


def plot(report: dict[str, Any], path: str) -> None:
    """Grouped bars per stage and condition (median, whiskers min-max), log scale.

    Needs matplotlib (``pip install vkcore[plot]``); RuntimeError with that advice if absent.
    """
    try:
        import matplotlib  # noqa: PLC0415 - optional extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'vkcore[plot]'") from None
    conditions = report["settings"]["conditions"]
    pooled = report["summary"]["pooled"]
    width = 0.8 / len(conditions)
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, cond in enumerate(conditions):
        meds, low, high = [], [], []
        for stage in STAGES:
            s = pooled[cond][stage]
            m = (s["median"] or 0.0) * 1e3
            meds.append(m)
            low.append(m - (s["min"] or 0.0) * 1e3)
            high.append((s["max"] or 0.0) * 1e3 - m)
        xs = [j + (i - (len(conditions) - 1) / 2) * width for j in range(len(STAGES))]
        ax.bar(xs, meds, width, yerr=[low, high], capsize=2, label=cond)
    ax.set_xticks(range(len(STAGES)), [STAGE_LABELS[s] for s in STAGES], rotation=20, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("ms (median, min-max)")
    env = report["environment"]
    ax.set_title(
        f"vkcore cold vs warm: {env.get('name')} "
        f"({env.get('driver_name')} {env.get('driver_info')})"
    )
    ax.legend(title="condition", ncol=len(conditions), loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
