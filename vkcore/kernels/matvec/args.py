"""Argument checks of the matvec calls, vector and batch: the weights and mode, int32
overflow, the vectors' shapes and devices, and how x is bound."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor, check_on_device, device_for
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.matvec.program import ACTIVATIONS
from vkcore.kernels.quant.qtensor import QuantizedTensor

ACC_LIMIT = 2**31 - 1
ACT_MAX = {"int8": 127, "uint8": 255}


def max_exact_n(bits: int, symmetric: bool, activations: str) -> int:
    """Largest row length whose int32 accumulator provably cannot overflow:
    ``ACC_LIMIT // (vmax * amax)`` (see :mod:`vkcore.kernels.matvec.matvec`)."""
    vmax = 2 ** (bits - 1) - 1 if symmetric else 2**bits - 1
    return ACC_LIMIT // (vmax * ACT_MAX[activations])


def check_call(qt: Any, activations: Any, device: Device | None) -> None:
    """Raise for weights that are not a QuantizedTensor, an unknown mode, another device,
    or rows (groups) long enough to overflow the int32 accumulator."""
    if not isinstance(qt, QuantizedTensor):
        hint = ""
        if isinstance(qt, F32Matrix):
            hint = "; use vkcore.matvec_f32 for float32 weights"
        elif isinstance(qt, (np.ndarray, Tensor)):
            hint = "; quantize the weights first with vkcore.quantize"
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}{hint}")
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, got {shown(activations)}")
    device_for(qt.device, device, "QuantizedTensor")
    if activations != "float":
        limit = max_exact_n(qt.bits, qt.symmetric, activations)
        cols = min(mg.group_cols(qt), qt.shape[1])  # columns summed into one int32
        if cols > limit:
            kind = "symmetric" if qt.symmetric else "asymmetric"
            what, bound = f"n = {qt.shape[1]} inputs", f"n = {limit}"
            if mg.groups(qt) > 1:
                what, bound = f"groups of {cols} columns", f"{limit} columns per group"
            raise ValueError(
                f"{what} could overflow the int32 accumulator with {activations} "
                f"activations and {qt.bits}-bit {kind} weights (exact up to {bound}); "
                "use activations='float', a smaller group_size or split the layer"
            )


def vector(x: Any, n: int, dev: Device, name: str) -> np.ndarray | Tensor:
    """``x`` as a float32 vector of length ``n`` (a Tensor on ``dev`` as it is)."""
    data = c.float_input(x, name)
    if isinstance(data, Tensor):
        check_on_device(data.device, dev, name, "the weights'")
    if data.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {data.shape}")
    return data if isinstance(data, Tensor) else c.as_float32(data)


def check_binding(dev: Device, nbytes: int, name: str) -> None:
    """x is bound whole (the kernels split rows, not columns): refuse one too long."""
    limit = storage.binding_limit(dev)
    if nbytes > limit:
        raise ValueError(
            f"{name} needs {nbytes} bytes in one storage binding, more than this device's "
            f"maxStorageBufferRange ({limit} bytes); split the layer by columns "
            "(sum the products of column blocks)"
        )


def input_buffer(mat: QuantizedTensor | F32Matrix, v: np.ndarray | Tensor, name: str) -> Buffer:
    """A Tensor's own buffer, or the array written into ``mat``'s scratch buffer ``name``."""
    if isinstance(v, Tensor):
        assert v.buffer is not None
        return v.buffer
    buf = mat.scratch_buffer(name, v.nbytes)
    buf.write(v)
    return buf
