"""``vkcore tune``: choose kernel parameters by measurement, once per device.

The softmax workgroup size is the parameter that differs most between devices: lavapipe
runs a one-subgroup workgroup several times faster than a larger one, a GPU wants
hundreds of invocations. ``tune(device)`` times the online softmax with each candidate
(device timestamps, medians) and stores the fastest beside the pipeline cache, in
``<cache root>/pipeline/<pipeline-cache file name>.tune.json``: the same key as the
pipeline cache, so another GPU, driver or driver version never reads this choice.
Kernels ask :func:`choice`; with no file (or an unreadable one) they use their defaults.
"""

from __future__ import annotations

import datetime
import json
import logging
import statistics
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from .device import Device
from .pipeline_cache import CacheKey, pipeline_dir, write_atomic

log = logging.getLogger("vkcore")

FORMAT = 1
SUFFIX = ".tune.json"
# Parameters a tune file may hold, with the check a stored value must pass on the device.
PARAMETERS = ("softmax_workgroup",)

_choices: weakref.WeakKeyDictionary[Device, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def tune_path(device: Device) -> Path:
    """Where ``device``'s choices live: next to its pipeline-cache file, same key."""
    cache = getattr(device, "pipeline_cache", None)
    folder = cache.folder if cache is not None and cache.folder is not None else pipeline_dir()
    name = CacheKey.from_info(device.info).file_name()
    return folder / (name.rsplit(".", 1)[0] + SUFFIX)


def _valid_workgroup(device: Device, value: Any) -> bool:
    limit = min(
        device.info.max_compute_work_group_size[0], device.info.max_compute_work_group_invocations
    )
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit


def load(device: Device) -> dict[str, Any]:
    """The stored choices for ``device`` (empty when there is no usable file)."""
    path = tune_path(device)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable tune file %s: %s", path, exc)
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        log.warning("ignoring tune file %s: unknown format", path)
        return {}
    choices = data.get("choices", {})
    if not isinstance(choices, dict):
        return {}
    out = {}
    wg = choices.get("softmax_workgroup")
    if wg is not None:
        if _valid_workgroup(device, wg):
            out["softmax_workgroup"] = wg
        else:
            log.warning("ignoring softmax_workgroup=%r in %s: not valid on this device", wg, path)
    return out


def choice(device: Device, name: str) -> Any:
    """A tuned parameter for ``device`` or None (read once per device, then memoized)."""
    if name not in PARAMETERS:
        raise ValueError(f"name must be one of {PARAMETERS}, got {name!r}")
    with _lock:
        found = _choices.get(device)
        if found is None:
            found = _choices[device] = load(device)
    return found.get(name)


def forget(device: Device) -> None:
    """Drop the memoized choices of ``device`` (after a tune or a reset)."""
    with _lock:
        _choices.pop(device, None)


def candidates(device: Device) -> list[int]:
    """Workgroup sizes worth timing: the subgroup size and a few multiples up to 256."""
    sub = max(1, device.info.subgroup_size or 1)
    sizes = sorted({sub, 2 * sub, 64, 128, 256})
    return [s for s in sizes if _valid_workgroup(device, s)]


def measure_softmax(device: Device, shape: tuple[int, int], repeats: int) -> dict[int, float]:
    """Median device seconds of the online softmax on ``shape`` per candidate workgroup."""
    from .kernels import _common as c
    from .kernels import softmax as sm
    from .memory import Buffer, Tensor, asarray

    rng = np.random.default_rng(0)
    x = asarray(rng.standard_normal(shape, dtype=np.float32), device=device)
    y = Tensor.empty(shape, np.float32, device)
    assert x.buffer is not None and y.buffer is not None
    results: dict[int, float] = {}
    try:
        for wg in candidates(device):
            p = sm.plan(device, shape[0], shape[1], workgroup=wg)
            parts = (
                Buffer(device, shape[0] * p.nchunks * 16)
                if p.nchunks > 1
                else c.dummy_buffer(device)
            )
            try:
                steps = sm._dispatches(device, p, "online", x.buffer, y.buffer, parts)
                device.submitter.run(steps)  # the first run compiles the variant
                times = [device.submitter.run(steps) or 0.0 for _ in range(repeats)]
            finally:
                if p.nchunks > 1:
                    parts.destroy()
            results[wg] = statistics.median(times)
    finally:
        x.buffer.destroy()
        y.buffer.destroy()
    return results


def tune(
    device: Device, *, shape: tuple[int, int] = (1024, 4096), repeats: int = 5
) -> dict[str, Any]:
    """Measure, store and return the choices for ``device`` (the file's content)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    timings = measure_softmax(device, shape, repeats)
    best = min(timings, key=lambda wg: timings[wg])
    record = {
        "format": FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device.info.name,
        "driver": f"{device.info.driver_name} {device.info.driver_info}".strip(),
        "choices": {"softmax_workgroup": best},
        "measured": {
            "softmax_workgroup": {
                "shape": list(shape),
                "repeats": repeats,
                "median_device_seconds": {str(k): v for k, v in timings.items()},
            }
        },
    }
    path = tune_path(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps(record, indent=2) + "\n").encode())
    forget(device)
    return record


def reset(device: Device) -> bool:
    """Delete ``device``'s tune file; True if there was one."""
    path = tune_path(device)
    forget(device)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
