"""The language-model step on the bench: an LM head's logits, their softmax and the next
token, numpy float32 (``W @ h``, softmax, argmax) against vkcore (INT8 matvec and
``sample`` in one sequence, one readback of the token). Each side runs in its own block
of calls with a rest between blocks: OpenBLAS's threads spin after a product and would
otherwise take lavapipe's cores (the rest is not timed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device
from vkcore.tools.bench.baselines import numpy_softmax
from vkcore.tools.bench.harness import BLAS_BLOCK, BLAS_SETTLE, Comparison, side_by_side

SHAPE_FULL = (32_000, 4096)  # a 32k vocabulary over a 4096-wide hidden state
SHAPE_QUICK = (8_000, 4096)
LOGIT_STD = 3.0  # logits of a unit hidden state spread like a trained model's


def lm_head_rows(dev: Device, repeats: int, rng: Any, *, quick: bool) -> Iterator[Comparison]:
    m, n = SHAPE_QUICK if quick else SHAPE_FULL
    w = rng.standard_normal((m, n), dtype=np.float32) * np.float32(LOGIT_STD / np.sqrt(n))
    h = rng.standard_normal(n, dtype=np.float32)
    qt = vkcore.quantize(w, device=dev)
    device_s: list[float] = []
    try:

        def numpy_step() -> int:
            return int(np.argmax(numpy_softmax(w @ h)))

        def vkcore_step() -> int:
            with vkcore.sequence(device=dev) as seq:
                token = vkcore.sample(vkcore.matvec(qt, h), seed=0)
            seconds = seq.device_seconds
            if seconds is not None:
                device_s.append(seconds)
            return int(token.numpy())

        base, cand, _ = side_by_side(
            numpy_step, vkcore_step, repeats, block=BLAS_BLOCK, settle=BLAS_SETTLE
        )
        yield Comparison(
            "lm_head_step",
            f"LM-head step {m}x{n}: logits, softmax, next token (wall, each side in blocks)",
            (m, n),
            "wall",
            "numpy float32 W @ h, softmax, argmax",
            "INT8 matvec + sample, one sequence",
            base,
            cand,
            device_s[1:],  # the first is the warm-up
            min_bytes=m * n,
        )
    finally:
        qt.release()
