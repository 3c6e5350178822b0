"""Softmax basics: the seed example, a batch of rows, numpy agreement and -inf masking.

    python examples/softmax_basics.py            # 512 rows of 4096
    python examples/softmax_basics.py --small    # 16 rows of 256 (what the tests run)

Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import vkcore

# The overflow example: exp(1000) is inf in float32 and float64, so a naive softmax gives
# NaN. The online normalizer subtracts the running maximum first.
SEED = np.array([1000.0, 1001.0, 1002.0], dtype=np.float32)
SEED_EXPECTED = np.array([0.09003057317038046, 0.24472847105479764, 0.6652409557748218])


def naive_softmax(x: np.ndarray) -> np.ndarray:
    """What goes wrong without the max subtraction (kept to show the overflow)."""
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)


def numpy_softmax(x: np.ndarray) -> np.ndarray:
    """The usual safe softmax in numpy, float32 like the kernel."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def seed_example(dev: vkcore.Device) -> bool:
    print("1. the seed example [1000, 1001, 1002]")
    print(f"   naive exp/sum:  {naive_softmax(SEED)}   (exp overflows)")
    got = vkcore.softmax(SEED, device=dev)
    err = float(np.abs(got - SEED_EXPECTED).max())
    print(f"   vkcore.softmax: {got}")
    print(f"   expected:       {SEED_EXPECTED}")
    print(f"   max |error| = {err:.1e} (float32 rounding)")
    return err <= 1e-7


def batch_of_rows(dev: vkcore.Device, rows: int, cols: int) -> bool:
    print(f"\n2. a batch of {rows} rows x {cols}, compared with numpy")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    # Keep the input on the device: the first call pays for pipeline creation (and on
    # lavapipe the shader's JIT compile), later calls only dispatch.
    xt = vkcore.asarray(x, device=dev)
    vkcore.softmax(xt)
    t0 = time.perf_counter()
    probs = vkcore.softmax(xt).numpy()
    vk_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    expected = numpy_softmax(x)
    np_ms = (time.perf_counter() - t0) * 1e3
    err = float(np.abs(probs - expected).max())
    row_sum_err = float(np.abs(probs.sum(axis=-1, dtype=np.float64) - 1).max())
    print(f"   max |vkcore - numpy| = {err:.1e}, max |row sum - 1| = {row_sum_err:.1e}")
    print(f"   vkcore {vk_ms:.2f} ms (incl. copy back), numpy {np_ms:.2f} ms, one run each")
    # The stated accuracy against a float64 reference: 1e-6 absolute, sums within 1e-5.
    exact = vkcore.reference.softmax(x)
    return float(np.abs(probs - exact).max()) <= 1e-6 and row_sum_err <= 1e-5


def masking(dev: vkcore.Device) -> bool:
    print("\n3. masking with -inf (for example a causal attention mask)")
    scores = np.array(
        [
            [2.0, 1.0, -np.inf, -np.inf],  # two visible positions
            [0.5, -np.inf, 0.5, -np.inf],  # the masked entries get exactly 0
            [-np.inf, -np.inf, -np.inf, -np.inf],  # fully masked: all zeros, not NaN
        ],
        dtype=np.float32,
    )
    probs = vkcore.softmax(scores, device=dev)
    for row, p in zip(scores, probs, strict=True):
        print(f"   {row} -> {np.round(p, 6)}")
    masked_zero = bool(np.all(probs[np.isneginf(scores)] == 0))
    halves = bool(np.allclose(probs[1, [0, 2]], 0.5, atol=1e-7))
    return masked_zero and halves and bool(np.all(probs[2] == 0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small sizes (used by the tests)")
    args = parser.parse_args()
    rows, cols = (16, 256) if args.small else (512, 4096)
    with vkcore.Device() as dev:  # VKCORE_DEVICE picks another device
        print(f"device: {dev.info.name}\n")
        results = [seed_example(dev), batch_of_rows(dev, rows, cols), masking(dev)]
    ok = all(results)
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
