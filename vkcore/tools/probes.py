"""``vkcore bench --probes``: the measurements behind the explanations in docs/performance.md.

The benchmark's comparisons say *how fast*; these probes say *why*, each one a small
experiment printed with its figures, so that every explanation in docs/performance.md comes from a
command anyone can run:

* ``page_faults``: what a fresh (never touched) array costs to fill, against the same
  array filled a second time: the first-touch page faults that pooled results avoid;
* ``blas_spin``: an INT8 matvec timed right after a numpy ``W @ x`` and after a rest:
  OpenBLAS worker threads keep spinning after a product and take the driver's cores;
* ``dequantize``: ``vkcore.dequantize`` against numpy's ``s * (q - z)`` on one layer;
* ``softmax_passes``: the device time of every pass of both softmax algorithms, next to
  a copy kernel with the same access pattern;
* ``host_gap``: one tiny dispatch resubmitted as the raw floor does, with the host busy
  for a few microseconds between one wait and the next submission: what each microsecond
  of Python between calls costs beyond itself.

Each probe alternates its two sides and reports medians of ``repeats`` samples.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.kernels.common import ceil_div
from vkcore.kernels.sampling import topk_steps
from vkcore.tools.bench.harness import timing

# OpenBLAS threads spin for about this long after a product (the bench rests this long).
REST_SECONDS = 0.2


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def _ms(value: float) -> str:
    """Milliseconds, or n/a where the device has no timestamps (NaN)."""
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


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


def softmax_passes(
    dev: Device, repeats: int, shape: tuple[int, int] = (4096, 4096)
) -> dict[str, Any]:
    """Device time of each pass of both softmax algorithms over a resident input, and of
    the copy kernel with the same access pattern (the most a pass can reach).

    Each pass is its own submission: the rows are laid out as two workgroups per row (the
    split-row stages, whose passes are separate dispatches), so the online statistics
    pass, the safe max and sum passes and the write passes can be timed one by one.
    """
    from vkcore.kernels.softmax import stages as sm

    rows, n = shape
    rng = np.random.default_rng(0)
    x = vkcore.asarray(rng.standard_normal(shape, dtype=np.float32), device=dev)
    y = vkcore.Tensor.empty(shape, np.float32, dev)
    wg = sm.workgroup_size(dev)
    base = sm.plan(dev, rows, n)
    units = base.units
    chunk = ceil_div(ceil_div(units, 2), wg) * wg
    p = sm.Plan(rows, n, base.vec4, units, chunk, ceil_div(units, chunk), wg)
    parts = vkcore.Tensor.empty((rows * p.nchunks * 4,), np.float32, dev)
    names = {"online": ["statistics", "write"], "safe": ["max", "sum", "write"]}
    out: dict[str, Any] = {"probe": "softmax_passes", "shape": list(shape)}
    try:
        assert x.buffer is not None and y.buffer is not None and parts.buffer is not None
        samples: dict[str, list[list[float]]] = {a: [[] for _ in v] for a, v in names.items()}
        for _ in range(repeats + 1):  # the first round warms up; algorithms alternate
            for algorithm in names:
                for k, stage in enumerate(sm.split_stages(algorithm)):
                    steps = sm.dispatches(
                        dev, p, algorithm, x.buffer, y.buffer, parts.buffer, stages=[stage]
                    )
                    samples[algorithm][k].append(
                        dev.submitter.run(steps, timed=True) or float("nan")
                    )
        for algorithm, labels in names.items():
            out[algorithm] = {
                label: _median_ms(ms[1:])
                for label, ms in zip(labels, samples[algorithm], strict=True)
            }
        with timing(dev, True):
            copies = [sm.roofline_copy(x, y) for _ in range(repeats + 1)][1:]
        out["copy_ms"] = _median_ms([s or float("nan") for s in copies])
    finally:
        for t in (x, y, parts):
            assert t.buffer is not None
            t.buffer.destroy()
    return out


def _device_ms(dev: Device, call: Callable[[], Any], repeats: int) -> float:
    """Median device milliseconds of ``call`` over ``repeats`` runs after one warm-up."""
    ms = []
    with timing(dev, True):
        for _ in range(repeats + 1):
            call()
            ms.append(dev.submitter.last_device_seconds or float("nan"))
    return _median_ms(ms[1:])


def topk_rows(dev: Device, repeats: int, shape: tuple[int, int] = (64, 32_000)) -> dict[str, Any]:
    """Device time of ``topk`` and ``softmax_topk`` over resident rows of random, ascending
    and constant values for a few k (the select kernel's costs), and the wall time of one
    k past the select kernel (the sort) against numpy's full argsort."""
    rng = np.random.default_rng(0)
    random = rng.standard_normal(shape, dtype=np.float32)
    rows = {
        "random": random,
        "ascending": np.sort(random, axis=-1),
        "constant": np.ones(shape, np.float32),
    }
    out: dict[str, Any] = {"probe": "topk_rows", "shape": list(shape), "device_ms": {}}
    beyond = min(topk_steps.select_k_max(dev) + 1, shape[1])
    for name, values in rows.items():
        x = vkcore.asarray(values, device=dev)
        try:
            for k in (1, 40, 128, 129):
                for fn in (vkcore.topk, vkcore.softmax_topk):
                    key = f"{fn.__name__} k={k} {name}"
                    out["device_ms"][key] = _device_ms(dev, partial(fn, x, k), repeats)
        finally:
            assert x.buffer is not None
            x.buffer.destroy()
    start = time.perf_counter()
    vkcore.topk(random, beyond, device=dev)
    out["sort_k"], out["sort_s"] = beyond, time.perf_counter() - start
    start = time.perf_counter()
    np.argsort(-random, axis=-1, kind="stable")
    out["numpy_argsort_s"] = time.perf_counter() - start
    return out


def lm_head_matvec(
    dev: Device, repeats: int, shape: tuple[int, int] = (32_000, 4096)
) -> dict[str, Any]:
    """Device time of the LM head's INT8 matvec alone (per-channel weights, float
    activations), and the weight bytes it reads per second."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05)
    h = vkcore.asarray(rng.standard_normal(shape[1], dtype=np.float32), device=dev)
    qt = vkcore.quantize(w, device=dev)
    try:
        device_ms = _device_ms(dev, lambda: vkcore.matvec(qt, h), repeats)
    finally:
        qt.release()
    return {
        "probe": "lm_head_matvec",
        "shape": list(shape),
        "device_ms": device_ms,
        "weight_gb_per_s": shape[0] * shape[1] / device_ms / 1e6,
    }


# Host work between one call's wait and the next submission, in microseconds.
HOST_GAPS_US = (0, 5, 10, 25, 50)


def host_gap(dev: Device, repeats: int, calls: int = 200) -> dict[str, Any]:
    """The raw floor of one tiny dispatch (``program_cases.TINY``: 256 floats) with the
    host spinning ``g`` microseconds between submissions, for each ``g`` of HOST_GAPS_US
    in turn, ``repeats`` rounds; per gap the median microseconds of a submission, the gap
    itself taken off (what a call's Python costs on top of what it takes)."""
    from vkcore.tools.bench import program_cases

    prog = vkcore.Program(program_cases.TINY, device=dev)
    n = program_cases.N
    x = vkcore.asarray(np.ones(n, np.float32), device=dev)
    y = vkcore.Tensor.empty((n,), np.float32, dev)
    step = prog.record(x, y, groups=n // 64, a=2.0, n=n)
    samples: dict[int, list[float]] = {g: [] for g in HOST_GAPS_US}
    with timing(dev, False), dev.submitter.raw_floor([step]) as resubmit:
        for _ in range(repeats):
            for gap in HOST_GAPS_US:
                samples[gap].append(_per_submission_us(resubmit, gap * 1e-6, calls))
    return {
        "probe": "host_gap",
        "us_per_submission": {g: statistics.median(v) for g, v in samples.items()},
    }


def _per_submission_us(resubmit: Callable[[], None], gap_s: float, calls: int) -> float:
    """Median microseconds of ``resubmit()`` after ``gap_s`` of host spinning."""
    out = []
    clock = time.perf_counter
    for _ in range(calls):
        until = clock() + gap_s
        while clock() < until:
            pass
        start = clock()
        resubmit()
        out.append(clock() - start)
    return statistics.median(out) * 1e6


def run_probes(dev: Device, repeats: int = 7) -> list[dict[str, Any]]:
    """Every probe on ``dev``, in a fixed order."""
    return [
        page_faults(repeats),
        blas_spin(dev, repeats),
        dequantize(dev, repeats),
        softmax_passes(dev, repeats),
        topk_rows(dev, repeats),
        lm_head_matvec(dev, repeats),
        host_gap(dev, repeats),
    ]


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
        elif r["probe"] == "softmax_passes":
            shape = f"{r['shape'][0]}x{r['shape'][1]}"
            for algorithm in ("online", "safe"):
                passes = " + ".join(f"{k} {_ms(v)}" for k, v in r[algorithm].items())
                total = _ms(sum(r[algorithm].values()))
                head = f"  softmax {algorithm} {shape}, device ms per pass"
                lines.append(f"{head}: {passes} = {total}")
            lines.append(f"  copy kernel, same access pattern, {shape}: {_ms(r['copy_ms'])} ms")
        elif r["probe"] == "topk_rows":
            shape = f"{r['shape'][0]}x{r['shape'][1]}"
            for what, ms in r["device_ms"].items():
                lines.append(f"  {what}, {shape}: {_ms(ms)} device ms")
            lines.append(
                f"  topk k={r['sort_k']} (sorted), {shape}: {r['sort_s']:.2f} s wall; numpy "
                f"argsort of every row {r['numpy_argsort_s']:.2f} s"
            )
        elif r["probe"] == "lm_head_matvec":
            lines.append(
                f"  INT8 matvec {r['shape'][0]}x{r['shape'][1]} (the LM head): "
                f"{_ms(r['device_ms'])} device ms, {r['weight_gb_per_s']:.1f} GB/s of weights"
            )
        elif r["probe"] == "host_gap":
            costs = ", ".join(
                f"{gap} us: {us:.0f} us" for gap, us in r["us_per_submission"].items()
            )
            lines.append(f"  a tiny dispatch resubmitted after host work of {costs}")
        elif r["probe"] == "dequantize":
            lines.append(
                f"  dequantize {r['shape'][0]}x{r['shape'][1]}: vkcore {r['vkcore_ms']:.1f} ms, "
                f"numpy s * (q - z) {r['numpy_ms']:.1f} ms (ratio {r['ratio']:.2f})"
            )
    return "\n".join(lines)
