"""``vkcore bench``: every kernel against its honest baseline, side by side in one process.

Each comparison runs the baseline and the vkcore call on the same data, alternating
them repetition after repetition (so a noisy neighbour slows both alike), and keeps every
sample. A ratio is ``median(baseline) / median(vkcore)``: above 1 means vkcore is faster.
Two clocks are used and both are kept: wall time (numpy in, numpy out, transfers
included, or Tensor in, Tensor out where the comparison says "resident") and device time
from the timestamp queries around the kernel's dispatches.

The per-call overhead row is the other way round: it reports ``call / floor``, where the
floor is resubmitting the very command buffer the call recorded, with every struct built
in advance (:meth:`vkcore.commands.Submitter.resubmit_seconds`).

Effective bandwidth counts the bytes a kernel must move at least (each input read once,
each output written once) per second of wall or device time, next to this machine's copy
bandwidth measured in the same run (a numpy copy of a large array): a roofline position.

The INT8 and quantize comparisons run only when the package has those kernels.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TextIO

import numpy as np

import vkcore

from .device import Device

Clock = str  # "wall" or "device"

# The targets: (comparison group, kind, value). ">=" on ratio, "<=" on call/floor.
TARGETS: dict[str, tuple[str, float, str]] = {
    "online_vs_safe_long": (">=", 1.25, "online vs safe softmax, rows of 2^20 and longer"),
    "online_vs_safe_all": (">=", 0.95, "online vs safe softmax, every shape (worst)"),
    "softmax_vs_numpy_e2e": (">=", 2.0, "softmax vs numpy, 4096x4096, end to end"),
    "softmax_vs_numpy_resident": (">=", 3.0, "softmax vs numpy, 4096x4096, device-resident"),
    "log_softmax_vs_numpy": (">=", 2.0, "log_softmax vs scipy/numpy, 4096x4096, end to end"),
    "int8_vs_fp32": (">=", 3.0, "INT8 weight-only matvec vs fp32 matvec kernel"),
    "int8_vs_blas": (">=", 1.0, "INT8 matvec vs numpy BLAS float32 matvec"),
    "quantize_vs_numpy": (">=", 3.0, "quantize vs numpy"),
    "tiny_overhead": ("<=", 2.0, "tiny softmax end to end vs prerecorded-submit floor"),
}

SOFTMAX_SHAPES_FULL = [
    (1, 256),
    (64, 256),
    (4096, 256),
    (1, 4096),
    (64, 4096),
    (4096, 4096),
    (1, 1 << 16),
    (64, 1 << 16),
    (1, 1 << 20),
    (8, 1 << 20),
    (1, 1 << 22),
    (4, 1 << 22),
]
SOFTMAX_SHAPES_QUICK = [(1, 256), (4096, 256), (4096, 4096), (1, 1 << 20), (8, 1 << 20)]
MATVEC_SHAPES_FULL = [(4096, 4096), (11008, 4096)]
MATVEC_SHAPES_QUICK = [(4096, 4096)]


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


def copy_bandwidth(repeats: int, nbytes: int = 256 << 20) -> list[float]:
    """Bytes per second of a numpy copy (read + write counted) of an ``nbytes`` array."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        out.append(2 * nbytes / (time.perf_counter() - start))
    return out


def kernel_copy_bandwidth(dev: Device, repeats: int, elements: int = 1 << 24) -> list[float]:
    """Bytes per second (read + write, device time) of a copy kernel that loads and stores
    like the softmax kernels do: the device's own roof for them."""
    from .kernels.softmax import roofline_copy

    x = vkcore.asarray(np.ones(elements, dtype=np.float32), device=dev)
    y = vkcore.Tensor.empty((elements,), np.float32, dev)
    try:
        roofline_copy(x, y)
        seconds = [roofline_copy(x, y) for _ in range(repeats)]
        return [2 * x.nbytes / s for s in seconds if s]
    finally:
        for t in (x, y):
            assert t.buffer is not None
            t.buffer.destroy()


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """The baseline a numpy user writes: exp(x - max) / sum, float32 throughout."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def numpy_log_softmax() -> tuple[str, Callable[[np.ndarray], np.ndarray]]:
    """scipy.special.log_softmax where scipy is installed, else what a numpy user writes:
    ``x - m - log(sum(exp(x - m)))``, float32 throughout."""
    try:
        from scipy.special import log_softmax as scipy_log_softmax
    except ImportError:

        def log_softmax(x: np.ndarray) -> np.ndarray:
            shifted = x - x.max(axis=-1, keepdims=True)
            return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))

        return "numpy x - m - log(sum(exp))", log_softmax
    return "scipy.special.log_softmax", partial(scipy_log_softmax, axis=-1)


def numpy_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 RTN in numpy: s = max|w| / 127, q = roundEven(w / s)."""
    s = np.abs(w).max(axis=1) / np.float32(127)
    s = np.where(s == 0, np.float32(1), s).astype(np.float32)
    q = np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8)
    return q, s


