"""The child: one fresh process that times every stage of its kernels, JSON on stdout.

The only way to be cold is a new process: nothing in memory, nothing JIT-compiled. The
parent (:mod:`.harness`) starts ``python -c PROBE_CODE KERNEL...``; the clock starts
before ``import vkcore``, so the ``import`` stage is real.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import vkcore
from vkcore.tools.coldwarm.cases import KERNELS, KernelCase, check_names
from vkcore.tools.coldwarm.conditions import REPORTED_ENV

# The probe's command line: the clock starts before vkcore (and numpy) are imported.
PROBE_CODE = (
    "import time; _t = time.perf_counter(); import sys; "
    "from vkcore.tools.coldwarm.child import probe_main; probe_main(_t, sys.argv[1:])"
)

# (wall seconds, device seconds or None) of each submission.
Submissions = list[tuple[float, float | None]]


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
    dev = vkcore.Device(validation=False, timed=True)  # reports device seconds
    startup = {"import": imported - started, "device": time.perf_counter() - imported}
    known_cases = {**KERNELS, **(cases or {})}
    results = {}
    try:
        with dev.submitter.observed() as submissions:  # every submission's timings
            for index, name in enumerate(kernel_names):
                result = _time_kernel(dev, known_cases[name], startup, submissions)
                if index:  # import and device creation happen once, before the first kernel
                    result["stages"].update({"import": None, "device": None})
                results[name] = result
        evidence = _cache_evidence(dev.pipeline_cache)
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
        "env": {k: os.environ.get(k) for k in REPORTED_ENV},
    }


def _time_kernel(
    dev: vkcore.Device, case: KernelCase, startup: dict[str, float], submissions: Submissions
) -> dict[str, Any]:
    """One kernel's stages: its input made first (untimed), then two calls."""
    run_once = case(dev)
    known = len(dev.pipeline_stats())
    submissions.clear()
    t_call = time.perf_counter()
    run_once()
    first_result = startup["import"] + startup["device"] + time.perf_counter() - t_call
    first = list(submissions)
    submissions.clear()
    run_once()
    second = list(submissions)
    created = dev.pipeline_stats()[known:]
    stages = {
        **startup,
        "spirv": sum(p["spirv_seconds"] for p in created),
        "module": sum(p["module_seconds"] for p in created),
        "pipeline": sum(p["create_seconds"] for p in created),
        # None, not 0, if a kernel ever bypasses submitter.run_kept: never a silent zero.
        "first_dispatch": sum(w for w, _ in first) if first else None,
        "second_dispatch": sum(w for w, _ in second) if second else None,
        "first_result": first_result,
    }
    return {
        "stages": stages,
        "pipelines": created,
        "first_dispatch_device_seconds": _device_sum(first),
        "second_dispatch_device_seconds": _device_sum(second),
    }


def _cache_evidence(cache: Any) -> dict[str, Any]:
    """What the pipeline cache says it did (None where this vkcore does not say)."""
    return {
        "loaded_bytes": getattr(cache, "loaded_bytes", None),
        "load_status": getattr(cache, "load_status", None),
        "cache_hits": getattr(cache, "hits", None),
        "creations": getattr(cache, "creations", None),
    }


def _device_sum(submissions: Submissions) -> float | None:
    times = [d for _, d in submissions]
    return (
        None
        if not times or any(d is None for d in times)
        else sum(d for d in times if d is not None)
    )


def probe_main(started: float, argv: Sequence[str]) -> None:
    """Entry point of a probe process: kernels on the command line (a user's shader as
    its ``--shader-case=`` argument), JSON on stdout."""
    from vkcore.tools.coldwarm.shader import ARG_PREFIX, ShaderCase

    shaders = [ShaderCase.from_arg(a) for a in argv if a.startswith(ARG_PREFIX)]
    cases: dict[str, KernelCase] = {c.name: c.prepare for c in shaders}
    names = [a for a in argv if not a.startswith(ARG_PREFIX)]
    print(json.dumps(probe(check_names(names, {**KERNELS, **cases}, "kernels"), started, cases)))
