"""The kernel paths each tuned parameter steers, as calls on random data."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import vkcore
from vkcore.device.device import Device

Paths = dict[str, Callable[[], Any]]


@contextlib.contextmanager
def kernel_paths(device: Device, name: str, shape: tuple[int, int]) -> Iterator[Paths]:
    """Every kernel path that ``name`` steers, as calls on random data of ``shape``: the
    choice must suit all of them. The data is released when the block ends."""
    rng = np.random.default_rng(0)
    held: list[Any] = []
    try:
        if name == "softmax_workgroup":
            x = vkcore.asarray(rng.standard_normal(shape, dtype=np.float32), device=device)
            held.append(x)
            yield _softmax_paths(x)
            return
        w = (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)
        xv = rng.standard_normal(shape[1], dtype=np.float32)
        if name in ("matvec_dot", "matvec_rows"):
            qt = vkcore.quantize(w, device=device)
            held.append(qt)
            # The dot path serves the 8-bit activation modes; the rows, every mode of
            # one weight layout (the default).
            modes = ("int8", "uint8") if name == "matvec_dot" else ("float", "int8", "uint8")
            yield {a: functools.partial(_matvec, qt, xv, a) for a in modes}
        elif name == "matvec_f32_rows":
            f32 = vkcore.F32Matrix(w, device=device)
            held.append(f32)
            yield {"float32": lambda: vkcore.matvec_f32(f32, xv)}
        else:  # quant_rows steers quantize.comp (host scales: the asymmetric path) and dequantize
            q = vkcore.quantize(w, symmetric=False, device=device)
            held.append(q)
            yield {
                "quantize": lambda: vkcore.quantize(w, symmetric=False, device=device).release(),
                "dequantize": lambda: vkcore.dequantize(q),
            }
    finally:
        for obj in held:
            _free(obj)


def _softmax_paths(x: Any) -> Paths:
    paths: Paths = {a: functools.partial(_softmax, x, a) for a in ("online", "safe")}
    # log_softmax's write stage is its own variant; its safe form differs from the
    # online one as softmax's does, so one algorithm suffices there.
    return {**paths, "log_softmax": functools.partial(_softmax, x, "online", log=True)}


def _softmax(x: Any, algorithm: str, log: bool = False) -> None:
    _free((vkcore.log_softmax if log else vkcore.softmax)(x, algorithm=algorithm))


def _matvec(qt: Any, x: np.ndarray, activations: str) -> None:
    vkcore.matvec(qt, x, activations=activations)


def _free(obj: Any) -> None:
    """Free a Tensor's buffer or a weight's memory now, not at collection."""
    if hasattr(obj, "release"):
        obj.release()
    elif getattr(obj, "buffer", None) is not None:
        obj.buffer.destroy()
