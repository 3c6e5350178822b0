"""How the tuner times one kernel call: device time where the queue has timestamps,
else wall time around the call."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from vkcore.device.device import Device


def clock(device: Device) -> str:
    """``"device"`` where the compute queue has timestamps, else ``"wall"``: a queue with
    ``timestampValidBits == 0`` is timed by the host clock around each call."""
    return "device" if device.submitter.timestamps else "wall"


@contextlib.contextmanager
def device_seconds(device: Device) -> Iterator[list[float]]:
    """Inside the block, the device seconds of every submission are appended to the
    yielded list (a kernel call may submit more than once, e.g. one per row chunk)."""
    spent: list[float] = []
    with device.submitter.observed(timed=True) as seen:
        try:
            yield spent
        finally:
            spent.extend(secs or 0.0 for _, secs in seen)


def seconds(device: Device, call: Callable[[], Any], kind: str) -> float:
    """Seconds of one ``call`` by ``kind`` of clock: device time summed over its
    submissions, or wall time from the host clock."""
    if kind == "wall":
        start = time.perf_counter()
        call()
        return time.perf_counter() - start
    with device_seconds(device) as spent:
        call()
    return sum(spent)


def median_seconds(device: Device, call: Callable[[], Any], repeats: int, kind: str) -> float:
    """The median of ``repeats`` timed calls, after one untimed call."""
    call()  # the first call creates the pipeline for this value (and compiles the variant)
    return statistics.median(seconds(device, call, kind) for _ in range(repeats))
