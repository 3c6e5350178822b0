"""A Gaussian blur as your own compute shader, then its cold vs warm pipeline creation.

The experiment this project comes from measured a Gaussian-blur compute pipeline with and
without a pipeline cache (10.2 -> 1.2 ms on an Apple M2). Here the same kind of pipeline
(examples/gaussian_blur.comp) runs through vkcore.Program, is checked against numpy, and
is measured by `vkcore coldwarm --shader` in fresh processes under the four cache
conditions (cold, vkcore's caches, the driver's cache, all).

What lavapipe can and cannot show: it does not serialize pipelines, so its
VkPipelineCache blob is a header only and vkcore's persisted pipeline cache cannot speed
up vkCreateComputePipelines there (the report says so); lavapipe's real compile (LLVM)
happens at the first dispatch, and Mesa's own disk cache is what removes it. On a GPU
driver that serializes pipelines, the "vkcore" condition shows what the persisted cache
buys for this pipeline.

    python examples/gaussian_blur.py            # 512 x 512, radius 4, 3 repetitions
    python examples/gaussian_blur.py --small    # 64 x 64, 1 repetition (tests)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import vkcore
from vkcore.tools import coldwarm
from vkcore.tools.coldwarm.shader import ShaderCase

SHADER = Path(__file__).resolve().parent / "gaussian_blur.comp"


def gaussian_weights(radius: int) -> np.ndarray:
    """Normalized 1-D weights, sigma = radius / 2."""
    sigma = max(radius / 2, 0.5)
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-0.5 * (t / sigma) ** 2)
    return (w / w.sum()).astype(np.float32)


def reference_blur(image: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The same separable blur in float64 numpy, edges clamped."""
    r = len(weights) // 2
    padded = np.pad(image.astype(np.float64), r, mode="edge")
    h, w = image.shape
    rows = sum(weights[k] * padded[:, k : k + w] for k in range(2 * r + 1))
    return sum(weights[k] * rows[k : k + h, :] for k in range(2 * r + 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small image, one repetition")
    args = parser.parse_args()
    width = height = 64 if args.small else 512
    radius = 2 if args.small else 4
    repeats = 1 if args.small else 3
    defines = {"WIDTH": width, "HEIGHT": height, "RADIUS": radius}

    prog = vkcore.Program(path=SHADER, defines=defines)
    rng = np.random.default_rng(0)
    image = rng.random((height, width), dtype=np.float32)
    weights = gaussian_weights(radius)
    out = np.empty_like(image)
    prog(image, weights, out, groups=-(-width * height // 64))
    err = float(np.abs(out - reference_blur(image, weights)).max())
    ok = err <= 1e-5
    print(
        f"blur {width}x{height}, radius {radius}: max |vkcore - numpy| = {err:.1e} "
        f"({'ok' if ok else 'FAIL'}); bindings {[b.name for b in prog.bindings]}, "
        f"workgroup {prog.workgroup}"
    )

    case = ShaderCase(str(SHADER), defines=defines, elements=width * height)
    report = coldwarm.measure([], repeats=repeats, shader=case)
    print(coldwarm.format_table(report))
    for finding in report["findings"]:
        print(f"  - {finding}")
    pooled = report["summary"]["pooled"]
    measured = all(pooled[c]["pipeline"]["n"] == report["settings"]["repeats_done"] for c in pooled)
    print("cold/warm measured in every condition" if measured else "SOME CONDITIONS MISSING")
    return 0 if ok and measured else 1


if __name__ == "__main__":
    sys.exit(main())
