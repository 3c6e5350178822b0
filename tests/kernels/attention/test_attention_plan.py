"""The grid of an attention call as a pure function of the device's properties, checked
with the recorded GPUs, and the device memory of a prefill: O(L x D), never L x L."""

from __future__ import annotations

import dataclasses

import devices
import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels.attention import plan

GPU_WORKERS = 1024  # what kernels.common.parallelism gives every GPU

CASES = [  # (heads = batch x KV heads, query rows per KV head, keys, D, Dv)
    (8, 4, 4096, 128, 128),  # decode: 32 query heads over 8 KV heads
    (1, 1, 65_536, 64, 64),  # one long decode
    (8, 1024, 1024, 64, 64),  # prefill
    (1, 8192, 8192, 64, 64),
    (4, 3, 7, 256, 256),
    (1, 1, 1, 1, 1),
]


@pytest.mark.parametrize("name", devices.NAMES)
def test_grid_on_recorded_devices(name):
    info = devices.device_info(devices.load(name))
    for heads, rows, keys, d, dv in CASES:
        g = plan.grid(info, GPU_WORKERS, heads, rows, keys, d, dv)
        assert g == plan.grid(info, GPU_WORKERS, heads, rows, keys, d, dv)  # pure
        assert 1 <= g.workgroup <= info.max_compute_work_group_size[0]
        assert g.workgroup <= info.max_compute_work_group_invocations
        shared = info.max_compute_shared_memory_size or 16384
        block = g.workgroup * g.block_keys
        assert plan.shared_bytes(g.tile, block, g.key_lanes) <= shared
        assert g.workgroup % g.key_lanes == 0
        assert g.tile * g.dims_per_invocation <= plan.MAX_ACC_SLOTS
        assert g.dims_per_invocation * g.workgroup >= dv
        # The splits cover the keys, none empty, whole blocks, within the grid.
        assert g.chunk % block == 0
        assert (g.splits - 1) * g.chunk < keys <= g.splits * g.chunk
        assert g.splits <= min(plan.MAX_SPLITS, info.max_compute_work_group_count[0])
        assert g.max_chunk % block == 0 and g.passes * g.max_chunk >= g.chunk
        tile_steps = plan.loop_steps_per_key(
            g.tile, g.key_lanes, g.dims_per_invocation, d, g.block_keys
        )
        assert g.max_chunk * tile_steps <= plan.MAX_LOOP_STEPS or g.max_chunk == block
        assert g.tiles * g.tile >= rows and g.tiles <= info.max_compute_work_group_count[1]
        # Partial states stay bounded: O(workgroups the device needs), not O(keys).
        if g.merged:
            assert heads * g.tiles < 4 * GPU_WORKERS
            assert heads * g.tiles * g.splits <= 8 * GPU_WORKERS + heads * g.tiles
    decode = plan.grid(info, GPU_WORKERS, 8, 4, 4096, 128, 128)
    assert decode.merged  # eight workgroups cannot feed a GPU: the keys are split


