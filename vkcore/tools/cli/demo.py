"""``vkcore demo``: the main job on the default device, checked against numpy."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

import numpy as np

from vkcore import reference
from vkcore.device.device import Device
from vkcore.kernels.softmax.softmax import softmax
from vkcore.tools.cli._args import after_parse, memory_check, positive_int

# Host memory the demo takes per element of its random batch, measured as peak RSS less
# the interpreter's (the numpy reference and lavapipe's device copies included), with
# some margin.
BYTES_PER_ELEMENT = 48

SEED_EXAMPLE = [1000.0, 1001.0, 1002.0]
SEED_EXPECTED = [0.09003057317038046, 0.24472847105479764, 0.6652409557748218]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="run the kernels on the default device and check them against numpy"
    )
    p.add_argument(
        "--rows", type=positive_int, default=256, help="rows of the random softmax batch"
    )
    p.add_argument(
        "--cols", type=positive_int, default=4096, help="row length of the random softmax batch"
    )
    p.add_argument(
        "--json", action="store_true", help="print the figures as JSON (the text goes to stderr)"
    )
    p.set_defaults(func=run)
    after_parse(p, check)


def check(args: argparse.Namespace) -> None:
    """The batch must fit in memory, before the device opens."""
    r, c = args.rows, args.cols
    memory_check(f"--rows {r} --cols {c}: a {r} x {c} softmax batch", r * c * BYTES_PER_ELEMENT)


def run(args: argparse.Namespace) -> int:
    results: dict[str, Any] = {}
    text_out = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    with text_out:
        ok = True
        with Device(args.device, timed=True) as dev:  # it prints the kernel time
            print(f"device: {dev.info.name} ({dev.info.driver_name} {dev.info.driver_info})")
            results["device"] = dev.info.name
            results["driver"] = f"{dev.info.driver_name} {dev.info.driver_info}"
            ok &= _softmax_demo(dev, args.rows, args.cols, results)
            ok &= _quant_demo(dev, results)
            ok &= _group_demo(dev, results)
        ok &= _coldwarm_demo(args.device, results)
        print("demo:", "all checks passed" if ok else "SOME CHECKS FAILED")
    if args.json:
        results["ok"] = bool(ok)
        print(json.dumps(results))
    return 0 if ok else 1


def _softmax_demo(dev: Device, rows: int, cols: int, results: dict[str, Any]) -> bool:
    ok = True
    print("\nsoftmax of the seed example [1000, 1001, 1002]:")
    for algorithm in ("online", "safe"):
        got = softmax(np.array(SEED_EXAMPLE, dtype=np.float32), algorithm=algorithm, device=dev)
        err = float(np.abs(got.astype(np.float64) - SEED_EXPECTED).max())
        good = err <= 1e-7
        ok &= good
        probs = ", ".join(f"{v:.8f}" for v in got)
        results.setdefault("softmax_seed", {})[algorithm] = {
            "probabilities": [float(v) for v in got],
            "max_abs_err": err,
            "ok": good,
        }
        print(
            f"  {algorithm:<6} [{probs}]  max |err| vs expected = {err:.1e}  "
            f"{'ok' if good else 'FAIL'}"
        )
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
        results.setdefault("softmax_random", {"shape": [rows, cols], "numpy_ms": numpy_ms})[
            algorithm
        ] = {
            "max_abs_err": err,
            "max_row_sum_err": row_err,
            "kernel_ms": None if kernel is None else kernel * 1e3,
            "wall_ms": wall_ms,
            "ok": good,
        }
        print(
            f"  {algorithm:<6} max |err| {err:.1e}, max |row sum - 1| {row_err:.1e}, "
            f"{kernel_txt}{wall_ms:.2f} ms end to end (numpy {numpy_ms:.2f} ms)  "
            f"{'ok' if good else 'FAIL'}"
        )
    return ok


def _coldwarm_demo(selector: str | None, results: dict[str, Any]) -> bool:
    """A short ``vkcore coldwarm``: one kernel, one fresh process per cache condition."""
    from vkcore.tools import coldwarm

    print("\ncold vs warm pipeline creation (softmax-online, one fresh process per condition;")
    print("`vkcore coldwarm` runs every kernel with repetitions):")
    report = coldwarm.measure(["softmax-online"], repeats=1, selector=selector)
    print(coldwarm.format_table(report))
    for finding in report["findings"]:
        print(f"  - {finding}")
    pooled = report["summary"]["pooled"]
    results["coldwarm"] = {"pooled": pooled, "findings": report["findings"]}
    return all(pooled[c][s]["n"] == 1 for c in pooled for s in coldwarm.STAGES)


def _quant_demo(dev: Device, results: dict[str, Any]) -> bool:
    """RTN quantization per tensor vs per channel, then the three matvec modes."""
    from vkcore.kernels.matvec.matvec import matvec
    from vkcore.kernels.quant.dequantize import dequantize
    from vkcore.kernels.quant.report import format_report, quant_error
    from vkcore.kernels.quant.rtn import quantize

    ok = True
    example = np.array([[-1.0, 3.0, 1.3]], np.float32)
    seed = quantize(example, symmetric=False, per_channel=False, device=dev)
    r_hat = dequantize(seed)[0, 2]
    seed_ok = seed.zero_point == 64 and seed.q[0, 2] == 147 and abs(r_hat - 1.302) < 1e-3
    ok &= bool(seed_ok)
    results["quant_seed"] = {
        "scale": float(seed.scale),
        "zero_point": int(seed.zero_point),
        "q": int(seed.q[0, 2]),
        "dequantized": float(r_hat),
        "ok": bool(seed_ok),
    }
    print(
        f"\nquantization of the seed example (range [-1, 3] on uint8): s = {float(seed.scale):.6f} "
        f"(4/255), z = {int(seed.zero_point)}, 1.3 -> {seed.q[0, 2]} -> {r_hat:.4f}  "
        f"{'ok' if seed_ok else 'FAIL'}"
    )
    rng = np.random.default_rng(3)
    m, n = 512, 1024
    w = (rng.standard_normal((m, n)) * 0.02).astype(np.float32)
    w[7] *= 100  # one row 100x larger: it sets the per-tensor scale for every row
    x = rng.standard_normal(n).astype(np.float32)
    print(f"\n8-bit RTN of a random {m}x{n} layer (row 7 is 100x larger), errors vs the bounds:")
    for per_channel in (False, True):
        qt = quantize(w, per_channel=per_channel, device=dev)
        q, s, z = reference.quantize(w, 8, True, per_channel)
        same = np.array_equal(qt.q, q) and np.array_equal(qt.scale, s)
        e = quant_error(w, qt, x)
        ok &= same and e.holds()
        label = "per channel" if per_channel else "per tensor"
        results.setdefault("quant_layer", {})[label.replace(" ", "_")] = {
            "q_equals_reference": bool(same),
            "bounds_hold": bool(e.holds()),
            "mean_rms_err": float(np.mean(e.rms_err)),
        }
        label += " (q = numpy)" if same else " (q DIFFERS)"
        print("  " + format_report(label, e))
    exact = w.astype(np.float64) @ x
    print("\nmatvec with the per-channel weights, vs the numpy reference and vs float64 W x:")
    for activations in ("float", "int8", "uint8"):
        matvec(qt, x, activations=activations)  # first call: pipeline creation and JIT
        t0 = time.perf_counter()
        y = matvec(qt, x, activations=activations)
        wall_ms = (time.perf_counter() - t0) * 1e3
        ref = reference.matvec(qt.q, qt.scale, qt.zero_point, x, None, activations)
        if activations == "float":
            good = bool(np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max())
            vs_ref = f"max |y - ref| {np.abs(y - ref).max():.1e}"
        else:
            good = bool(np.array_equal(y, ref))
            vs_ref = "bit for bit" if good else "DIFFERS"
        rel = np.sqrt(np.mean((y - exact) ** 2) / np.mean(exact**2))
        ok &= good
        results.setdefault("matvec", {})[activations] = {
            "vs_reference": vs_ref,
            "rel_rms_vs_float64": float(rel),
            "wall_ms": wall_ms,
            "ok": good,
        }
        print(
            f"  {activations:<5} {vs_ref:<22} rms(y - Wx) / rms(Wx) {rel:.1e}  {wall_ms:.2f} ms  "
            f"{'ok' if good else 'FAIL'}"
        )
    return ok


def _group_demo(dev: Device, results: dict[str, Any]) -> bool:
    """Per channel vs 8-bit groups of 128 vs 4-bit groups of 32 on a layer with a few loud
    input columns (the case scale groups exist for), each checked against the reference
    and its per-group error bounds, with the bytes each keeps on the device."""
    from vkcore.kernels.matvec.matvec import matvec
    from vkcore.kernels.quant.dequantize import dequantize
    from vkcore.kernels.quant.report import quant_error
    from vkcore.kernels.quant.rtn import quantize

    rng = np.random.default_rng(5)
    m, n = 256, 1024
    w = (rng.standard_normal((m, n)) * 0.02).astype(np.float32)
    loud = [3, 70, 120]  # all in the first group of 128: the other groups keep small scales
    w[:, loud] *= 50
    x = rng.standard_normal(n).astype(np.float32)
    quiet = np.setdiff1d(np.arange(n), np.arange(128))
    exact = w.astype(np.float64) @ x
    print(f"\nscale groups on a {m}x{n} layer whose columns {loud} are 50x louder:")
    ok = True
    for label, bits, group_size in (
        ("8-bit per channel", 8, None),
        ("8-bit group 128", 8, 128),
        ("4-bit group 32", 4, 32),
    ):
        qt = quantize(w, bits=bits, group_size=group_size, device=dev)
        try:
            q, s, z = reference.quantize(w, bits, True, True, group_size)
            w_hat = dequantize(qt)
            same = bool(np.array_equal(qt.q, q) and np.array_equal(qt.scale, s))
            same &= bool(np.array_equal(w_hat, reference.dequantize(q, s, z, group_size)))
            y_int8 = matvec(qt, x, activations="int8")
            y_ref = reference.matvec(q, s, z, x, None, "int8", group_size=group_size)
            same &= bool(np.array_equal(y_int8, y_ref))
            y = matvec(qt, x)  # weight-only: the error the weights' format makes
            e = quant_error(w, qt, x)
            rms_quiet = float(np.sqrt(np.mean((w_hat[:, quiet] - w[:, quiet]) ** 2)))
            rel_y = float(np.sqrt(np.mean((y - exact) ** 2) / np.mean(exact**2)))
            good = same and e.holds()
            ok &= good
            results.setdefault("quant_groups", {})[label.replace(" ", "_")] = {
                "device_bytes": qt.nbytes,
                "rms_err_quiet_columns": rms_quiet,
                "matvec_rel_rms": rel_y,
                "equals_reference": same,
                "bounds_hold": bool(e.holds()),
            }
            print(
                f"  {label:<18} {qt.nbytes / 1024:7.1f} KiB on the device, rms err on the "
                f"quiet columns {rms_quiet:.1e}, matvec rms(y - Wx)/rms(Wx) {rel_y:.1e}, "
                f"{'int8 matvec and q = reference, bounds hold' if good else 'CHECK FAILED'}"
            )
        finally:
            qt.release()
    return ok
