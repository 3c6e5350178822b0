"""Which ``shaders/matvec.comp`` variant a call gets: its modes and defines, the variants
declared for the wheel, rows per workgroup, the grid, and texel-buffer reads.

Modes (the MODE define): 0 float activations, 1 int8, 2 uint8, MODE_F32 the float32
baseline, MODE_ROWSUM the row sums ``V_ig`` of the uint8 mode.
"""

from __future__ import annotations

from typing import Any

from vkcore.compute.program import Program
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.kernels import common as c
from vkcore.kernels import programs, variants
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.quant.qtensor import QuantizedTensor

ACTIVATIONS = ("float", "int8", "uint8")
MODES = {"float": 0, "int8": 1, "uint8": 2}
MODE_F32, MODE_ROWSUM = 3, 4
ROWS = 16  # rows per workgroup: each activation block loaded serves 16 rows
# The float32 kernel is fastest with 8 (measured on lavapipe: 7.3 vs 9.3 ms at 4096x4096),
# the quantized ones with 16; the baseline gets its own best.
ROWS_F32 = 8
# (WSIGNED, ASYM): int8 storage for symmetric weights, uint8 with zero points otherwise.
STORAGE = ((1, 0), (0, 1))


def workgroup_size(device: Device) -> int:
    """One subgroup per workgroup where the device reports a size (8 on lavapipe)."""
    size = int(device.info.subgroup_size or 0)
    return size if 4 <= size <= 128 else 32


def rows_per_workgroup(device: Device, mode: int) -> int:
    """Rows per workgroup (specialization constant 1): the value ``vkcore tune`` stored for
    this device, else ROWS (ROWS_F32 for the float32 kernel), halved until the shader's
    ``sh_acc[ROWS][workgroup]`` fits the device's shared memory (variants.fit_rows)."""
    from vkcore.kernels import tuning

    if mode == MODE_F32:
        rows = int(tuning.choice(device, "matvec_f32_rows") or ROWS_F32)
    else:
        rows = int(tuning.choice(device, "matvec_rows") or ROWS)
    return variants.fit_rows(device.info, workgroup_size(device), rows)


def _defines(
    mode: int,
    signed: bool,
    asym: bool,
    texel: bool,
    grouped: int = 0,
    packed: int = 0,
    dot: int = 0,
) -> dict[str, int]:
    """The kernel's defines; GROUPED, PACKED and DOT only when set (the per-channel
    variants keep their names)."""
    out = {"MODE": mode, "WSIGNED": int(signed), "ASYM": int(asym), "TEXEL": int(texel)}
    out.update({k: 1 for k, v in (("GROUPED", grouped), ("PACKED", packed), ("DOT", dot)) if v})
    return out


def _exact(mode: int) -> bool:
    """The integer-activation modes promise y bit for bit: their shaders request RTE."""
    return mode in (MODES["int8"], MODES["uint8"])


def _reduces(mode: int, grouped: int = 0) -> bool:
    """Whether a matvec variant reduces with subgroup arithmetic (workgroup_sum): every
    per-channel mode, and the grouped kernel's float mode; the grouped integer modes and
    row sums exchange their per-group sums through shared memory only."""
    return not grouped or mode == MODES["float"]


# Every shader variant the functions below can request (precompiled into the wheel), with
# the device-dependent defines of variants.defines (see _reduces: which variants use
# subgroup arithmetic and so get a SUBGROUP=0 twin).
for _mode in (0, 1, 2, MODE_ROWSUM, MODE_F32):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel)
            for sg, asym in (((1, 0),) if _mode == MODE_F32 else STORAGE)
            for texel in (True, False)
        ],
        exact=_exact(_mode),
        reduces=True,
    )
# The grouped / packed kernel (matvec_groups.glsl) in every mode but the float32 one, and
# the integer dot product on 8-bit storage (per-channel and grouped kernels).
for _mode in (0, 1, 2, MODE_ROWSUM):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel, grouped=1, packed=packed)
            for sg, asym in STORAGE
            for texel in (True, False)
            for packed in (0, 1)
        ],
        exact=_exact(_mode),
        reduces=_reduces(_mode, grouped=1),
    )
