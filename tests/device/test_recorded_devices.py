"""Every decision vkcore makes from device properties, made for recorded real devices
(tests/support/devices/*.json) and checked to be legal there and sensible.

The decisions read only ``device.info``; :class:`devices.RecordedDevice` supplies it.
"""

from __future__ import annotations

import dataclasses

import devices
import pytest
from devices import NAMES, RecordedDevice

from vkcore.device import placement
from vkcore.device.pipelines.cache import CacheKey
from vkcore.kernels import common as c
from vkcore.kernels import storage, tuning
from vkcore.kernels.matvec import program as mv
from vkcore.kernels.quant import launch
from vkcore.kernels.quant import rtn as qk
from vkcore.kernels.softmax import stages as sm

DEVICES = [RecordedDevice(n) for n in NAMES]
SHAPES = [(1, 1), (1, 4096), (64, 4096), (4096, 4096), (1, 1 << 22), (70_000, 3), (8, 1 << 20)]


def _workgroup_ok(info, size):
    return (
        1
        <= size
        <= min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    )


@pytest.fixture(params=DEVICES, ids=NAMES)
def dev(request):
    return request.param


def test_the_recordings_are_complete_enough(dev):
    info = dev.info
    assert info.memory_heaps and info.memory_types and info.subgroup_size >= 1
    assert all(v > 0 for v in info.max_compute_work_group_count)
    assert info.max_storage_buffer_range >= 1 << 27  # the Vulkan minimum
    assert info.max_compute_shared_memory_size >= 16384


@pytest.mark.parametrize("rows, n", SHAPES)
def test_softmax_plan_is_legal(dev, rows, n):
    p = sm.plan(dev, rows, n)
    info = dev.info
    assert _workgroup_ok(info, p.workgroup)
    assert p.chunk % p.workgroup == 0 and p.chunk * p.nchunks >= p.units
    assert (p.nchunks - 1) * p.chunk < p.units, "no workgroup without work"
    assert p.nchunks <= info.max_compute_work_group_count[0]
    steps = p.chunk // p.workgroup
    assert steps <= sm.MAX_STEPS_PER_PASS
    if not info.is_cpu:
        assert p.workgroup >= min(64, info.subgroup_size), "a GPU workgroup of a few lanes"


def test_softmax_workgroups_tune_may_store_are_legal(dev):
    for size in tuning.allowed(dev, "softmax_workgroup"):
        assert _workgroup_ok(dev.info, size)
        p = sm.plan(dev, 64, 4096, workgroup=size)
        assert p.workgroup == size


@pytest.mark.parametrize("mode", [0, 1, 2, mv.MODE_F32])
def test_matvec_launch_is_legal(dev, mode):
    info = dev.info
    wg = mv.workgroup_size(dev)
    assert _workgroup_ok(info, wg)
    rows = mv.rows_per_workgroup(dev, mode)
    for m in (1, 37, 4096, 32000, 11008):
        gx, gy, gz = mv.grid(dev, m, mode)
        assert gx <= info.max_compute_work_group_count[0]
        assert gy <= info.max_compute_work_group_count[1] and gz == 1
        assert gx * gy * rows >= m, "every row has a workgroup"
    for name in ("matvec_rows", "matvec_f32_rows"):
        assert all(r >= 1 for r in tuning.allowed(dev, name))


def test_quantize_launch_and_splits_are_legal(dev):
    info = dev.info
    assert _workgroup_ok(info, qk._row_workgroup(dev))
    assert _workgroup_ok(info, launch.WORKGROUP)
    assert launch.quant_rows(dev) >= 1
    for n in (100, 4096, 1 << 20):
        rows = storage.rows_per_buffer(dev, 4 * n, "w")
        assert rows * 4 * n <= info.max_storage_buffer_range, "one binding holds the rows"
        assert (rows + 1) * 4 * n > info.max_storage_buffer_range or rows >= 1
    assert launch.column_groups(dev, 4096) <= info.max_compute_work_group_count[0]
    too_long = info.max_storage_buffer_range // 4 + 1
    with pytest.raises(ValueError, match="binding limit"):
        storage.rows_per_buffer(dev, 4 * too_long, "w")


class _Sized:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def test_texel_eligibility_follows_the_device(dev, monkeypatch):
    info = dev.info
    monkeypatch.setenv("VKCORE_TEXEL", "1")
    # Texel reads only in the formats the report offers as uniform texel buffers (the text
    # reports carry no format table: none is known, so none is used).
    offered = set(devices.load(dev.name).get("uniform_texel_buffer_formats", ()))
    within = info.max_texel_buffer_elements * 4  # bytes of r32 texels the device allows
    for fmt, vk_name in devices.TEXEL_FORMAT_NAMES.items():
        expected = fmt if vk_name in offered else None
        assert c.texel_format(dev, _Sized(min(1 << 20, within)), fmt) == expected
    known = RecordedDevice(dev.name)
    known.info = dataclasses.replace(info, texel_formats=frozenset({"rgba32f", "r32f"}))
    limit = info.max_texel_buffer_elements
    assert c.texel_format(known, _Sized(16 * limit), "rgba32f") == "rgba32f"
    assert c.texel_format(known, _Sized(16 * (limit + 1)), "rgba32f") is None
    assert c.texel_format(known, _Sized(4 * (limit + 1)), "r32f") is None


def test_binding_limit_checks_use_the_device_value(dev):
    limit = dev.info.max_storage_buffer_range
    storage.check_binding_size(dev, limit, "x")
    with pytest.raises(ValueError, match="maxStorageBufferRange"):
        storage.check_binding_size(dev, limit + 1, "x")
    assert storage.binding_limit(dev) == limit


