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
    sub = device.submitter
    original = sub.run
    spent: list[float] = []

    def run(dispatches: Any, *, timed: bool = True, read_seconds: bool = True) -> float | None:
        out = original(dispatches, timed=timed, read_seconds=read_seconds)
        spent.append(sub.last_device_seconds or 0.0)
        return out

    setattr(sub, "run", run)  # noqa: B010 - an instance attribute shadows the method
    try:
        yield spent
    finally:
        delattr(sub, "run")


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
