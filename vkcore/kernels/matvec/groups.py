"""The grouped and packed matvec layouts (``GROUPED=1`` of ``shaders/matvec.comp``, its
main() in ``shaders/matvec_groups.glsl``), and the choice of the integer dot product.

Which kernel a QuantizedTensor gets: bits 5..8 with one parameter group per row (per
tensor, per channel, or a group_size of at least n) keep the per-channel kernel
(``GROUPED=0``, unchanged); packed codes (bits <= 4) or G > 1 groups take the grouped one.

Work split (:func:`unit_split`): each group is cut into ``parts`` pieces so that a
workgroup has at least one unit of work per invocation (``units = G * parts``); pieces are
whole 16-byte blocks where the groups are. In the integer modes the invocation that owns a
row adds the unit sums in unit order, so the int32 ``acc_ig`` is exact and the float terms
``t_ig = fl(fl(s_ig s_x) fl(acc_ig))`` are added in increasing g starting from ``t_i0``,
then the bias: the order of :func:`vkcore.reference.matvec`, bit for bit.

Integer dot product (:func:`use_dot`): the int8/uint8 activation modes on 8-bit storage
(bits 5..8, per tensor, per channel or grouped) may multiply four packed bytes at once with
``OpSDot``/``OpUDot``/``OpSUDot`` (``DOT=1``; ``SPV_KHR_integer_dot_product``, emitted
through ``GL_EXT_spirv_intrinsics``); asymmetric weights subtract ``z * sum(qx)`` per block.
Used only where the device reports ``shaderIntegerDotProduct`` (enabled at device creation
whenever reported) and marks 4x8-bit packed dot products accelerated; elsewhere (lavapipe
among them) the bitfieldExtract path runs. ``vkcore tune`` does not choose it: its
parameters are row counts that the tune tests check path by path. Packed 4-bit codes keep
``bitfieldExtract`` (their nibbles would need unpacking to bytes first). Both paths give
the same integers.
"""

from __future__ import annotations

from typing import Any

from vkcore.device.device import Device
from vkcore.device.info import DeviceInfo
from vkcore.kernels import common as c
from vkcore.kernels.quant.qlayout import BLOCK


def grouped(qt: Any) -> bool:
    """Whether ``qt`` needs the grouped kernel: packed codes, or more than one group a row."""
    return bool(getattr(qt, "packed", False)) or groups(qt) > 1


def groups(qt: Any) -> int:
    """G: parameter groups per row (1 per tensor or per channel)."""
    return int(getattr(qt, "groups", 1))


def group_cols(qt: Any) -> int:
    """Columns per parameter group (n without group_size)."""
    return int(getattr(qt, "group_cols", qt.shape[1]))


def codes_per_block(qt: Any) -> int:
    return 2 * BLOCK if getattr(qt, "packed", False) else BLOCK


def stored_columns(qt: Any) -> int:
    """Columns a stored row spans, padding included (the quantized x must cover them)."""
    return qt.row_bytes * (2 if getattr(qt, "packed", False) else 1)


def unit_split(qt: Any, workgroup: int) -> tuple[int, int]:
    """``(parts, part_cols)``: each group cut into ``parts`` pieces of ``part_cols`` columns,
    enough units (``G * parts``) for every invocation of a workgroup of ``workgroup``;
    pieces are whole blocks when the groups are (or when there is one group)."""
    n, g, cpb = qt.shape[1], group_cols(qt), codes_per_block(qt)
    cols = min(g, n)
    count = groups(qt)
    parts = 1 if workgroup <= count else c.ceil_div(workgroup, count)
    aligned = count == 1 or g % cpb == 0
    if aligned:
        parts = max(1, min(parts, c.ceil_div(cols, cpb)))
        part_cols = c.ceil_div(c.ceil_div(cols, parts), cpb) * cpb
    else:
        parts = max(1, min(parts, cols))
        part_cols = c.ceil_div(cols, parts)
    return c.ceil_div(cols, part_cols), part_cols


def push_words(
    qt: Any, workgroup: int, rows: int, row0: int, prow0: int, wrow0: int, flags: tuple[int, int]
) -> tuple[int, ...]:
    """The 13 push-constant words of the grouped kernel (see matvec.comp's Push block):
    ``rows`` rows whose y / bias / row-sum index starts at ``row0``, parameter row at
    ``prow0`` and weight row at ``wrow0`` in their bound buffers; flags: has_bias, out_acc."""
    parts, part_cols = unit_split(qt, workgroup)
    count = groups(qt)
    stride = count if qt.per_channel else 0
    return (
        qt.row_bytes // BLOCK,
        qt.shape[1],
        rows,
        row0,
        stride,
        *flags,
        count,
        group_cols(qt),
        parts,
        part_cols,
        prow0,
        wrow0,
    )


PUSH_BYTES = 52


def dot_capable(info: DeviceInfo) -> bool:
    """The device reports shaderIntegerDotProduct (vkcore enables it at device creation)."""
    return bool(info.integer_dot_product)


def dot_default(info: DeviceInfo) -> bool:
    """The device's own answer: dot products where 4x8-bit packed ones are accelerated."""
    return dot_capable(info) and bool(info.integer_dot_product_8bit_accelerated)


def use_dot(device: Device, qt: Any, activations: str) -> bool:
    """Whether this integer-mode call runs the DOT=1 variant (module docstring): where
    the device marks 4x8-bit dot products accelerated, else what ``vkcore tune`` measured
    and stored for it (``matvec_dot``; only offered where the device has the
    instruction), else not. Never on packed codes or without shaderIntegerDotProduct."""
    from vkcore.kernels import tuning

    if activations not in ("int8", "uint8") or getattr(qt, "packed", False):
        return False
    if not dot_capable(device.info):
        return False
    return dot_default(device.info) or tuning.choice(device, "matvec_dot") == 1
