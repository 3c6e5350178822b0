"""Side-by-side timing: the Comparison record, the alternating runner, progress."""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO

from vkcore.device.device import Device

Clock = str  # "wall" or "device"


@dataclass
class Comparison:
    """One baseline/vkcore pair on one shape, with every sample in seconds."""

    group: str
    title: str
    shape: tuple[int, ...]
    clock: Clock
    baseline: str
    candidate: str
    baseline_s: list[float] = field(default_factory=list)
    candidate_s: list[float] = field(default_factory=list)
    candidate_device_s: list[float] = field(default_factory=list)
    min_bytes: int = 0  # bytes the vkcore call must move at least
    overhead: bool = False  # report candidate / baseline instead of baseline / candidate

    @property
    def measured(self) -> bool:
        """False for a device-time row on a device without timestamps (no samples)."""
        return bool(self.baseline_s) and bool(self.candidate_s)

    @property
    def baseline_median(self) -> float | None:
        return statistics.median(self.baseline_s) if self.baseline_s else None

    @property
    def candidate_median(self) -> float | None:
        return statistics.median(self.candidate_s) if self.candidate_s else None

    @property
    def ratio(self) -> float | None:
        """baseline / vkcore (call / floor for the overhead row); None when not measured."""
        if self.baseline_median is None or self.candidate_median is None:
            return None
        if self.overhead:
            return self.candidate_median / self.baseline_median
        return self.baseline_median / self.candidate_median

    @property
    def spread(self) -> tuple[float, float]:
        """The ratio's range over pairs of samples taken side by side (min, max)."""
        pairs = [
            (c / b if self.overhead else b / c)
            for b, c in zip(self.baseline_s, self.candidate_s, strict=False)
            if b > 0 and c > 0
        ]
        return (min(pairs), max(pairs)) if pairs else (float("nan"), float("nan"))

    @property
    def ratio_of_minimums(self) -> float | None:
        """The ratio of the fastest samples: on a machine shared with other work it is
        the closer estimate of what each side costs undisturbed."""
        if not self.measured:
            return None
        if self.overhead:
            return min(self.candidate_s) / min(self.baseline_s)
        return min(self.baseline_s) / min(self.candidate_s)

    @property
    def bandwidth(self) -> float | None:
        """Effective bandwidth of the vkcore call in bytes/s on this row's clock."""
        if not self.min_bytes or not self.candidate_median:
            return None
        return self.min_bytes / self.candidate_median

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            ratio=self.ratio,
            ratio_spread=list(self.spread),
            ratio_of_minimums=self.ratio_of_minimums,
            baseline_median_s=self.baseline_median,
            candidate_median_s=self.candidate_median,
            candidate_device_median_s=(
                statistics.median(self.candidate_device_s) if self.candidate_device_s else None
            ),
            bandwidth_bytes_per_s=self.bandwidth,
        )
        return d


@contextlib.contextmanager
def timing(dev: Device, on: bool) -> Iterator[None]:
    """Calls and sequences of ``dev`` timed (``on``) or not inside the block: device-time
    rows and probes ask for timestamps, call-path rows measure calls without them."""
    was, dev.timed = dev.timed, on
    try:
        yield
    finally:
        dev.timed = was


class Progress:
    """A one-line progress bar on stderr (one line per step when it is not a terminal)."""

    def __init__(self, total: int, stream: TextIO = sys.stderr, enabled: bool = True) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = round(width * self.done / self.total)
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        if self.tty:
            self.stream.write("\r" + line[:100].ljust(100))
            if self.done >= self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# The BLAS comparison runs each side in blocks of BLAS_BLOCK calls with BLAS_SETTLE seconds
# of rest between blocks (see side_by_side): OpenBLAS threads spin after each product.
BLAS_BLOCK = 5


BLAS_SETTLE = 0.2


def side_by_side(
    baseline: Callable[[], Any],
    candidate: Callable[[], Any],
    repeats: int,
    *,
    device: Device | None = None,
    candidate_clock: Clock = "wall",
    block: int = 1,
    settle: float = 0.0,
) -> tuple[list[float], list[float], list[float]]:
    """Alternate the two calls, ``block`` timed calls of one side at a time, until each
    side has ``repeats`` samples, after one warm-up of each; the order of the two sides
    alternates from round to round.

    Returns baseline seconds, candidate seconds (on ``candidate_clock``) and the
    candidate's device seconds (empty without a device). ``settle`` seconds of rest go
    between blocks, for a call that leaves threads busy behind it: OpenBLAS workers spin
    for about 0.1 s after a product, and on 2 cores they take lavapipe's threads away
    from whatever runs next (measured: an INT8 matvec right after ``W @ x`` takes 4.6 ms,
    2.9 ms after a rest). Blocks let each side run back to back, as it would in a loop.
    """
    baseline()
    candidate()
    base: list[float] = []
    cand: list[float] = []
    dev_s: list[float] = []
    for i in range(-(-repeats // block)):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            time.sleep(settle)
            for _ in range(min(block, repeats - i * block)):
                start = time.perf_counter()
                (baseline if which == 0 else candidate)()
                wall = time.perf_counter() - start
                if which == 0:
                    base.append(wall)
                    continue
                seconds = device.submitter.last_device_seconds if device is not None else None
                if seconds is not None:
                    dev_s.append(seconds)
                cand.append(
                    seconds if candidate_clock == "device" and seconds is not None else wall
                )
    time.sleep(settle)
    return base, cand, dev_s


def device_side_by_side(
    dev: Device, baseline: Callable[[], Any], candidate: Callable[[], Any], pairs: int
) -> tuple[list[float], list[float]]:
    """Both calls on the device clock, alternating, after one warm-up each: each call's
    device seconds are read right after it. Two empty lists on a device without
    timestamps (its rows then print n/a)."""
    baseline()
    candidate()
    base: list[float] = []
    cand: list[float] = []
    for i in range(pairs):
        for which in (0, 1) if i % 2 == 0 else (1, 0):
            (baseline if which == 0 else candidate)()
            seconds = dev.submitter.last_device_seconds
            if seconds is None:
                return [], []
            (base if which == 0 else cand).append(seconds)
    return base, cand


def call_against_floor(
    dev: Device, call: Callable[[], Any], repeats: int
) -> tuple[list[float], list[float]]:
    """Wall seconds of ``call`` and of resubmitting the recording it keeps (the floor
    under any call that runs the same commands), alternating, after one warm-up call."""
    call()  # records the command buffer the floor resubmits
    floor: list[float] = []
    calls: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        calls.append(time.perf_counter() - start)
        floor.extend(dev.submitter.resubmit_seconds(1))
    return floor, calls
