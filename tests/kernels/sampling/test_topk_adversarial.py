"""Adversarial inputs to top-k and softmax_topk: the key floor of topk_select.comp (best
values in one lane, ties straddling the k-th value, NaN and -inf, the largest plans), the
sort just past the select kernel, and rows split across dispatches. Every result is
checked against numpy (vkcore.reference)."""

from __future__ import annotations

import numpy as np
import pytest
from checks import check_softmax_topk, check_topk

import vkcore
from vkcore import reference
from vkcore.kernels.sampling import topk_steps

ATOL = 1e-6


# ----------------------------------------------------------------------------- helpers


# ----------------------------------------------------------------------------- helpers
def both(device, x, k, *, fused=True, tensor=False):
    x = np.asarray(x, dtype=np.float32)
    inp = vkcore.asarray(x, device=device) if tensor else x
    kw = {} if tensor else {"device": device}
    check_topk(x, k, vkcore.topk(inp, k, **kw))
    if fused:
        check_softmax_topk(x, k, vkcore.softmax_topk(inp, k, **kw))


def lane_of(device, rows, n, k):
    """Which invocation of its workgroup scans each element's block, and the plan."""
    plan = topk_steps.select_plan(device, rows, n, k)
    rel = np.arange(n) % plan.chunk
    return (rel // 4) % plan.workgroup, plan


@pytest.fixture(params=["floor", "one-pass"])
def passes(request, monkeypatch):
    """The two-pass select (lavapipe's own) and the one-pass form of GPUs."""
    if request.param == "one-pass":
        monkeypatch.setattr(topk_steps, "uses_floor_pass", lambda device: False)
    return request.param


# ============================================================== 1. the top-k key floor
@pytest.mark.parametrize("k", [1, 5, 33, 128, 129, 300, 512])
@pytest.mark.parametrize("lane", [3, 7])
def test_best_values_in_one_lane_of_every_chunk(device, rng, passes, k, lane):
    """All large values (whole blocks, or one element per block) in the blocks of one
    invocation, counted relative to each chunk's start (chunks of a split row start at
    multiples of the workgroup, not of the stride); n not a multiple of 4 or 32."""
    n = 20_003
    lanes, _ = lane_of(device, 2, n, k)
    x = (rng.standard_normal((2, n)) * 0.1).astype(np.float32)
    x[0, lanes == lane] += 100.0
    x[1, (lanes == lane) & (np.arange(n) % 4 == 2)] += 100.0
    both(device, x, k, fused=k in (5, 129, 512))


@pytest.mark.parametrize(("rows", "n"), [(1, 300_000), (2, 100_000), (1, 300_001), (3, 40_000)])
@pytest.mark.parametrize("k", [1, 40, 128, 300, 512])
def test_split_rows_with_the_best_in_the_last_chunk_and_chunk_tails(device, rng, rows, n, k):
    lanes, plan = lane_of(device, rows, n, k)
    assert plan.nchunks > 1
    pos = np.arange(n)
    x = (rng.standard_normal((rows, n)) * 0.1).astype(np.float32)
    x[0, (lanes == 5) & (pos >= (plan.nchunks - 1) * plan.chunk)] += 50.0
    if rows > 1:
        stride = 4 * plan.workgroup
        x[1, pos % plan.chunk >= plan.chunk // stride * stride] += 60.0  # every chunk's tail
    both(device, x, k, fused=k in (40, 512))


@pytest.mark.parametrize("k", [2, 9, 17, 128, 129, 256, 511, 512])
def test_ties_straddling_the_kth_value(device, rng, passes, k):
    n = 9_001
    x = np.zeros((3, n), np.float32)
    x[0] = rng.integers(0, 3, n)
    x[1, rng.choice(n, k - 1, replace=False)] = 5.0  # k - 1 above, thousands tie at the k-th
    x[2] = 1.0
    lanes, _ = lane_of(device, 3, n, k)
    x[2, np.flatnonzero(lanes == 7)[: k // 2]] = 2.0  # half of k above, in the last lane
    both(device, x, k, fused=k in (9, 129, 512))


@pytest.mark.parametrize("n", [1000, 4099, 30_000])
@pytest.mark.parametrize("k", [1, 10, 128, 300, 512])
def test_nan_and_minus_inf_fill_the_kth_slot(device, rng, n, k):
    x = np.full((4, n), np.nan, np.float32)
    f = max(0, k - 3)
    x[0, rng.choice(n, f, replace=False)] = rng.standard_normal(f)
    x[1] = -np.inf
    x[1, rng.choice(n, f, replace=False)] = 1.0
    x[1, rng.choice(n, n // 3, replace=False)] = np.nan
    x[2] = -np.inf
    x[2, [0, -1]] = np.nan
    x[3, n - k :] = -np.inf  # exactly k non-NaN values, all -inf, at the end
    both(device, x, k, fused=k in (10, 300))


NS = [1, 3, 4, 5, 31, 32, 33, 63, 64, 65, 255, 256, 257, 511, 512, 513, 1023, 1025]


@pytest.mark.parametrize("n", NS)
def test_k_near_n_and_n_near_multiples(device, rng, n):
    x = rng.standard_normal((3, n)).astype(np.float32)
    x[1] = np.round(x[1])
    x[2, ::2] = np.nan
    for k in sorted({1, max(1, n // 2), max(1, n - 1), n, min(n, 512), min(n, 129)}):
        both(device, x, k, fused=k in (1, n))


@pytest.mark.parametrize(
    ("n", "k"), [(n, k) for n in (100, 4097, 50_000) for k in (1, 3, 129, 512) if k <= n]
)
def test_denormals_signed_zeros_and_huge_values(device, rng, n, k):
    tiny = np.float32(1e-45)
    x = np.zeros((4, n), np.float32)
    x[0] = rng.choice(
        np.array([tiny, -tiny, 0, -0.0, 2 * tiny, -2 * tiny, 1e-40, -1e-40], np.float32), n
    )
    x[1] = rng.choice(np.array([3e38, -3e38, 3.4028235e38, -3.4028235e38, 1e38, 0], np.float32), n)
    x[2] = -0.0
    x[2, rng.choice(n, k, replace=False)] = tiny  # exactly k above the signed zeros
    x[3] = (rng.standard_normal(n) * 1e-39).astype(np.float32)  # all denormal
    both(device, x, k, fused=k in (3, 129))


@pytest.mark.parametrize("n", [33, 1000, 20_000])
def test_rows_all_equal_but_one(device, n):
    rows = []
    for pos in sorted({0, 31, 32, n // 2, n - 1}):
        for other in (2.0, -2.0, np.nan, -np.inf, np.inf):
            r = np.full(n, 1.0, np.float32)
            r[pos] = other
            rows.append(r)
    x = np.stack(rows)
    for k in (1, 2, 40, 512):
        if k <= n:
            both(device, x, k, fused=k in (2, 512))


def test_a_long_row_all_equal_but_one_is_split(device):
    n = 300_000
    x = np.ones((3, n), np.float32)
    x[0, n - 1] = 2.0
    x[1, 0] = -np.inf
    x[2, n // 2] = np.nan
    for k in (1, 40, 512):
        both(device, x, k, fused=k == 512)


@pytest.mark.parametrize(
    ("shape", "k"),
    [((5000,), 7), ((300_000,), 512), ((2, 3, 999), 129), ((1, 300_000), 128), ((4, 777), 513)],
)
def test_tensor_and_1d_inputs(device, rng, shape, k):
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    x.reshape(-1)[::11] = np.round(x.reshape(-1)[::11])
    both(device, x, k, tensor=True)
    both(device, x, k, fused=False)


def _largest_shapes(device, k):
    """Rows at the plans' largest shares per invocation (the loop budget): whole rows of
    one chunk, rows one element longer, and one row split into as many chunks as the
    merge takes."""
    wg = topk_steps.select_plan(device, 16, 1000, k).workgroup
    per_chunk = wg * topk_steps.max_elements_per_invocation(k, wg)
    merged = topk_steps.max_elements_per_invocation(k, wg) * wg // k
    return [(16, per_chunk), (8, per_chunk - 1), (1, merged * per_chunk)]


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("k", [511, 512])
def test_every_element_enters_at_the_largest_plans(device, rng, which, k):
    """Ascending rows at the plans' largest shares per invocation (the loop budget): every
    element enters a full heap of up to 512 and walks it to a leaf."""
    shape = _largest_shapes(device, k)[which]
    plan = topk_steps.select_plan(device, *shape, k)
    assert plan is not None  # the select kernel, not the sort
    x = np.sort(rng.standard_normal(shape).astype(np.float32), axis=-1)
    both(device, x, k)


@pytest.mark.parametrize("k", [40, 128, 512])
def test_one_lane_ascending_the_others_flat(device, rng, passes, k):
    """One invocation inserts every block while the others insert none (its queue fills
    every round, theirs never): the lanes' scans drift apart."""
    r, n = 3, 31_208
    lanes, _ = lane_of(device, r, n, k)
    x = (rng.standard_normal((r, n)) * 0.01).astype(np.float32)
    x[0, lanes == 0] = np.linspace(10, 20, (lanes == 0).sum(), dtype=np.float32)
    x[1, lanes != 0] = np.linspace(10, 20, (lanes != 0).sum(), dtype=np.float32)
    x[2] = (np.arange(n) // 32).astype(np.float32)  # ascending by stride, ties in a stride
    both(device, x, k)


def test_the_sort_just_past_the_select_kernel_on_adversarial_rows(device, rng):
    k = topk_steps.select_k_max(device) + 1
    n = 2 * k + 3
    x = np.ones((4, n), np.float32)
    x[1, ::2] = np.nan
    x[2, : n - k + 1] = -np.inf
    x[3] = np.round(rng.standard_normal(n))
    both(device, x, k)
    both(device, x, n)


@pytest.mark.parametrize("in_sequence", [False, True])
def test_sort_groups_sharing_one_pairs_buffer(device, rng, monkeypatch, in_sequence):
    """The sort path a row group at a time over one pairs buffer (forced to one row per
    group): each group's first step overwrites the pairs the last one read; inside a
    sequence every group lands in one command buffer."""
    import dataclasses

    real = topk_steps.sort_plan
    monkeypatch.setattr(
        topk_steps, "sort_plan", lambda *a: dataclasses.replace(real(*a), rows_per_group=1)
    )
    x = (rng.standard_normal((3, 700)) * 2).astype(np.float32)
    x[1, ::5] = np.nan
    x[2] = np.round(x[2])
    k = topk_steps.select_k_max(device) + 1
    if in_sequence:
        xt = vkcore.asarray(x, device=device)
        with vkcore.sequence(device=device):
            got = vkcore.topk(xt, k)
            got_p = vkcore.softmax_topk(xt, k)
    else:
        got = vkcore.topk(x, k, device=device)
        got_p = vkcore.softmax_topk(x, k, device=device)
    check_topk(x, k, got)
    check_softmax_topk(x, k, got_p)


def test_more_rows_than_one_dispatch_takes(device, rng):
    """Rows past maxComputeWorkGroupCount[1]: several dispatches (row offsets) writing
    disjoint rows of the same outputs, in a call and in a sequence."""
    rows = int(device.info.max_compute_work_group_count[1]) + 3
    x = rng.standard_normal((rows, 6)).astype(np.float32)
    x[::7] = np.round(x[::7])
    x[1::13, 0] = np.nan
    check_topk(x, 2, vkcore.topk(x, 2, device=device))
    check_softmax_topk(x, 6, vkcore.softmax_topk(x, 6, device=device))
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device):
        got = vkcore.topk(xt, 3)
        vkcore.softmax(xt, out=xt)
        got_p = vkcore.softmax_topk(xt, 1)
    check_topk(x, 3, got)
    sm = xt.numpy()
    np.testing.assert_allclose(sm, reference.softmax(x), atol=ATOL)
    check_softmax_topk(sm, 1, got_p)


def test_the_select_kernel_at_a_gpu_workgroup(device, rng, monkeypatch, passes):
    """The select kernel with 64 invocations (a GPU's workgroup: shared-memory trees, not
    one subgroup; floors over 64 lists), on lavapipe, at the floor's hard placements."""
    monkeypatch.setattr(
        topk_steps, "_workgroup", lambda device, gpu: topk_steps.GPU_SELECT_WORKGROUP
    )
    for r, n in ((3, 9001), (1, 300_000)):
        for k in (5, 65, 512):
            lanes, plan = lane_of(device, r, n, k)
            assert plan.workgroup == 64
            x = (rng.standard_normal((r, n)) * 0.1).astype(np.float32)
            x[0, lanes == 63] += 100  # the last invocation's blocks
            if r > 1:
                x[1] = np.round(x[1] * 10)  # ties
                x[2, ::3] = np.nan
            both(device, x, k, fused=k == 65)
            both(device, np.sort(x, axis=-1), k, fused=False)  # every element enters
