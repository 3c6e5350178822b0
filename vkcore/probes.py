"""``vkcore bench --probes``: the measurements behind the README's explanations.

The benchmark's comparisons say *how fast*; these probes say *why*, each one a small
experiment printed with its figures, so that every explanation in the README comes from a
command anyone can run:

* ``page_faults``: what a fresh (never touched) array costs to fill, against the same
  array filled a second time: the first-touch page faults that pooled results avoid;
* ``blas_spin``: an INT8 matvec timed right after a numpy ``W @ x`` and after a rest:
  OpenBLAS worker threads keep spinning after a product and take the driver's cores;
* ``dequantize``: ``vkcore.dequantize`` against numpy's ``s * (q - z)`` on one layer.

Each probe alternates its two sides and reports medians of ``repeats`` samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import vkcore

from .device import Device

# OpenBLAS threads spin for about this long after a product (the bench rests this long).
REST_SECONDS = 0.2


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _minor_faults() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def page_faults(repeats: int, nbytes: int = 64 << 20) -> dict[str, Any]:
    """Fill a fresh ``nbytes`` array, then fill it again: first touch against reuse."""
    fresh: list[float] = []
    reused: list[float] = []
    faults: list[int] = []
    for _ in range(repeats):
        before = _minor_faults()
        start = time.perf_counter()
        a = np.empty(nbytes // 4, dtype=np.float32)
        a.fill(1.0)
        fresh.append(time.perf_counter() - start)
        after = _minor_faults()
        if before is not None and after is not None:
            faults.append(after - before)
        start = time.perf_counter()
        a.fill(2.0)
        reused.append(time.perf_counter() - start)
        del a
    return {
        "probe": "page_faults",
        "bytes": nbytes,
        "fresh_ms": _median_ms(fresh),
        "reused_ms": _median_ms(reused),
        "first_touch_ms": _median_ms(fresh) - _median_ms(reused),
        "minor_faults": statistics.median(faults) if faults else None,
    }


def blas_spin(dev: Device, repeats: int, shape: tuple[int, int] = (4096, 4096)) -> dict[str, Any]:
    """INT8 matvec wall time right after ``W @ x`` against after REST_SECONDS of rest."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)
    x = rng.standard_normal(shape[1], dtype=np.float32)
    qt = vkcore.quantize(w, device=dev)
    try:

        def matvec_after(prelude: Callable[[], Any]) -> float:
            prelude()
            start = time.perf_counter()
            vkcore.matvec(qt, x)
            return time.perf_counter() - start

        matvec_after(lambda: None)
        after_blas: list[float] = []
        after_rest: list[float] = []
        for i in range(repeats):
            sides = ((after_blas, lambda: w @ x), (after_rest, lambda: time.sleep(REST_SECONDS)))
            for samples, prelude in sides if i % 2 == 0 else sides[::-1]:
                time.sleep(REST_SECONDS)
                samples.append(matvec_after(prelude))
    finally:
        qt.release()
    return {
        "probe": "blas_spin",
        "shape": list(shape),
        "after_blas_ms": _median_ms(after_blas),
        "after_rest_ms": _median_ms(after_rest),
        "rest_s": REST_SECONDS,
    }


def dequantize(dev: Device, repeats: int, shape: tuple[int, int] = (4096, 4096)) -> dict[str, Any]:
    """vkcore.dequantize against numpy's ``s[:, None] * (q - z[:, None])`` (float32)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape, dtype=np.float32)
    qt = vkcore.quantize(w, device=dev)
    try:
        q = qt.q
        s = qt.scale.astype(np.float32)[:, None]
        z = qt.zero_point.astype(np.int16)[:, None]

        def numpy_call() -> np.ndarray:
            return s * (q.astype(np.int16) - z).astype(np.float32)

        numpy_s: list[float] = []
        vk_s: list[float] = []
        numpy_call()
        vkcore.dequantize(qt)
        for i in range(repeats):
            sides = ((numpy_s, numpy_call), (vk_s, lambda: vkcore.dequantize(qt)))
            for samples, call in sides if i % 2 == 0 else sides[::-1]:
                start = time.perf_counter()
                call()
                samples.append(time.perf_counter() - start)
    finally:
        qt.release()
    return {
        "probe": "dequantize",
        "shape": list(shape),
        "numpy_ms": _median_ms(numpy_s),
        "vkcore_ms": _median_ms(vk_s),
        "ratio": statistics.median(numpy_s) / statistics.median(vk_s),
    }


def run_probes(dev: Device, repeats: int = 7) -> list[dict[str, Any]]:
    """Every probe on ``dev``, in a fixed order."""
    return [page_faults(repeats), blas_spin(dev, repeats), dequantize(dev, repeats)]


def format_probes(results: list[dict[str, Any]]) -> str:
    """One line per probe, in words."""
    lines = ["probes (medians):"]
    for r in results:
        if r["probe"] == "page_faults":
            faults = "" if r["minor_faults"] is None else f", {r['minor_faults']:.0f} page faults"
            lines.append(
                f"  fresh {r['bytes'] >> 20} MiB array: filled in {r['fresh_ms']:.1f} ms, "
                f"again in {r['reused_ms']:.1f} ms: first touch costs "
                f"{r['first_touch_ms']:.1f} ms{faults}"
            )
        elif r["probe"] == "blas_spin":
            lines.append(
                f"  INT8 matvec {r['shape'][0]}x{r['shape'][1]}: {r['after_blas_ms']:.2f} ms "
                f"right after numpy W @ x, {r['after_rest_ms']:.2f} ms after {r['rest_s']} s "
                "of rest"
            )
        elif r["probe"] == "dequantize":
            lines.append(
                f"  dequantize {r['shape'][0]}x{r['shape'][1]}: vkcore {r['vkcore_ms']:.1f} ms, "
                f"numpy s * (q - z) {r['numpy_ms']:.1f} ms (ratio {r['ratio']:.2f})"
            )
    return "\n".join(lines)