for _mode, _grouped in ((1, 0), (2, 0), (1, 1), (2, 1)):
    variants.register(
        "matvec.comp",
        [
            _defines(_mode, bool(sg), bool(asym), texel, grouped=grouped, dot=1)
            for sg, asym in STORAGE
            for texel in (True, False)
            for grouped in (0, 1)
            if grouped == _grouped
        ],
        exact=True,
        reduces=_reduces(_mode, grouped=_grouped),
    )


def pipe_mode(mat: QuantizedTensor | F32Matrix, mode: int) -> int:
    """The MODE define of ``mat``'s kernel: the float32 baseline's own for an F32Matrix."""
    return MODE_F32 if isinstance(mat, F32Matrix) else mode


def variant_layout(qt: QuantizedTensor, mode: int) -> tuple[int, int, int]:
    """(GROUPED, PACKED, DOT) of the kernel variant for ``qt`` in ``mode``."""
    activations = next((a for a, v in MODES.items() if v == mode), "")
    dot = mg.use_dot(qt.device, qt, activations)
    return int(mg.grouped(qt)), int(getattr(qt, "packed", False)), int(dot)


def param_buffers(mat: Any) -> tuple[Buffer, Buffer]:
    """The scale and zero-point buffers of a QuantizedTensor, bound whole (placeholders
    for an F32Matrix)."""
    if isinstance(mat, F32Matrix):
        dummy = c.dummy_buffer(mat.device)
        return dummy, dummy
    scale, zero = mat.scale_tensor.buffer, mat.zero_point_tensor.buffer
    assert scale is not None and zero is not None
    return scale, zero


def grid(dev: Device, rows: int, mode: int) -> tuple[int, int, int]:
    """Workgroups for ``rows`` rows in ``mode``, or a ValueError past the device's grid."""
    return c.row_grid(dev, rows, rows_per_workgroup(dev, mode))


def texel(mat: QuantizedTensor | F32Matrix, mode: int, act: Buffer | None) -> bool:
    """Whether the weights and the activations (float x, or the quantized x of the integer
    modes) can be read as texel buffers: the faster load path on lavapipe."""
    dev = mat.device

    def viewable(buf: Buffer, fmt: str) -> bool:  # a view holds at least one texel
        return buf.nbytes >= 16 and c.texel_format(dev, buf, fmt) is not None

    fmt = "rgba32f" if mode == MODE_F32 else "rgba32ui"
    if not all(viewable(ch.buffer, fmt) for ch in mat.chunks):
        return False
    if isinstance(mat, QuantizedTensor) and mg.grouped(mat):  # parameters as texels too
        scale, zero = param_buffers(mat)
        if not (c.texel_format(dev, scale, "r32f") and c.texel_format(dev, zero, "r32ui")):
            return False
    if mode in (MODES["float"], MODE_F32):
        return act is not None and viewable(act, "rgba32f")
    if mode in (MODES["int8"], MODES["uint8"]):
        return act is not None and viewable(act, "rgba32ui")
    return True


def program(
    dev: Device,
    mode: int,
    signed: bool,
    asym: bool,
    texel: bool,
    layout: tuple[int, int, int] = (0, 0, 0),
) -> Program:
    """The matvec.comp Program of ``mode``, with ``layout`` = (GROUPED, PACKED, DOT)."""
    formats: dict[int, str] = {}
    if texel:
        formats[0] = "rgba32f" if mode == MODE_F32 else "rgba32ui"
        if mode in (MODES["float"], MODE_F32):
            formats[5] = "rgba32f"
        elif mode in (MODES["int8"], MODES["uint8"]):
            formats[4] = "rgba32ui"
    grouped, packed, dot = layout
    if texel and grouped:
        formats.update({1: "r32f", 2: "r32ui"})
    return programs.program(
        dev,
        "matvec.comp",
        {
            **_defines(mode, signed, asym, texel, grouped, packed, dot),
            **variants.defines(dev.info, exact=_exact(mode), reduces=_reduces(mode, grouped)),
        },
        workgroup=workgroup_size(dev),
        spec={"ROWS": rows_per_workgroup(dev, mode)},
        texel=formats or None,
    )
