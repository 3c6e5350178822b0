"""The device steps of top-k, recorded for one submission: the small-k select kernel
(``shaders/topk_select.comp``, also the fused softmax + top-k) and the bitonic sort for
any k (``shaders/topk_sort.comp``).

Buffers a caller provides (all device buffers; see :func:`scratch_bytes`):

* ``values`` (rows x k float32), ``indices`` (rows x k int64, written as two words);
* ``status`` (rows x 4 words): the row's NaN/+inf flag, and with the select kernel its
  softmax maximum and sum (the sort reads them back for the fused output);
* ``scratch``: the select kernel's per-chunk candidates, or the sort's pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkcore import spirv
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import programs, storage, variants

# k up to select_k_max(device) goes through the select kernel: each invocation keeps a
# private heap of k (key, index) pairs (2 * KMAX words of private memory), merged in k
# rounds. A CPU device's private memory is its cache-backed stack, and there the sort's
# dozens of full passes cost far more (64x32000, k=129: 26 ms selected, 2.7 s sorted);
# a GPU spills large private arrays to slow scratch memory, while its sort is a wide grid.
SMALL_K_MAX_CPU = 512
SMALL_K_MAX_GPU = 128
# The most largest keys the floor pass keeps per invocation (4 quads of the shader's
# BEST_QUADS).
MAX_FLOOR_SLOTS = 16
# A chunk of a split row has at least this many elements (and 16 per kept candidate).
MIN_CHUNK_ELEMENTS = 8192
# llvmpipe ends a SIMD group's loops after 65,535 iterations in all (one limiter shared by
# every loop of a shader): the select kernel's loops stay within this many, counting each
# element's heap insertion and the lanes' drift at their worst
# (see max_elements_per_invocation).
LOOP_BUDGET = 60000
# Workgroup sizes off a CPU device: the select kernel's invocations hold private lists, so
# fewer of them; the sort's steps are independent compare-exchanges.
GPU_SELECT_WORKGROUP = 64
GPU_SORT_WORKGROUP = 256
# Items (elements or pairs) each sort invocation handles per step: on a CPU device a
# workgroup costs more than a loop step, on a GPU a wide grid is cheap.
CPU_ITEMS_PER_INVOCATION = 64
GPU_ITEMS_PER_INVOCATION = 4

variants.register(
    "topk_select.comp",
    spirv.define_grid(STAGE=[0, 1, 2], FUSED=[0, 1], TEXEL=[0, 1], VEC4=[0, 1]),
    exact=False,
    reduces=True,
)
variants.register(
    "topk_sort.comp",
    [*spirv.define_grid(STAGE=[0, 1], FUSED=[0]), *spirv.define_grid(STAGE=[2], FUSED=[0, 1])],
    exact=False,
    reduces=False,
)


def _workgroup(device: Device, gpu: int) -> int:
    """One subgroup on a CPU device (lavapipe runs it without barrier switches), else
    ``gpu`` bounded by the device's limits."""
    info = device.info
    if info.is_cpu:
        return max(1, info.subgroup_size or 8)
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    return max(1, min(gpu, limit))