def test_pipeline_cache_keys_are_distinct_and_named_by_identity():
    keys = [CacheKey.from_info(d.info) for d in DEVICES]
    names = [k.file_name() for k in keys]
    assert len(set(names)) == len(names)
    for d, name in zip(DEVICES, names, strict=True):
        assert name.startswith(f"{d.info.vendor_id:04x}-{d.info.device_id:04x}-")
        assert d.info.pipeline_cache_uuid.hex() in name
    # A driver update (driverVersion) gives another key on the same device.
    other = dataclasses.replace(DEVICES[0].info, driver_version=DEVICES[0].info.driver_version + 1)
    assert CacheKey.from_info(other).file_name() != names[0]


def test_memory_placement_from_device_info(dev):
    types = [placement.MemoryType(i, f, h) for i, (f, h) in enumerate(dev.info.memory_types)]
    heaps = [placement.MemoryHeap(s, f) for s, f in dev.info.memory_heaps]
    resident = placement.place(types, heaps, "resident").preferred
    kind = types[resident.type_index]
    assert kind.flags & placement.DEVICE_LOCAL
    # The largest heap buffers can live in (none: a translation layer once reported its
    # device-local heap as 0 bytes).
    largest = devices.largest_heap_with(devices.load(dev.name), "DEVICE_LOCAL")
    heap = heaps[kind.heap_index].size
    if not largest:
        return
    if resident.mapped:  # never in a small window (a BAR, an APU's 256 MiB aperture)
        assert heap >= largest / 2
        assert heap > 256 << 20 or largest <= 256 << 20
    else:  # staged: into the device's largest memory
        assert heap == largest
    if dev.info.device_type in ("integrated", "cpu") and len(heaps) == 1:
        assert resident.mapped, "one heap: device memory is host memory"


@pytest.mark.parametrize(
    "rows, n, k", [(1, 32_000, 1), (64, 32_000, 40), (1, 1 << 20, 128), (3, 50_000, 300)]
)
def test_topk_plans_are_legal(dev, rows, n, k):
    from vkcore.kernels.sampling import topk_steps as tk

    info = dev.info
    limit = tk.select_k_max(dev)
    assert limit == (tk.SMALL_K_MAX_CPU if info.is_cpu else tk.SMALL_K_MAX_GPU)
    plan = tk.select_plan(dev, rows, n, k)
    if k > limit:
        assert plan is None
        sort = tk.sort_plan(dev, rows, n, k)
        assert _workgroup_ok(info, sort.workgroup)
        assert sort.pair_bytes(sort.rows_per_group) <= info.max_storage_buffer_range
        return
    assert plan is not None and _workgroup_ok(info, plan.workgroup)
    assert plan.chunk * plan.nchunks >= n and plan.nchunks <= info.max_compute_work_group_count[0]
    assert plan.chunk // plan.workgroup <= tk.max_elements_per_invocation(k, plan.workgroup)
    assert 4 * 4 * plan.workgroup <= info.max_compute_shared_memory_size  # four shared arrays
    assert plan.best_quads in (1, 2, 4) and plan.kmax >= k
    if not info.is_cpu:
        assert plan.workgroup >= min(64, info.subgroup_size)


def test_the_compute_queue_family_is_legal_and_prefers_timestamps_then_a_dedicated_one(dev):
    from vkcore.device.logical import QUEUE_COMPUTE, QUEUE_GRAPHICS, choose_compute_family

    bits = {"GRAPHICS": QUEUE_GRAPHICS, "COMPUTE": QUEUE_COMPUTE}
    families = [
        (sum(bits.get(f, 0) for f in fam["flags"]), fam["timestamp_valid_bits"])
        for fam in devices.load(dev.name)["queue_families"]
    ]
    chosen = choose_compute_family(families)
    assert chosen is not None and families[chosen][0] & QUEUE_COMPUTE
    flags, timestamps = families[chosen]
    computing = [f for f in families if f[0] & QUEUE_COMPUTE]
    if any(t > 0 for _, t in computing):
        assert timestamps > 0, "a family that can time the work"
    timed = [f for f in computing if f[1] > 0] or computing
    if any(not f & QUEUE_GRAPHICS for f, _ in timed):
        assert not flags & QUEUE_GRAPHICS, "the dedicated compute family"


def test_the_compute_queue_family_choice_on_made_up_families():
    from vkcore.device.logical import choose_compute_family

    graphics, compute = 0x1, 0x2
    assert choose_compute_family([(graphics, 64)]) is None
    assert choose_compute_family([(graphics | compute, 64), (compute, 64)]) == 1
    assert choose_compute_family([(graphics | compute, 64), (compute, 0)]) == 0
    assert choose_compute_family([(graphics | compute, 0), (compute, 0)]) == 1
    assert choose_compute_family([(compute, 36), (compute, 64)]) == 0


def test_the_timestamp_bits_are_the_chosen_familys():
    """compute_queue_family returns the chosen family and that family's
    timestampValidBits (here the second family: dedicated compute, with timestamps)."""
    from vulkan import ffi

    from vkcore.device.logical import compute_queue_family

    families = [(0x1 | 0x2, 36), (0x2, 64), (0x4, 0)]

    class Lib:
        def vkGetPhysicalDeviceQueueFamilyProperties(self, physical, count, props):
            count[0] = len(families)
            if props != ffi.NULL:
                for i, (flags, bits) in enumerate(families):
                    props[i].queueFlags, props[i].timestampValidBits = flags, bits

    assert compute_queue_family(ffi, Lib(), None, "made up") == (1, 64)
    families[1] = (0x2, 0)  # no timestamps there: the graphics family, which has them
    assert compute_queue_family(ffi, Lib(), None, "made up") == (0, 36)
