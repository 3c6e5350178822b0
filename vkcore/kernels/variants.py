"""Shader variants chosen from the device's properties: float rounding, subgroup arithmetic,
and the shared memory a workgroup needs.

Two defines follow the device, decided here and nowhere else (:func:`defines`):

* ``RTE=1`` (``shaders/float_controls.glsl``) in the kernels whose results are promised
  bit for bit, where the device reports ``shaderRoundingModeRTEFloat32``: the shader asks
  for round-to-nearest-even (``SPV_KHR_float_controls``). Without it Vulkan lets a device
  round float32 arithmetic to nearest even or toward zero; :func:`exactness` says what is
  then still exact.
* ``SUBGROUP=0`` (``shaders/workgroup_reduce.glsl``) in the kernels that reduce over a
  workgroup, where the device has no subgroup arithmetic in compute shaders: reductions
  use shared memory only. Otherwise a workgroup of one subgroup reduces with subgroup
  operations. Every reduction is correct for any subgroup size the compiler picks and any
  workgroup size, so no kernel needs a fixed subgroup size (VK_EXT_subgroup_size_control
  is not used).

Absent defines are the defaults (``RTE=0``, ``SUBGROUP=1``), so the usual variants keep
their names. :func:`register` declares every combination a kernel can request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vkcore import spirv
from vkcore.device.info import DeviceInfo

SHARED_SLOT_BYTES = 4  # every shared array of the kernels holds 32-bit values


def defines(info: DeviceInfo, *, exact: bool, reduces: bool) -> dict[str, int]:
    """The device-dependent defines of a shader: ``exact`` for one whose results are
    promised bit for bit, ``reduces`` for one that includes workgroup_reduce.glsl."""
    out: dict[str, int] = {}
    if exact and info.rounding_mode_rte_float32:
        out["RTE"] = 1
    if reduces and not info.subgroup_arithmetic_in_compute:
        out["SUBGROUP"] = 0
    return out


def register(
    name: str, grid: Iterable[Mapping[str, int | str]], *, exact: bool, reduces: bool
) -> None:
    """Declare ``grid`` for ``shaders/<name>`` with every device-dependent define added
    that :func:`defines` can choose for such a shader."""
    extras: list[dict[str, int]] = [{}]
    if exact:
        extras += [dict(e, RTE=1) for e in extras]
    if reduces:
        extras += [dict(e, SUBGROUP=0) for e in extras]
    spirv.register_variants(name, [{**d, **e} for d in grid for e in extras])


def fit_rows(info: DeviceInfo, workgroup: int, rows: int, slots_per_row: int = 1) -> int:
    """The largest row count, at most ``rows`` (halving), whose shared memory
    (``rows * slots_per_row * workgroup`` 32-bit slots) fits maxComputeSharedMemorySize.

    Vulkan guarantees 16 KiB; a device reporting 0 (unknown) is held to that. Raises
    ValueError when not even one row fits (the workgroup itself is too large).
    """
    if workgroup < 1 or rows < 1:
        raise ValueError(f"workgroup and rows must be positive, got {workgroup} and {rows}")
    limit = info.max_compute_shared_memory_size or 16384
    per_row = slots_per_row * workgroup * SHARED_SLOT_BYTES
    if per_row > limit:
        raise ValueError(
            f"a workgroup of {workgroup} needs {per_row} bytes of shared memory per row, more "
            f"than this device's maxComputeSharedMemorySize ({limit} bytes)"
        )
    while rows > 1 and rows * per_row > limit:
        rows //= 2
    return rows


def exactness(info: DeviceInfo) -> dict[str, Any]:
    """Which results are bit for bit with :mod:`vkcore.reference` on this device, and
    which only within one float32 rounding (for ``vkcore info`` and docs/quantization.md)."""
    rte = bool(info.rounding_mode_rte_float32)
    rounded = "bit for bit" if rte else "within one float32 rounding per step"
    return {
        "rounding_mode_rte_requested": rte,
        "subgroup_reductions": bool(info.subgroup_arithmetic_in_compute),
        # Decided by exact products and comparisons: the same in any rounding mode.
        "quantize_q": "bit for bit",
        "quantize_scale": "bit for bit",
        "matvec_int32_accumulator": "bit for bit",
        "dequantize": rounded,
        "activation_scale": rounded,
        "activation_q": "bit for bit" if rte else "bit for bit given the device's activation scale",
        "matvec_integer_modes": rounded,
        "denormals": (
            "subnormal weights and activations count as 0 on every device; subnormal "
            "scales and dequantized values are "
            + (
                "kept (shaderDenormPreserveFloat32)"
                if info.denorm_preserve_float32
                else "kept or flushed to 0, as the device does"
            )
        ),
    }