def test_cpu_device_grid(device):
    """lavapipe: one subgroup per workgroup, and splits only where the tiles are too few
    for its threads."""
    info = device.info
    g = plan.grid(info, 2, 8, 1024 * 8 // 8, 1024, 64, 64)
    assert g.workgroup == info.subgroup_size and g.splits == 1
    assert plan.grid(info, 2, 1, 1, 65_536, 64, 64).splits == 8


def test_grid_refuses_more_tiles_than_the_device_has(device):
    info = dataclasses.replace(device.info, max_compute_work_group_count=(65535, 3, 65535))
    with pytest.raises(ValueError, match="workgroups"):
        plan.grid(info, 2, 1, 1000, 10, 8, 8)


def bound_bytes(monkeypatch, run: bool):
    """The distinct buffers the call's dispatches bind (its device memory); with run
    False the dispatches are recorded but not submitted."""
    seen: dict[int, int] = {}
    real_run = vkcore.Device.run

    def spy(self, steps, *a, **kw):
        for step in steps:
            for buf in step.buffers:
                seen[id(buf)] = buf.nbytes
        return real_run(self, steps, *a, **kw) if run else None

    monkeypatch.setattr(vkcore.Device, "run", spy)
    return seen


@pytest.mark.parametrize("length, run", [(1024, True), (8192, False)])
def test_prefill_memory_is_linear_in_length(device, rng, monkeypatch, length, run):
    """Causal prefill of L queries over L keys (D = 64): the buffers bound are q, k, v,
    the output, the partial states of one split (its keys take several passes) and
    placeholders: within 5 L D + 4 L floats plus a few KiB; L x L scores would be
    256 MiB at L = 8192. At L = 1024 the call also runs and is checked."""
    d = 64
    q, k, v = (rng.standard_normal((1, 1, length, d)).astype(np.float32) for _ in range(3))
    seen = bound_bytes(monkeypatch, run)
    got = vkcore.attention(q, k, v, causal=True, device=device)
    total = sum(seen.values())
    assert total <= (5 * length * d + 4 * length) * 4 + 65536, f"{total} bytes bound"
    assert max(seen.values()) <= length * d * 4 + 4096
    if run:
        ref = reference.attention(q, k, v, causal=True)
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(v).max()


LANE_CASES = [  # (heads, rows, keys, k words, v words, elements per word)
    (8, 4, 4096, 64, 64, 2),  # the decode row: float16 cache, D = 128
    (8, 1024, 1024, 64, 64, 1),  # the prefill row
    (1, 1, 65_536, 32, 32, 4),  # int8 cache, D = 128
    (4, 3, 7, 256, 256, 1),
    (1, 1, 1, 4, 4, 1),
]


@pytest.mark.parametrize("name", devices.NAMES)
def test_lanes_grid_as_a_cpu_device(name):
    """Each recorded device's limits taken as a CPU device's (the only kind that runs
    attention_lanes.comp; the GPUs themselves never do): the grid fits the limits, the
    accumulators and queries a lane keeps, and every pass stays under the loop limit."""
    gpu = devices.device_info(devices.load(name))
    assert not plan.lanes_kernel(gpu, 64, 64)
    info = dataclasses.replace(gpu, device_type="cpu")
    assert not plan.lanes_kernel(info, 6, 8) and not plan.lanes_kernel(info, 8, 10)
    for heads, rows, keys, words, vwords, per in LANE_CASES:
        g = plan.grid(info, 2, heads, rows, keys, words * per, vwords * per, word_elems=per)
        assert g.lanes and g.shader == "attention_lanes.comp"
        assert g == plan.grid(info, 2, heads, rows, keys, words * per, vwords * per, word_elems=per)
        assert g.workgroup <= min(
            info.max_compute_work_group_size[0], info.max_compute_work_group_invocations
        )
        assert g.tile * g.dims_per_invocation <= plan.LANE_ACC_SLOTS
        assert g.tile <= plan.LANE_MAX_TILE
        assert g.tile * words * per <= plan.LANE_QUERY_SLOTS or g.tile == 1
        assert g.dims_per_invocation * g.workgroup >= vwords * per
        shared = info.max_compute_shared_memory_size or 16384
        assert (g.tile + 4 * -(-g.tile // 4)) * g.workgroup * 4 <= shared
        assert g.chunk % g.workgroup == 0 and (g.splits - 1) * g.chunk < keys <= g.splits * g.chunk
        assert g.max_chunk % g.workgroup == 0 and g.passes * g.max_chunk >= g.chunk
        block_steps = plan.lanes_block_steps(info, g.workgroup, g.tile)
        steps = g.max_chunk // g.workgroup * block_steps + 2 * g.tile * g.workgroup
        assert steps <= plan.MAX_LOOP_STEPS or g.max_chunk == g.workgroup
        assert g.tiles * g.tile >= rows


def test_lanes_loop_steps_count_the_shared_sums(device):
    """Without SHUFFLE a block pays the shared-memory maxima in loop steps, whether the
    workgroup is one subgroup or several; with it (one full subgroup) it does not."""
    info = device.info
    one = plan.lanes_block_steps(info, info.subgroup_size, 4)
    assert one == 1 + info.subgroup_size
    assert plan.lanes_block_steps(info, 4 * info.subgroup_size, 4) == 1 + 5 * 4 * info.subgroup_size
    plain = dataclasses.replace(info, subgroup_supported_operations=0)
    assert plan.lanes_block_steps(plain, info.subgroup_size, 4) == 1 + 5 * info.subgroup_size
    # One subgroup without shuffles: the maxima path is chosen at run time, and a CPU
    # device runs both sides of that branch, so its loop counts too.
    no_shuffle = dataclasses.replace(
        info, subgroup_supported_operations=info.subgroup_supported_operations & ~0x10
    )
    assert plan.lanes_block_steps(no_shuffle, info.subgroup_size, 4) == 1 + 5 * info.subgroup_size


def test_weights_shuffle_only_within_one_full_subgroup(device):
    """subgroupShuffle carries a block's weights only where every compute subgroup is
    exactly the workgroup, with shuffles and arithmetic in compute; else shared memory."""
    info = dataclasses.replace(
        device.info,
        subgroup_size=8,
        min_subgroup_size=8,
        max_subgroup_size=8,
        subgroup_supported_operations=0x1 | 0x4 | 0x10,
        subgroup_supported_stages=0x20,
    )
    assert plan.shuffles_weights(info, 8)
    assert not plan.shuffles_weights(info, 4)  # a part of a subgroup
    assert not plan.shuffles_weights(info, 16)  # two subgroups
    assert not plan.shuffles_weights(dataclasses.replace(info, max_subgroup_size=32), 8)
    assert not plan.shuffles_weights(dataclasses.replace(info, min_subgroup_size=4), 8)
    no_size_control = dataclasses.replace(info, min_subgroup_size=0, max_subgroup_size=0)
    assert plan.shuffles_weights(no_size_control, 8)
    assert not plan.shuffles_weights(
        dataclasses.replace(info, subgroup_supported_operations=0x1 | 0x4), 8
    )
    assert not plan.shuffles_weights(
        dataclasses.replace(info, subgroup_supported_operations=0x1 | 0x10), 8
    )
    assert not plan.shuffles_weights(dataclasses.replace(info, subgroup_supported_stages=0x1), 8)


@pytest.mark.parametrize("name", devices.NAMES)
def test_shuffle_follows_the_recorded_subgroups(name):
    """On every recorded device the lanes grid shuffles exactly when its workgroup is the
    one subgroup size the device reports (GPUs never take the lanes kernel unless CPU)."""
    info = devices.device_info(devices.load(name))
    cpu = dataclasses.replace(info, device_type="cpu")
    g = plan.grid(cpu, 2, 8, 4, 4096, 128, 128, word_elems=2)
    assert g.lanes
    sizes = {s for s in (info.min_subgroup_size, info.max_subgroup_size) if s}
    one_size = sizes <= {info.subgroup_size}
    expected = (
        one_size
        and g.workgroup == info.subgroup_size
        and info.subgroup_arithmetic_in_compute
        and info.subgroup_shuffle_in_compute
    )
    assert g.shuffle == expected