# ---------------------------------------------------------------------------- comparisons
# Online/safe shapes of at most SMALL_SHAPE_ELEMENTS take ~0.1 ms, and a call swings by
# +-50% with thread wake-ups: they get SMALL_SHAPE_REPEAT_FACTOR times more pairs.
SMALL_SHAPE_ELEMENTS = 1 << 16
SMALL_SHAPE_REPEAT_FACTOR = 15
# The BLAS comparison runs each side in blocks of BLAS_BLOCK calls with BLAS_SETTLE seconds
# of rest between blocks (see side_by_side): OpenBLAS threads spin after each product.
BLAS_BLOCK = 5
BLAS_SETTLE = 0.2


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
    vkcore.softmax(x, device=dev)  # records the command buffer the floor resubmits
    floor: list[float] = []
    calls: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        vkcore.softmax(x, device=dev)
        calls.append(time.perf_counter() - start)
        floor.extend(dev.submitter.resubmit_seconds(1))
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


def matvec_comparisons(
    dev: Device, shapes: list[tuple[int, int]], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """INT8 weight-only matvec against vkcore's fp32 matvec and numpy's BLAS W @ x."""
    for m, n in shapes:
        w = (rng.standard_normal((m, n), dtype=np.float32) * 0.05).astype(np.float32)
        x = rng.standard_normal(n, dtype=np.float32)
        qt = vkcore.quantize(w, device=dev)
        f32 = vkcore.F32Matrix(w, device=dev)
        try:

            def int8_call(qt: Any = qt, x: np.ndarray = x) -> Any:
                return vkcore.matvec(qt, x, activations="float")

            def f32_call(f32: Any = f32, x: np.ndarray = x) -> Any:
                return vkcore.matvec_f32(f32, x)

            f32_dev, int8_dev = device_side_by_side(dev, f32_call, int8_call, repeats)
            yield Comparison(
                "int8_vs_fp32",
                "INT8 weight-only matvec vs fp32 matvec (device time)",
                (m, n),
                "device",
                "vkcore fp32 matvec",
                "vkcore int8 matvec",
                f32_dev,
                int8_dev,
                int8_dev,
                m * n + 4 * (n + m),
            )
            base, cand, dev_s = side_by_side(
                partial(np.matmul, w, x),
                int8_call,
                repeats,
                device=dev,
                block=BLAS_BLOCK,
                settle=BLAS_SETTLE,
            )
            yield Comparison(
                "int8_vs_blas",
                "INT8 matvec vs numpy BLAS W @ x (wall)",
                (m, n),
                "wall",
                "numpy float32 W @ x",
                "vkcore int8 matvec",
                base,
                cand,
                dev_s,
                m * n + 4 * (n + m),
            )
        finally:
            qt.release()
            f32.release()


def quantize_comparison(
    dev: Device, shape: tuple[int, int], repeats: int, rng: Any
) -> Iterator[Comparison]:
    """Per-channel symmetric int8 quantize (numpy in, weights left on the device) vs numpy."""
    w = rng.standard_normal(shape, dtype=np.float32)

    def vk_call() -> None:
        vkcore.quantize(w, device=dev).release()

    base, cand, dev_s = side_by_side(lambda: numpy_quantize(w), vk_call, repeats, device=dev)
    yield Comparison(
        "quantize_vs_numpy",
        "quantize per-channel symmetric vs numpy (wall)",
        shape,
        "wall",
        "numpy RTN",
        "vkcore.quantize",
        base,
        cand,
        dev_s,
        5 * w.size,
    )


# ---------------------------------------------------------------------------- the run
def environment(dev: Device) -> dict[str, Any]:
    """Who ran it where: date, CPU, thread settings, device and driver."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "vkcore": vkcore.__version__,
        "device": dev.info.name,
        "driver": f"{dev.info.driver_name} {dev.info.driver_info}".strip(),
        "device_info": dev.info.to_dict(),
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def has_quant_kernels() -> bool:
    return all(hasattr(vkcore, name) for name in ("quantize", "matvec", "matvec_f32", "F32Matrix"))


def run_bench(
    dev: Device,
    *,
    quick: bool = False,
    repeats: int | None = None,
    progress: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """Run every comparison on ``dev``; a JSON-ready dict with all samples and the verdicts."""
    reps = repeats or (5 if quick else 11)
    rng = np.random.default_rng(seed)
    soft_shapes = SOFTMAX_SHAPES_QUICK if quick else SOFTMAX_SHAPES_FULL
    mv_shapes = MATVEC_SHAPES_QUICK if quick else MATVEC_SHAPES_FULL
    quant = has_quant_kernels()
    steps: list[tuple[str, Callable[[], Iterator[Comparison]]]] = [
        (f"online vs safe {r}x{n}", partial(softmax_online_vs_safe, dev, [(r, n)], reps, rng))
        for r, n in soft_shapes
    ]
    steps.append(
        ("softmax vs numpy 4096x4096", lambda: softmax_vs_numpy(dev, (4096, 4096), reps, rng))
    )
    steps.append(("tiny softmax overhead", lambda: tiny_overhead(dev, 50 if quick else 200, rng)))
    if quant:
        steps += [
            (f"matvec {m}x{n}", partial(matvec_comparisons, dev, [(m, n)], reps, rng))
            for m, n in mv_shapes
        ]
        steps.append(
            ("quantize 4096x4096", lambda: quantize_comparison(dev, (4096, 4096), reps, rng))
        )
    bar = Progress(len(steps) + 1, enabled=progress)
    copies = copy_bandwidth(reps)
    kernel_copies = kernel_copy_bandwidth(dev, reps)
    bar.step("copy bandwidth")
    comparisons: list[Comparison] = []
    started = time.perf_counter()
    errors: list[dict[str, str]] = []
    for label, make in steps:
        try:
            comparisons.extend(make())
        except Exception as exc:  # noqa: BLE001 - one broken kernel must not hide the others
            first_line = (str(exc).strip().splitlines() or [""])[0]
            errors.append({"step": label, "error": f"{type(exc).__name__}: {first_line}"})
        bar.step(label)
    return {
        "environment": environment(dev),
        "quick": quick,
        "repeats": reps,
        "seconds": time.perf_counter() - started,
        "copy_bandwidth_bytes_per_s": copies,
        "copy_bandwidth_median": statistics.median(copies),
        "kernel_copy_bandwidth_bytes_per_s": kernel_copies,
        "kernel_copy_bandwidth_median": (
            statistics.median(kernel_copies) if kernel_copies else None
        ),
        "quant_kernels": quant,
        "comparisons": [c.summary() for c in comparisons],
        "targets": verdicts(comparisons),
        "errors": errors,
    }


def verdicts(comparisons: list[Comparison]) -> list[dict[str, Any]]:
    """Each target with the measured value (worst shape where a group has several)."""
    out = []
    for group, (kind, target, title) in TARGETS.items():
        if group == "online_vs_safe_all":
            rows = [c for c in comparisons if c.group.startswith("online_vs_safe")]
        elif group in ("softmax_vs_numpy_e2e", "softmax_vs_numpy_resident"):
            rows = [c for c in comparisons if c.group == group and c.shape == (4096, 4096)]
        else:
            rows = [c for c in comparisons if c.group == group]
        verdict = {"group": group, "title": title, "kind": kind, "target": target}
        measured = [c for c in rows if c.ratio is not None]
        if not measured:
            note = "n/a: the device has no timestamps (device-time rows)"
            if not rows:
                note = "not measured (kernel not available)"
            out.append({**verdict, "value": None, "met": None, "shape": None, "note": note})
            continue
        worst = (min if kind == ">=" else max)(measured, key=_ratio_of)
        value = _ratio_of(worst)
        met = value >= target if kind == ">=" else value <= target
        out.append({**verdict, "value": value, "met": met, "shape": list(worst.shape), "note": ""})
    return out


def _ratio_of(c: Comparison) -> float:
    assert c.ratio is not None
    return c.ratio


# ---------------------------------------------------------------------------- output
def format_table(result: dict[str, Any]) -> str:
    """The human-readable report: environment, every comparison, the targets."""
    env = result["environment"]
    copy_gbs = result["copy_bandwidth_median"] / 1e9
    lines = [
        f"vkcore bench ({'quick' if result['quick'] else 'full'}, "
        f"{result['repeats']} repeats, medians)",
        f"date {env['date']}  cpu {env['cpu_model']} x{env['cpu_count']}  "
        f"LP_NUM_THREADS={env['lp_num_threads'] or 'unset'}",
        f"device {env['device']}  driver {env['driver']}",
        f"numpy copy bandwidth {copy_gbs:.1f} GB/s (read + write); a copy kernel with the "
        f"softmax access pattern: {_gbs(result['kernel_copy_bandwidth_median'])} "
        "(device time)",
        "",
        f"{'comparison':<52} {'shape':>14} {'baseline':>10} {'vkcore':>10} {'ratio':>7} "
        f"{'spread':>13} {'minima':>6} {'GB/s':>6} {'roof':>5}",
    ]
    for c in result["comparisons"]:
        shape = "x".join(str(s) for s in c["shape"])
        bw = c["bandwidth_bytes_per_s"]
        gbs = f"{bw / 1e9:6.1f}" if bw else "     -"
        roof = f"{bw / result['copy_bandwidth_median']:5.2f}" if bw else "    -"
        lo, hi = c["ratio_spread"]
        label = "call/floor" if c["overhead"] else "ratio"
        spread = f"{lo:.2f}-{hi:.2f}" if c["ratio"] is not None else "n/a"
        lines.append(
            f"{c['title'][:52]:<52} {shape:>14} "
            f"{_ms(c['baseline_median_s'])} {_ms(c['candidate_median_s'])} "
            f"{_num(c['ratio'], 7)} {spread:>13} "
            f"{_num(c['ratio_of_minimums'], 6)} {gbs} {roof}"
            + ("  (call/floor)" if label != "ratio" else "")
        )
    for err in result.get("errors", []):
        lines.append(f"FAILED {err['step']}: {err['error']}")
    lines += ["", "targets (worst shape of each group):"]
    for t in result["targets"]:
        if t["value"] is None:
            lines.append(f"  -    {t['title']}: {t['note']}")
            continue
        mark = "MET " if t["met"] else "MISS"
        lines.append(f"  {mark} {t['title']}: {t['value']:.2f} (target {t['kind']} {t['target']})")
    lines.append(f"\n{result['seconds']:.1f} s")
    return "\n".join(lines)


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:8.3f}ms" if seconds is not None else f"{'n/a':>10}"


def _num(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'n/a':>{width}}"


def _gbs(bytes_per_s: float | None) -> str:
    return f"{bytes_per_s / 1e9:.1f} GB/s" if bytes_per_s is not None else "n/a"


def write_plot(result: dict[str, Any], path: str) -> None:
    """Ratios against their targets, and each kernel's bandwidth against the copy roof."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comps = result["comparisons"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 10))
    labels = [f"{c['group']}\n{'x'.join(map(str, c['shape']))}" for c in comps]
    values = [c["ratio"] or 0.0 for c in comps]
    colors = ["tab:orange" if c["overhead"] else "tab:blue" for c in comps]
    ax1.bar(range(len(comps)), values, color=colors)
    for i, c in enumerate(comps):
        target = TARGETS.get(c["group"])
        if target is not None:
            ax1.plot([i - 0.4, i + 0.4], [target[1]] * 2, color="red")
    ax1.axhline(1.0, color="gray", linewidth=0.8)
    ax1.set_xticks(range(len(comps)), labels, rotation=75, fontsize=7)
    ax1.set_ylabel("baseline / vkcore (orange: call / floor)")
    ax1.set_title("ratios (red: target)")
    bw = [(c["bandwidth_bytes_per_s"] or 0) / 1e9 for c in comps]
    ax2.bar(range(len(comps)), bw)
    ax2.axhline(result["copy_bandwidth_median"] / 1e9, color="red", label="numpy copy")
    if result["kernel_copy_bandwidth_median"] is not None:
        ax2.axhline(
            result["kernel_copy_bandwidth_median"] / 1e9,
            color="purple",
            label="copy kernel on the device",
        )
    ax2.set_xticks(range(len(comps)), labels, rotation=75, fontsize=7)
    ax2.set_ylabel("effective GB/s")
    ax2.set_title("roofline position: minimum bytes moved / time")
    ax2.legend()
    env = result["environment"]
    fig.suptitle(f"vkcore bench {env['date']} - {env['device']} - {env['cpu_model']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, default=str)