def _pow2_at_least(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


@dataclass(frozen=True)
class SelectPlan:
    rows: int
    n: int
    k: int
    kmax: int  # the private lists' size (a power of two >= k)
    chunk: int  # elements per workgroup when split
    nchunks: int  # workgroups per row (1: STAGE 0 alone)
    workgroup: int

    @property
    def floor_slots(self) -> int:
        """Largest keys each invocation needs for the key floor: ceil(k / workgroup)."""
        return c.ceil_div(self.k, self.workgroup)

    @property
    def has_floor(self) -> bool:
        """Whether a floor pass can help: each invocation keeps at most MAX_FLOOR_SLOTS
        largest keys (past that the pass would be wasted)."""
        return self.floor_slots <= MAX_FLOOR_SLOTS

    @property
    def best_quads(self) -> int:
        """Quads of largest keys each invocation keeps: 1, 2 or 4 (BEST_QUADS)."""
        slots = self.floor_slots
        return 1 if slots <= 4 else 2 if slots <= 8 else MAX_FLOOR_SLOTS // 4

    @property
    def part_words(self) -> int:
        return self.rows * self.nchunks * (4 + 2 * self.k) if self.nchunks > 1 else 0


def max_elements_per_invocation(k: int, workgroup: int) -> int:
    """Elements (or candidates) one select invocation may scan within LOOP_BUDGET. Each
    costs its passes' loop steps and at worst a heap walk of ``depth`` levels; and since
    llvmpipe counts iterations per SIMD group (a workgroup of one subgroup on a CPU
    device), lanes whose candidate queues fill at different blocks drift apart, which
    costs up to ``workgroup`` inner steps per block of four. The heap's clearing and
    sorting and the k merge rounds (with shared-memory trees) come on top."""
    depth = k.bit_length()
    fixed = k * (depth + 4 + workgroup.bit_length()) + 64
    drift = c.ceil_div(workgroup, 4)
    return max(1, (LOOP_BUDGET - fixed) // (depth + 3 + drift))


def select_k_max(device: Device) -> int:
    """The largest k the select kernel takes on ``device`` (larger k are sorted)."""
    return SMALL_K_MAX_CPU if device.info.is_cpu else SMALL_K_MAX_GPU


def uses_floor_pass(device: Device) -> bool:
    """Whether the select kernel reads its chunk twice, the first pass setting a key
    floor: on a CPU device, whose SIMD lanes run a branch under a mask, so that a heap
    insertion costs every lane whenever one needs it (64x32000, k=40: 13 ms in one pass,
    5 ms in two, the second from cache). A GPU skips a branch no lane takes and reads each
    element once."""
    return device.info.is_cpu


def select_plan(device: Device, rows: int, n: int, k: int) -> SelectPlan | None:
    """The select kernel's layout, or None when k is too large for it (the sort then)."""
    if k > select_k_max(device):
        return None
    wg = _workgroup(device, GPU_SELECT_WORKGROUP)
    most = max_elements_per_invocation(k, wg)
    min_chunk = max(MIN_CHUNK_ELEMENTS, 16 * k)
    chunk, nchunks = c.row_chunks(device, rows, n, wg, min_chunk, most)
    if nchunks > 1 and c.ceil_div(nchunks * k, wg) > most:
        return None
    return SelectPlan(rows, n, k, max(8, _pow2_at_least(k)), chunk, nchunks, wg)


def _rows_per_dispatch(device: Device) -> int:
    return int(device.info.max_compute_work_group_count[1])


def select_steps(
    device: Device,
    plan: SelectPlan,
    x: Buffer,
    values: Buffer,
    indices: Buffer,
    parts: Buffer,
    status: Buffer,
    *,
    fused: bool,
    want_status: bool,
) -> list[Dispatch]:
    """The select kernel's dispatches over every row of ``plan``. Rows whose length is a
    multiple of 4 are also bound as vec4s (binding 5: four elements per load)."""
    vec4 = plan.n % 4 == 0
    texel = c.texel_format(device, x, "r32f")
    texel4 = c.texel_format(device, x, "rgba32f") if vec4 and texel else None
    views = {0: texel} if texel else {}
    if texel4:
        views[5] = texel4
    stages = [0] if plan.nchunks == 1 else [1, 2]
    steps = []
    for stage in stages:
        extra = variants.defines(device.info, exact=False, reduces=True)
        defines = {
            "STAGE": stage,
            "FUSED": int(fused),
            "TEXEL": int(texel is not None and (texel4 is not None or not vec4)),
            "VEC4": int(vec4),
        }
        prog = programs.program(
            device,
            "topk_select.comp",
            {**defines, **extra},
            workgroup=plan.workgroup,
            spec={
                "KMAX": plan.kmax,
                "BEST_QUADS": plan.best_quads,
                "FLOOR_PASS": int(uses_floor_pass(device) and plan.has_floor),
            },
            texel=views if defines["TEXEL"] else None,
        )
        gx = plan.nchunks if stage == 1 else 1
        per = _rows_per_dispatch(device)
        buffers = (x, values, indices, parts, status, *((x,) if vec4 else ()))
        for first in range(0, plan.rows, per):
            count = min(per, plan.rows - first)
            push = c.pack_u32(plan.n, plan.k, first, plan.chunk, plan.nchunks, int(want_status))
            steps.append(prog.record(*buffers, groups=(gx, count, 1), push=push))
    return steps


@dataclass(frozen=True)
class SortPlan:
    rows: int
    n: int
    k: int
    p: int  # padded row length, a power of two
    workgroup: int
    rows_per_group: int  # rows whose pairs fit one binding (one submission each)

    def pair_bytes(self, rows: int) -> int:
        return rows * self.p * 8


def sort_plan(device: Device, rows: int, n: int, k: int) -> SortPlan:
    """The sort's layout; a ValueError when one row's pairs exceed one binding."""
    p = max(2, _pow2_at_least(n))
    limit = storage.binding_limit(device)
    if p * 8 > limit:
        raise ValueError(
            f"k={k} on rows of {n} needs a sort of {p * 8} bytes per row, more than this "
            f"device's maxStorageBufferRange ({limit} bytes); use k <= {select_k_max(device)}"
        )
    per = min(rows, limit // (p * 8), _rows_per_dispatch(device))
    return SortPlan(rows, n, k, p, _workgroup(device, GPU_SORT_WORKGROUP), max(1, per))


def sort_steps(
    device: Device,
    plan: SortPlan,
    first: int,
    count: int,
    x: Buffer,
    values: Buffer,
    indices: Buffer,
    pairs: Buffer,
    status: Buffer,
    *,
    fused: bool,
    want_status: bool,
) -> list[Dispatch]:
    """Rows [first, first + count) sorted and their first k written (one submission)."""
    wg = plan.workgroup
    per_invocation = CPU_ITEMS_PER_INVOCATION if device.info.is_cpu else GPU_ITEMS_PER_INVOCATION
    max_x = int(device.info.max_compute_work_group_count[0])

    def step(stage: int, items: int, size: int = 0, stride: int = 0) -> Dispatch:
        prog = programs.program(
            device,
            "topk_sort.comp",
            {"STAGE": stage, "FUSED": int(fused and stage == 2)},
            workgroup=wg,
        )
        gx = max(1, min(max_x, c.ceil_div(items, wg * per_invocation)))
        push = c.pack_u32(plan.n, plan.k, plan.p, first, size, stride, int(want_status))
        return prog.record(x, values, indices, pairs, status, groups=(gx, count, 1), push=push)

    steps = [step(0, plan.p)]
    size = 2
    while size <= plan.p:
        stride = size // 2
        while stride >= 1:
            steps.append(step(1, plan.p // 2, size, stride))
            stride //= 2
        size *= 2
    steps.append(step(2, plan.k))
    return steps
