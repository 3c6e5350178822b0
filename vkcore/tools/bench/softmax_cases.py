"""The softmax comparisons: online vs safe, vs numpy, and the per-call overhead."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.baselines import numpy_log_softmax, numpy_softmax
from vkcore.tools.bench.harness import (
    Comparison,
    call_against_floor,
    device_side_by_side,
    side_by_side,
)

# Online/safe shapes of at most SMALL_SHAPE_ELEMENTS take ~0.1 ms, and a call swings by
# +-50% with thread wake-ups: they get SMALL_SHAPE_REPEAT_FACTOR times more pairs.
SMALL_SHAPE_ELEMENTS = 1 << 16


SMALL_SHAPE_REPEAT_FACTOR = 15


def softmax_online_vs_safe(
    dev: Device, shapes: list[tuple[int, int]], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """Device time of the two algorithms on device-resident tensors."""
    for rows, n in shapes:
        x = vkcore.asarray(rng.standard_normal((rows, n), dtype=np.float32), device=dev)

        def run(algorithm: str, x: vkcore.Tensor = x) -> Callable[[], None]:
            def call() -> None:
                y = vkcore.softmax(x, algorithm=algorithm)
                assert y.buffer is not None
                y.buffer.destroy()

            return call

        comp = Comparison(
            "online_vs_safe_long" if n >= 1 << 20 else "online_vs_safe",
            "softmax online vs safe (device time, resident)",
            (rows, n),
            "device",
            "safe (3 passes)",
            "online (2 passes)",
            min_bytes=8 * rows * n,
        )
        # Calls on small shapes last ~0.1 ms and single samples swing by +-50%: take more
        # pairs there (cheap) so the median ratio is not decided by scheduling noise.
        pairs = repeats * SMALL_SHAPE_REPEAT_FACTOR if rows * n <= SMALL_SHAPE_ELEMENTS else repeats
        safe_dev, online_dev = device_side_by_side(dev, run("safe"), run("online"), pairs)
        comp.baseline_s, comp.candidate_s, comp.candidate_device_s = (
            safe_dev,
            online_dev,
            online_dev,
        )
        assert x.buffer is not None
        x.buffer.destroy()
        yield comp


def softmax_vs_numpy(
    dev: Device, shape: tuple[int, int], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """numpy softmax against vkcore's, numpy in/out and then on resident tensors."""
    x = rng.standard_normal(shape, dtype=np.float32)

    def against_numpy(
        group: str,
        title: str,
        candidate: Callable[[], Any],
        baseline: Callable[[np.ndarray], Any] = numpy_softmax,
        baseline_name: str = "numpy exp/sum",
    ) -> Comparison:
        base, cand, dev_s = side_by_side(lambda: baseline(x), candidate, repeats, device=dev)
        return Comparison(
            group,
            title,
            shape,
            "wall",
            baseline_name,
            "vkcore online",
            baseline_s=base,
            candidate_s=cand,
            candidate_device_s=dev_s,
            min_bytes=8 * x.size,
        )

    yield against_numpy(
        "softmax_vs_numpy_e2e",
        "softmax vs numpy (wall, numpy in/out)",
        lambda: vkcore.softmax(x, device=dev),
    )
    log_name, log_baseline = numpy_log_softmax()
    yield against_numpy(
        "log_softmax_vs_numpy",
        "log_softmax vs scipy/numpy (wall, numpy in/out)",
        lambda: vkcore.log_softmax(x, device=dev),
        log_baseline,
        log_name,
    )
    t = vkcore.asarray(x, device=dev)

    def resident() -> None:
        y = vkcore.softmax(t)
        assert y.buffer is not None
        y.buffer.destroy()

    yield against_numpy(
        "softmax_vs_numpy_resident", "softmax vs numpy (wall, Tensor in/out)", resident
    )
    assert t.buffer is not None
    t.buffer.destroy()


def tiny_overhead(dev: Device, repeats: int, rng: Any) -> Iterator[Comparison]:
    """A 1x256 softmax call, numpy in and out, against resubmitting its own recording."""
    x = rng.standard_normal((1, 256), dtype=np.float32)
    floor, calls = call_against_floor(dev, lambda: vkcore.softmax(x, device=dev), repeats)
    yield Comparison(
        "tiny_overhead",
        "tiny softmax call vs resubmit floor (wall)",
        (1, 256),
        "wall",
        "resubmit prerecorded",
        "vkcore.softmax(numpy)",
        floor,
        calls,
        overhead=True,
    )
