"""``vkcore demo``: the main job on the default device, checked against numpy."""

from __future__ import annotations

import argparse
import time

import numpy as np

from .. import reference
from ..device import Device
from ..kernels.softmax import softmax

SEED_EXAMPLE = [1000.0, 1001.0, 1002.0]
SEED_EXPECTED = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the kernels on the default device and check them against numpy")
    p.add_argument("--rows", type=int, default=256, help="rows of the random softmax batch")
    p.add_argument("--cols", type=int, default=4096, help="row length of the random softmax batch")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    ok = True
    with Device(args.device) as dev:
        print(f"device: {dev.info.name} ({dev.info.driver_name} {dev.info.driver_info})")
        ok &= _softmax_demo(dev, args.rows, args.cols)
    ok &= _coldwarm_demo(args.device)
    print("demo:", "all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


def _softmax_demo(dev: Device, rows: int, cols: int) -> bool:
    ok = True
    print("\nsoftmax of the seed example [1000, 1001, 1002]:")
    for algorithm in ("online", "safe"):
        got = softmax(np.array(SEED_EXAMPLE, dtype=np.float32), algorithm=algorithm, device=dev)
        err = float(np.abs(got.astype(np.float64) - SEED_EXPECTED).max())
        good = err <= 1e-7
        ok &= good
        probs = ", ".join(f"{v:.8f}" for v in got)
        print(f"  {algorithm:<6} [{probs}]  max |err| vs expected = {err:.1e}  {'ok' if good else 'FAIL'}")
    print(f"  expected [{', '.join(f'{v:.8f}' for v in SEED_EXPECTED)}]")

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    ref = reference.softmax(x)
    t0 = time.perf_counter()
    expected_np = np.exp(x - x.max(-1, keepdims=True))
    expected_np /= expected_np.sum(-1, keepdims=True)
    numpy_ms = (time.perf_counter() - t0) * 1e3
    print(f"\nsoftmax of random {rows}x{cols} float32 rows vs numpy:")
    for algorithm in ("online", "safe"):
        softmax(x, algorithm=algorithm, device=dev)  # first call: pipeline creation + JIT
        t0 = time.perf_counter()
        got = softmax(x, algorithm=algorithm, device=dev)
        wall_ms = (time.perf_counter() - t0) * 1e3
        kernel = dev.submitter.last_device_seconds
        err = float(np.abs(got - ref).max())
        row_err = float(np.abs(got.sum(-1, dtype=np.float64) - 1).max())
        good = err <= 1e-6 and row_err <= 1e-5
        ok &= good
        kernel_txt = f"{kernel * 1e3:.2f} ms kernel, " if kernel is not None else ""
        print(
            f"  {algorithm:<6} max |err| {err:.1e}, max |row sum - 1| {row_err:.1e}, "
            f"{kernel_txt}{wall_ms:.2f} ms end to end (numpy {numpy_ms:.2f} ms)  {'ok' if good else 'FAIL'}"
        )
    return ok


def _coldwarm_demo(selector: str | None) -> bool:
    """A short ``vkcore coldwarm``: one kernel, one fresh process per cache condition."""
    from .. import coldwarm

    print("\ncold vs warm pipeline creation (softmax-online, one fresh process per condition;")
    print("`vkcore coldwarm` runs every kernel with repetitions):")
    report = coldwarm.measure(["softmax-online"], repeats=1, selector=selector)
    print(coldwarm.format_table(report))
    for finding in report["findings"]:
        print(f"  - {finding}")
    pooled = report["summary"]["pooled"]
    return all(pooled[c][s]["n"] == 1 for c in pooled for s in coldwarm.STAGES)
