"""``vkcore tune``: choose kernel parameters by measurement, once per device.

Parameters whose best value differs between devices:

* ``softmax_workgroup``: lavapipe runs a one-subgroup workgroup several times faster than
  a larger one, a GPU wants hundreds of invocations;
* ``matvec_rows`` and ``matvec_f32_rows``: rows per matvec workgroup (each loaded block of
  x serves that many rows; more rows, more registers), INT8 and float32 kernels;
* ``quant_rows``: rows per quantize/dequantize invocation.

``tune(device)`` times each candidate value on its kernel (device timestamps, medians)
and stores the fastest beside the pipeline cache, in
``<cache root>/pipeline/<pipeline-cache file name>.tune.json``: the same key as the
pipeline cache, so another GPU, driver or driver version never reads these choices.
Kernels ask :func:`choice`; with no file, an unreadable one or a value this device cannot
use, they use their defaults (the values measured best on lavapipe). The rows parameters
are specialization constants: no new SPIR-V per value.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import statistics
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .device import Device
from .pipeline_cache import CacheKey, pipeline_dir, write_atomic

log = logging.getLogger("vkcore")

FORMAT = 1
SUFFIX = ".tune.json"
# Parameters a tune file may hold; the rows parameters with the values worth timing (and
# the only ones accepted from a file).
PARAMETERS = ("softmax_workgroup", "matvec_rows", "matvec_f32_rows", "quant_rows")
ROW_CANDIDATES: dict[str, tuple[int, ...]] = {
    "matvec_rows": (4, 8, 16, 32),
    "matvec_f32_rows": (4, 8, 16),
    "quant_rows": (1, 2, 4, 8),
}

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
    for name in PARAMETERS:
        value = choices.get(name)
        if value is None:
            continue
        if _valid(device, name, value):
            out[name] = value
        else:
            log.warning("ignoring %s=%r in %s: not valid on this device", name, value, path)
    return out


def _valid(device: Device, name: str, value: Any) -> bool:
    if name == "softmax_workgroup":
        return _valid_workgroup(device, value)
    return isinstance(value, int) and not isinstance(value, bool) and value in ROW_CANDIDATES[name]


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


@contextlib.contextmanager
def _trial(device: Device, name: str, value: int) -> Iterator[None]:
    """Kernels on ``device`` see ``name = value`` inside the block (memoized choices only;
    the file is untouched)."""
    with _lock:
        saved = _choices.get(device)
        trial = dict(saved if saved is not None else load(device))
        trial[name] = value
        _choices[device] = trial
    try:
        yield
    finally:
        with _lock:
            if saved is None:
                _choices.pop(device, None)
            else:
                _choices[device] = saved


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


def _rows_kernel(device: Device, name: str, shape: tuple[int, int]) -> Callable[[], Any]:
    """A call of the kernel that ``name`` steers, on random data of ``shape``; its device
    time is the submitter's last. The data lives as long as the returned function."""
    import vkcore

    rng = np.random.default_rng(0)
    w = (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal(shape[1], dtype=np.float32)
    if name == "matvec_rows":
        qt = vkcore.quantize(w, device=device)
        return lambda: vkcore.matvec(qt, x)
    if name == "matvec_f32_rows":
        f32 = vkcore.F32Matrix(w, device=device)
        return lambda: vkcore.matvec_f32(f32, x)
    return lambda: vkcore.quantize(w, symmetric=False, device=device).release()


def measure_rows(
    device: Device, name: str, shape: tuple[int, int], repeats: int
) -> dict[int, float]:
    """Median device seconds of the kernel ``name`` steers, per candidate value."""
    call = _rows_kernel(device, name, shape)
    results: dict[int, float] = {}
    for value in ROW_CANDIDATES[name]:
        with _trial(device, name, value):
            call()  # the first call creates the pipeline for this value
            times = []
            for _ in range(repeats):
                call()
                times.append(device.submitter.last_device_seconds or 0.0)
        results[value] = statistics.median(times)
    return results


def tune(
    device: Device,
    *,
    shape: tuple[int, int] = (1024, 4096),
    rows_shape: tuple[int, int] = (4096, 4096),
    repeats: int = 5,
) -> dict[str, Any]:
    """Measure, store and return the choices for ``device`` (the file's content):
    the softmax workgroup on ``shape``, the rows parameters on ``rows_shape`` weights."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    timings: dict[str, dict[int, float]] = {
        "softmax_workgroup": measure_softmax(device, shape, repeats)
    }
    for name in ROW_CANDIDATES:
        timings[name] = measure_rows(device, name, rows_shape, repeats)
    record = {
        "format": FORMAT,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device.info.name,
        "driver": f"{device.info.driver_name} {device.info.driver_info}".strip(),
        "choices": {name: min(t, key=t.__getitem__) for name, t in timings.items()},
        "measured": {
            name: {
                "shape": list(shape if name == "softmax_workgroup" else rows_shape),
                "repeats": repeats,
                "median_device_seconds": {str(k): v for k, v in t.items()},
            }
            for name, t in timings.items()
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
