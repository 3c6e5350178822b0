"""Quantize a linear layer y = W x + b to 8 bits and run it three ways.

    python examples/quantize_linear_layer.py           # a 4096 x 4096 layer
    python examples/quantize_linear_layer.py --small   # 256 x 512 (what the tests run)

One row of W is 100x larger than the rest: with one scale for the whole tensor it
crushes every other row, with one scale per output channel it does not. Each matvec
mode is checked against vkcore.reference (integer modes bit for bit).

Then a layer with a few loud input columns (the case scale groups exist for: a loud
column sits in every row, so one scale per row cannot avoid it): per channel, groups of
128 columns, and 4-bit groups of 32 (two codes per byte), with the bytes each keeps on
the device, the error on the ordinary columns and the per-group bounds; each dequantizes
bit for bit like vkcore.reference. Exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

import vkcore
from vkcore import reference


def layer(m: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m, n)) / np.sqrt(n)).astype(np.float32)
    w[3] *= 100  # the outlier row
    x = rng.standard_normal(n).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    return w, x, b


def loud_columns(m: int, n: int) -> bool:
    """Per channel vs group 128 vs 4-bit group 32 on a layer with three loud columns."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((m, n)) / np.sqrt(n)).astype(np.float32)
    loud = [5, 40, 100]  # within the first 128 columns: the other groups keep their scales
    w[:, loud] *= 50
    x = rng.standard_normal(n).astype(np.float32)
    ok = True
    print(
        f"\nlayer {m} x {n} with loud columns {loud} (x50); error on columns 128.. (no loud one):"
    )
    for label, bits, group_size in (
        ("8-bit per channel", 8, None),
        ("8-bit group 128", 8, 128),
        ("4-bit group 32", 4, 32),
    ):
        qt = vkcore.quantize(w, bits=bits, group_size=group_size)
        w_hat = vkcore.dequantize(qt)
        q, s, z = reference.quantize(w, bits, True, True, group_size)
        same = bool(np.array_equal(w_hat, reference.dequantize(q, s, z, group_size)))
        e = vkcore.quant_error(w, qt, x)
        rel = np.sqrt(np.mean((w_hat - w)[:, 128:] ** 2) / np.mean(w[:, 128:] ** 2))
        print(
            f"  {label:<17}  {qt.nbytes / 1024:7.1f} KiB on the device  "
            f"rms error {rel:.1e} x rms |W|  |dy| / bound {np.max(e.out_err / e.bound_out):.3f}  "
            f"bounds hold: {e.holds()}  dequantize = reference: {same}"
        )
        ok &= same and e.holds()
    return ok


def best_ms(call: Callable[[], object], repeats: int = 7) -> float:
    """Best wall time of ``repeats`` calls, in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 256 x 512 layer")
    args = parser.parse_args()
    m, n = (256, 512) if args.small else (4096, 4096)
    w, x, b = layer(m, n)
    exact = w.astype(np.float64) @ x + b
    ok = True

    print(f"layer {m} x {n}, 8-bit symmetric RTN; errors per row against the bound s_i / 2:")
    for per_channel in (False, True):
        qt = vkcore.quantize(w, per_channel=per_channel)
        e = vkcore.quant_error(w, qt, x)
        others = np.arange(m) != 3
        print(
            f"  {'per channel' if per_channel else 'per tensor ':<11}  "
            f"max |W_hat - W| {e.max_err.max():.2e} (bound {e.bound_max.max():.2e}), "
            f"rms error of the other rows {e.rms_err[others].mean():.2e}, "
            f"|dy| <= s/2 |x|_1 holds: {e.holds()}"
        )
        ok &= e.holds()

    print("\nthe per-channel layer, each matvec mode (weights stay on the device):")
    for activations in ("float", "int8", "uint8"):
        y = vkcore.matvec(qt, x, bias=b, activations=activations)  # also compiles
        ms = best_ms(lambda a=activations: vkcore.matvec(qt, x, bias=b, activations=a))
        want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, b, activations)
        if activations == "float":
            same = bool(np.allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max()))
        else:
            same = bool(np.array_equal(y, want))
        ok &= same
        rel = np.sqrt(np.mean((y - exact) ** 2) / np.mean(exact**2))
        print(
            f"  {activations:<5}  matches reference: {same}  "
            f"rms(y - (Wx + b)) / rms(Wx + b) = {rel:.1e}  {ms:.2f} ms"
        )

    ok &= loud_columns(m, n)

    f32 = vkcore.F32Matrix(w)
    vkcore.matvec_f32(f32, x, bias=b)
    f32_ms = best_ms(lambda: vkcore.matvec_f32(f32, x, bias=b))
    print(f"\nvkcore float32 kernel (vkcore.matvec_f32): {f32_ms:.2f} ms")
    print(f"numpy float32 W @ x + b: {best_ms(lambda: w @ x + b):.2f} ms")
    print("(times: best of 7 calls, vector in and out included)")
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
