"""What the quantize and dequantize kernels share: their workgroup, the rows each
invocation handles, the grid along a row, and the variant of one stored layout."""

from __future__ import annotations

from collections.abc import Mapping

from vkcore.compute.program import Program
from vkcore.device.device import Device
from vkcore.kernels import common as c
from vkcore.kernels import programs, variants
from vkcore.kernels.quant.qlayout import BLOCK, Layout

WORKGROUP = 64
# Rows per quantize/dequantize invocation (fewer workgroups; on lavapipe 4 beats 2 and 8),
# unless `vkcore tune` stored another value for the device: see quant_rows.
QUANT_ROWS = 4


def quant_rows(device: Device) -> int:
    """Rows per quantize/dequantize invocation (specialization constant 1)."""
    from vkcore.kernels import tuning

    return int(tuning.choice(device, "quant_rows") or QUANT_ROWS)


def column_groups(device: Device, count: int) -> int:
    """Workgroups along a row of ``count`` items, or a clear error past the grid limit."""
    groups = c.ceil_div(count, WORKGROUP)
    limit = int(device.info.max_compute_work_group_count[0])
    if groups > limit:
        raise ValueError(
            f"rows of {count} items need {groups} workgroups, more than this device's "
            f"maxComputeWorkGroupCount[0] ({limit}); split the matrix by columns"
        )
    return groups


def grid(device: Device, count: int, rows: int) -> tuple[int, int, int]:
    """Workgroups for ``rows`` rows of ``count`` items (``quant_rows`` rows an invocation)."""
    return column_groups(device, count), c.ceil_div(rows, quant_rows(device)), 1


def grouped_variant(layout: Layout) -> int:
    """GROUPED define: 0 without group_size; 2 where each stored block (16 columns, 32
    packed) lies in one group (group_cols a multiple of it); else 1 (per column)."""
    if layout.group_size is None:
        return 0
    cols = 2 * BLOCK if layout.packed else BLOCK
    return 2 if layout.group_cols % cols == 0 else 1


def layout_program(
    dev: Device, shader: str, vec: int, texel: Mapping[int, str] | None, layout: Layout
) -> Program:
    """``shader`` (quantize.comp or dequantize.comp) for ``layout``: VEC (vec4 loads),
    TEXEL (the bindings ``texel`` names read as texel buffers), GROUPED (grouped_variant),
    PACKED (two codes per byte), and RTE where the device allows (both are exact)."""
    defines = {
        "VEC": vec,
        "TEXEL": int(bool(texel)),
        "GROUPED": grouped_variant(layout),
        "PACKED": int(layout.packed),
    }
    return programs.program(
        dev,
        shader,
        {**defines, **variants.defines(dev.info, exact=True, reduces=False)},
        workgroup=WORKGROUP,
        spec={"ROWS": quant_rows(dev)},
        texel=texel or None,
    )
