"""What a probe measures: the built-in kernels, one case per pipeline family.

A kernel case gets a device, makes its small input (outside the timed stages), and
returns a function that runs the kernel once and brings the result back to the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

import vkcore

KernelCase = Callable[[vkcore.Device], Callable[[], Any]]
_WEIGHTS = (256, 1024)  # m x n of the quantize/dequantize/matvec weights
# The package seen as Any: the quantized kernels exist only in versions that export them.
_api: Any = vkcore


def _softmax_case(algorithm: str) -> KernelCase:
    def prepare(dev: vkcore.Device) -> Callable[[], Any]:
        x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
        return lambda: vkcore.softmax(x, algorithm=algorithm, device=dev)

    return prepare


def _weights() -> np.ndarray:
    return np.random.default_rng(1).standard_normal(_WEIGHTS).astype(np.float32)


def _quantize_case(dev: vkcore.Device) -> Callable[[], Any]:
    w = _weights()

    def run() -> Any:
        qt = _api.quantize(w, device=dev)
        try:
            return qt.q
        finally:
            qt.release()

    return run


def _dequantize_case(dev: vkcore.Device) -> Callable[[], Any]:
    # The quantized weights are made here, before the clock starts; the quantize
    # pipeline they need is then not counted in the dequantize stages.
    qt = _api.quantize(_weights(), device=dev)
    return lambda: _api.dequantize(qt, device=dev)


def _matvec_case(activations: str) -> KernelCase:
    def prepare(dev: vkcore.Device) -> Callable[[], Any]:
        qt = _api.quantize(_weights(), device=dev)
        x = np.random.default_rng(2).standard_normal(_WEIGHTS[1]).astype(np.float32)
        return lambda: _api.matvec(qt, x, activations=activations)

    return prepare


def registry() -> dict[str, KernelCase]:
    """Every kernel pipeline family this vkcore has; kernels not present are left out."""
    cases: dict[str, KernelCase] = {
        "softmax-online": _softmax_case("online"),
        "softmax-safe": _softmax_case("safe"),
    }
    if hasattr(vkcore, "quantize"):
        cases["quantize"] = _quantize_case
    if hasattr(vkcore, "quantize") and hasattr(vkcore, "dequantize"):
        cases["dequantize"] = _dequantize_case
    if hasattr(vkcore, "quantize") and hasattr(vkcore, "matvec"):
        for activations in ("float", "int8", "uint8"):
            cases[f"matvec-{activations}"] = _matvec_case(activations)
    return cases


KERNELS: dict[str, KernelCase] = registry()


def check_names(names: Iterable[str], known: Iterable[str], argument: str) -> list[str]:
    """``names`` as a list; ValueError naming ``argument`` when one is unknown or none given."""
    names, known = list(names), list(known)
    if not names:
        raise ValueError(f"{argument} must name at least one of: {', '.join(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"{argument}: unknown {', '.join(map(repr, unknown))}; "
            f"expected some of: {', '.join(known)}"
        )
    return names
