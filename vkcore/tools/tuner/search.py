"""Time every candidate value of every parameter, keep the fastest, store the record."""

from __future__ import annotations

import datetime
from typing import Any

from vkcore.device.device import Device
from vkcore.kernels import tuning as store
from vkcore.tools.tuner.paths import kernel_paths
from vkcore.tools.tuner.timing import clock, median_seconds


def measure(
    device: Device, name: str, shape: tuple[int, int], repeats: int, kind: str | None = None
) -> dict[str, dict[int, float]]:
    """Median seconds per path that ``name`` steers and per candidate value, by ``kind``
    of clock (default: :func:`~vkcore.tools.tuner.timing.clock`)."""
    kind = kind or clock(device)
    with kernel_paths(device, name, shape) as paths:
        out: dict[str, dict[int, float]] = {path: {} for path in paths}
        for value in store.values(device, name):
            with store.trial(device, name, value):
                for path, call in paths.items():
                    out[path][value] = median_seconds(device, call, repeats, kind)
    return out


def best(per_path: dict[str, dict[int, float]]) -> tuple[int, dict[int, float]]:
    """The value with the smallest sum of medians over every path, and those sums: one
    call of each path, as a model that runs them all (ties: the first candidate)."""
    first = next(iter(per_path.values()))
    totals = {v: sum(t[v] for t in per_path.values()) for v in first}
    return min(totals, key=totals.__getitem__), totals


def tune(
    device: Device,
    *,
    shape: tuple[int, int] = (512, 4096),
    rows_shape: tuple[int, int] = (4096, 4096),
    repeats: int = 3,
) -> dict[str, Any]:
    """Measure, store and return the choices for ``device`` (the file's content):
    the softmax workgroup on ``shape``, the rows parameters on ``rows_shape`` weights,
    each on every path it steers (see :func:`best`), by device time where the queue has
    timestamps and wall time where it has none (``clock`` in the record)."""
    if type(repeats) is not int or repeats < 1:
        raise ValueError(f"repeats must be an integer of at least 1, got {repeats!r}")
    kind = clock(device)
    choices: dict[str, int] = {}
    measured: dict[str, Any] = {}
    for name in store.PARAMETERS:
        used = shape if name == "softmax_workgroup" else rows_shape
        per_path = measure(device, name, used, repeats, kind)
        choices[name], totals = best(per_path)
        measured[name] = {
            "shape": list(used),
            "repeats": repeats,
            "median_seconds": {p: {str(k): v for k, v in t.items()} for p, t in per_path.items()},
            "total_seconds": {str(k): v for k, v in totals.items()},
        }
    body = {
        "format": store.FORMAT,
        "key": store.key_of(device),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device.info.name,
        "driver": f"{device.info.driver_name} {device.info.driver_info}".strip(),
        "clock": kind,
        "choices": choices,
        "measured": measured,
    }
    return store.save(device, body)
