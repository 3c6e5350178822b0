"""How a softmax call runs on the device: its layout (:class:`Plan`: rows split across
workgroups), the shader variants, and the dispatches of each stage.

Stages (the STAGE define): 0 is a whole row in one workgroup; a row split across
workgroups runs the rest in order: partial states (m, l) per piece, (safe: partial
sums,) then the merge and write.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from vkcore import spirv
from vkcore.compute.program import Program
from vkcore.compute.tensor import Tensor
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import programs, variants

ALGORITHMS = ("online", "safe")
# Every shader variant dispatches can request (precompiled into the wheel).
# Stages that write the output also come as LOG=1 (log_softmax); the others only as LOG=0.
_STAGES = {"online": [0, 1, 2], "safe": [0, 1, 2, 3]}
_WRITE_STAGES = {"online": [0, 2], "safe": [0, 3]}
# Stages that reduce over the workgroup (the others only merge stored partial states):
# only these get a shared-memory variant (SUBGROUP=0, see variants.defines).
_REDUCING_STAGES = {"softmax_online.comp": (0, 1), "softmax_safe.comp": (0, 1, 2)}
for _alg in ALGORITHMS:
    for _log, _stages in ((0, _STAGES[_alg]), (1, _WRITE_STAGES[_alg])):
        for _stage in _stages:
            _shader = f"softmax_{_alg}.comp"
            variants.register(
                _shader,
                spirv.define_grid(STAGE=[_stage], VEC4=[0, 1], TEXEL=[0, 1], LOG=[_log]),
                exact=False,
                reduces=_stage in _REDUCING_STAGES[_shader],
            )
spirv.register_variants("softmax_roofline.comp", spirv.define_grid(TEXEL=[0, 1]))
# A workgroup's share of a row is at least this many elements when a row is split.
MIN_CHUNK_ELEMENTS = 8192
# Loop steps one invocation may take per pass. llvmpipe ends any shader loop after 65,535
# iterations in total (a guard against hangs), and a workgroup makes up to three passes
# over its chunk, so longer chunks are split across workgroups instead.
MAX_STEPS_PER_PASS = 16384
# Workgroup size on GPUs; on a CPU device it is the subgroup size (see workgroup_size).
GPU_WORKGROUP = 256


def workgroup_size(device: Device) -> int:
    """Invocations per workgroup: the value ``vkcore tune`` stored for this device, else
    one subgroup on a CPU device and GPU_WORKGROUP elsewhere.

    lavapipe runs a workgroup of one subgroup (8 lanes of a 256-bit vector) without
    shared memory or barrier switches; measured 3-4x faster per pass there than 64.
    """
    from vkcore.kernels import tuning

    tuned = tuning.choice(device, "softmax_workgroup")
    if tuned is not None:
        return int(tuned)
    if device.info.is_cpu:
        return max(1, device.info.subgroup_size or 8)
    info = device.info
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    return min(GPU_WORKGROUP, limit)


@dataclass(frozen=True)
class Plan:
    """How one softmax call is laid out on the device."""

    rows: int
    n: int  # row length in elements
    vec4: bool
    units: int  # row length in load units (vec4 or float)
    chunk: int  # units per workgroup
    nchunks: int  # workgroups per row
    workgroup: int


def plan(device: Device, rows: int, n: int, workgroup: int | None = None) -> Plan:
    """Split rows across workgroups when there are too few rows to fill the device, and
    whenever a row is longer than MAX_STEPS_PER_PASS steps of one workgroup."""
    wg = workgroup_size(device) if workgroup is None else workgroup
    vec4 = n % 4 == 0
    units = n // 4 if vec4 else n
    min_units = MIN_CHUNK_ELEMENTS // (4 if vec4 else 1)
    chunk, nchunks = c.row_chunks(device, rows, units, wg, min_units, MAX_STEPS_PER_PASS)
    return Plan(rows, n, vec4, units, chunk, nchunks, wg)


_plans: weakref.WeakKeyDictionary[Device, dict[tuple[int, int, int], Plan]] = (
    weakref.WeakKeyDictionary()
)


def cached_plan(device: Device, rows: int, n: int) -> Plan:
    """plan() memoized per device and workgroup size (a few shapes recur; bounded)."""
    wg = workgroup_size(device)
    table = _plans.setdefault(device, {})
    p = table.get((rows, n, wg))
    if p is None:
        if len(table) >= 256:
            table.clear()
        p = table[(rows, n, wg)] = plan(device, rows, n, workgroup=wg)
    return p


def _program(
    device: Device, shader: str, stage: int, p: Plan, texel: str | None, log: bool
) -> Program:
    """The Program of one softmax variant on ``device`` (kept under a cheap key: a tiny
    call's overhead is measured against the bare submission)."""
    memo = programs.table(device, "softmax")
    key = (shader, stage, p.vec4, p.workgroup, texel, log)
    prog = memo.get(key)
    if prog is None or prog.pipeline.handle is None:
        reduces = stage in _REDUCING_STAGES[shader]
        extra = variants.defines(device.info, exact=False, reduces=reduces)
        defines = {"STAGE": stage, "VEC4": int(p.vec4), "TEXEL": int(texel is not None)}
        prog = memo[key] = programs.program(
            device,
            shader,
            {**defines, "LOG": int(log), **extra},
            workgroup=p.workgroup,
            texel={0: texel} if texel else None,
        )
    return prog


def split_stages(algorithm: str) -> list[int]:
    """Shader stages of a split row: partial states, (safe: partial sums,) merge and write."""
    return _STAGES[algorithm][1:]


def dispatches(
    device: Device,
    p: Plan,
    algorithm: str,
    x: Buffer,
    y: Buffer,
    parts: Buffer,
    x_offset: int = 0,
    *,
    stages: list[int] | None = None,
    nparts: int | None = None,
    part0: int = 0,
    log: bool = False,
) -> list[Dispatch]:
    """The dispatches of ``stages`` (default: all of them) for the rows of ``p``; a row's
    states are parts ``part0 .. part0 + p.nchunks - 1`` of ``nparts`` (default p.nchunks).
    ``log``: the writing stages write log_softmax."""
    shader = f"softmax_{algorithm}.comp"
    if stages is None:
        stages = [0] if p.nchunks == 1 else split_stages(algorithm)
    max_rows = device.info.max_compute_work_group_count[1]
    steps = []
    texel = c.texel_format(device, x, "rgba32f" if p.vec4 else "r32f")
    for stage in stages:
        prog = _program(device, shader, stage, p, texel, log and stage in _WRITE_STAGES[algorithm])
        for first in range(0, p.rows, max_rows):
            count = min(max_rows, p.rows - first)
            push = c.pack_u32(p.units, first, p.chunk, nparts or p.nchunks, x_offset, part0)
            steps.append(prog.record(x, y, parts, groups=(p.nchunks, count, 1), push=push))
    # Stages of one slice depend on each other; order stages outermost so barriers suffice.
    return steps


def roofline_copy(x: Tensor, y: Tensor) -> float | None:
    """Copy x to y with the softmax kernels' access pattern; device seconds (for the bench).

    Both tensors must be float32 on one device with the same number of elements, a
    multiple of 4. What this copy reaches is the most any softmax pass can reach here.
    """
    if x.device is not y.device or x.dtype != np.float32 or y.dtype != np.float32:
        raise ValueError("x and y must be float32 Tensors on one device")
    if x.size != y.size or x.size % 4 or not x.size:
        raise ValueError(
            f"x and y must have the same non-zero size, a multiple of 4; got {x.size}, {y.size}"
        )
    dev = x.device
    units = x.size // 4
    wg = workgroup_size(dev)
    groups = min(units, 4 * c.parallelism(dev) * 64)
    chunk = c.ceil_div(c.ceil_div(units, groups), wg) * wg
    chunk = min(max(chunk, wg), MAX_STEPS_PER_PASS * wg)
    groups = c.ceil_div(units, chunk)
    assert x.buffer is not None and y.buffer is not None
    texel = c.texel_format(dev, x.buffer, "rgba32f")
    prog = programs.program(
        dev,
        "softmax_roofline.comp",
        {"TEXEL": int(texel is not None)},
        workgroup=wg,
        texel={0: texel} if texel else None,
    )
    step = prog.record(x.buffer, y.buffer, groups=groups, push=c.pack_u32(units, chunk))
    dev.run([step])
    return dev.last_device_seconds
