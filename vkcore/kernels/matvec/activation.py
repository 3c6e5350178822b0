"""Activation quantization on the device (``shaders/quantize_act.comp``): x quantized per
tensor (int8 symmetric, uint8 with a zero point) exactly as
:func:`vkcore.reference.quantize_activations` does, for one vector or, with ``BATCH=1``,
for every column of an ``(n, b)`` X on its own (ACT 0 copies float columns instead)."""

from __future__ import annotations

import numpy as np

from vkcore.compute.program import Program
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import programs, variants
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.quant.qtensor import QuantizedTensor

ACT_INV = {1: np.float32(1 / 127), 2: np.float32(1 / 255)}  # by ACT: int8, uint8
ACT_TINY = np.float32(2.0**-96)
ACT_WORKGROUP = 64

variants.register("quantize_act.comp", [{"ACT": 1}, {"ACT": 2}], exact=True, reduces=True)
variants.register(
    "quantize_act.comp", [{"ACT": 1, "BATCH": 1}, {"ACT": 2, "BATCH": 1}], exact=True, reduces=True
)
# ACT 0 copies the float columns into the padded layout: no reduction.
variants.register("quantize_act.comp", [{"ACT": 0, "BATCH": 1}], exact=True, reduces=False)


def _program(dev: Device, act: int, batch: bool) -> Program:
    defines = {"ACT": act, **({"BATCH": 1} if batch else {})}
    return programs.program(
        dev,
        "quantize_act.comp",
        {**defines, **variants.defines(dev.info, exact=True, reduces=act != 0)},
        workgroup=ACT_WORKGROUP,
    )


def _head(n: int, words: int, act: int) -> bytes:
    """The push constants both layouts share: n, output words, 1 / amax and the tiny
    bound below which a range counts as 0."""
    inv = ACT_INV.get(act, np.float32(0))
    return c.pack_u32(n, words) + np.array([inv, ACT_TINY], dtype="<f4").tobytes()


def quantize_vector(qt: QuantizedTensor, xbuf: Buffer, act: int, steps: list[Dispatch]) -> Buffer:
    """Append the dispatch that quantizes x (ACT 1: int8, 2: uint8) for ``qt``'s kernel;
    returns its output buffer (a header, then the codes padded to the stored row)."""
    words = mg.stored_columns(qt) // 4  # packed rows span twice their bytes in columns
    out = qt.scratch_buffer("qx", 16 + 4 * words)
    push = _head(qt.shape[1], words, act)
    steps.append(_program(qt.device, act, False).record(xbuf, out, push=push))
    return out


def quantize_columns(
    dev: Device, act: int, xbuf: Buffer, out: Buffer, *, n: int, b: int, codes: int, stride: int
) -> Dispatch:
    """The dispatch that writes every column of the row-major ``(n, b)`` x into ``out``,
    each ``stride`` texels padded to ``codes`` columns: quantized (ACT 1, 2: a header
    (s_x, z_x) then the codes) or copied (ACT 0)."""
    words, col_words = (codes, codes) if act == 0 else (codes // 4, 4 * stride)
    push = _head(n, words, act) + c.pack_u32(b, 1, col_words)  # x[i, col] at i * b + col
    return _program(dev, act, True).record(xbuf, out, groups=(1, b, 1), push=push)
