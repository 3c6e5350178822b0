"""shaders/attention_lanes.comp (the kernel of CPU devices where k and v rows are whole
uvec4s) against the float64 reference: the classes of test_attention_accuracy.py on
shapes that select it (D and Dv multiples of 4 words), with every KV layout, split
counts, passes, masks, non-finite scores and workgroups of several subgroups, each way
the kernel can read k and v (texel or storage buffers) and pass a block's weights
(subgroupShuffle or shared memory)."""

from __future__ import annotations

import numpy as np
import pytest
from test_attention_accuracy import (
    SCORE_ORDERS,
    assert_matches,
    check_masks_of_every_kind,
    rand,
)

import vkcore
from vkcore.kernels.attention import attention as attention_kernel
from vkcore.kernels.attention import plan

# How a call reads k and v and passes a block's weights: what the plan picks on this
# device, shared memory instead of shuffles, storage buffers instead of texel buffers.
PATHS = ["planned", "shared_weights", "storage_kv"]


@pytest.fixture(params=PATHS)
def lanes_path(request, device, monkeypatch):
    """Forces one way through attention_lanes.comp; returns the texel choices seen."""
    if request.param == "shared_weights":
        monkeypatch.setattr(plan, "shuffles_weights", lambda info, workgroup: False)
    if request.param == "storage_kv":
        monkeypatch.setenv("VKCORE_TEXEL", "0")
    seen = []
    real = attention_kernel._kv_texels

    def spy(dev, kv):
        got = real(dev, kv)
        seen.append(got)
        return got

    monkeypatch.setattr(attention_kernel, "_kv_texels", spy)
    return request.param, seen


@pytest.fixture
def grids(device, monkeypatch):
    """The grids of the calls (each asserted to be the lanes kernel's), and a way to
    force the split count."""
    if not plan.lanes_kernel(device.info, 4, 4):
        pytest.skip("attention_lanes.comp runs on CPU devices only")
    seen = []
    real_grid = plan.grid

    def spy(*args, **kwargs):
        g = real_grid(*args, **kwargs)
        assert g.lanes, g
        seen.append(g)
        return g

    monkeypatch.setattr(plan, "grid", spy)

    def force(n):
        monkeypatch.setattr(plan, "split_count", lambda *a: n)

    return seen, force


@pytest.mark.parametrize("order", sorted(SCORE_ORDERS))
def test_score_orders_over_splits_and_passes(device, rng, grids, monkeypatch, order):
    """D = 4 with q = (1, 0, 0, 0): the scores are the keys' first elements, in order;
    splits of 1, 3 and 16, then passes of a few blocks each (the resumed states)."""
    _, force = grids
    n = 2053
    k = np.zeros((1, 1, n, 4), np.float32)
    k[..., 0] = SCORE_ORDERS[order](n)
    q = np.zeros((1, 2, 3, 4), np.float32)
    q[..., 0] = 1
    v = rand(rng, 1, 1, n, 8)
    for splits in (1, 3, 16):
        force(splits)
        assert_matches(vkcore.attention(q, k, v, scale=1.0, device=device), q, k, v, scale=1.0)
    force(1)
    monkeypatch.setattr(plan, "MAX_LOOP_STEPS", 2000)
    got = vkcore.attention(q, k, v, scale=1.0, device=device)
    assert grids[0][-1].passes > 1
    assert_matches(got, q, k, v, scale=1.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("size", [1, 3, 12, 100])
def test_every_kv_layout_and_workgroup_size(device, rng, grids, monkeypatch, dtype, size):
    """Workgroups of one subgroup (the plan's), of several or of a part of one, over
    each cache layout, grouped-query heads, lengths off every block, with splits."""
    if size != 1:
        monkeypatch.setattr(plan, "workgroup_size", lambda info: size)
    _, force = grids
    check_cache_layout(device, rng, force, dtype, hkv=2, n=301, hq=6, lq=3, splits=(1, 4))


def check_cache_layout(device, rng, force, dtype, *, hkv, n, hq, lq, splits):
    """A causal call over a cache of ``dtype`` for each split count, against the
    reference on the values the cache holds."""
    d = {"float32": 8, "float16": 8, "int8": 16}[dtype]
    k, v = rand(rng, hkv, n, d), rand(rng, hkv, n, d)
    cache = vkcore.KVCache(hkv, d, n, dtype=dtype, device=device)
    cache.append(k, v)
    keys, values = cache.numpy()
    q = rand(rng, hq, lq, d)
    for count in splits:
        force(count)
        got = vkcore.attention(q, cache, causal=True)
        assert_matches(got[None], q[None], keys, values, causal=True)
    cache.release()


def test_masks_of_every_kind(device, rng, grids):
    check_masks_of_every_kind(device, rng, dv=4)


def test_masked_keys_unread_and_non_finite_scores(device, rng, grids):
    """NaN keys and values behind a mask change nothing (splits of masked keys only
    merge as nothing); a NaN or +inf score makes only its query NaN."""
    _, force = grids
    lk = 400
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    mask = np.ones((3, lk), bool)
    mask[:, :300] = False
    mask[2] = False
    k[..., :300, :] = np.nan
    v[..., :300, :] = np.nan
    add = np.zeros((6, 90), np.float32)
    add[3, 70] = np.inf
    add[4, 5] = np.nan
    q2, k2, v2 = rand(rng, 1, 1, 6, 4), rand(rng, 1, 1, 90, 4), rand(rng, 1, 1, 90, 4)
    q2[0, 0, 1, 2] = np.nan
    for splits in (1, 2, 5, 13):
        force(splits)
        got = vkcore.attention(q, k, v, mask=mask, device=device)
        assert np.isfinite(got).all() and np.all(got[:, :, 2] == 0)
        assert_matches(got, q, k, v, mask=mask)
        bad = vkcore.attention(q2, k2, v2, mask=add, device=device)
        assert list(np.flatnonzero(np.isnan(bad).any(axis=-1)[0, 0])) == [1, 3, 4]
        assert_matches(bad, q2, k2, v2, mask=add)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_every_read_and_weight_path(device, rng, grids, lanes_path, dtype):
    """Each path over each cache layout, grouped-query heads, a causal prefill off every
    block, one and several splits, masked keys holding NaN and a poisoned query: the
    same results within the bound, and the path asked for is the one taken."""
    seen, force = grids
    path, texels = lanes_path
    check_cache_layout(device, rng, force, dtype, hkv=2, n=203, hq=4, lq=5, splits=(1, 3))
    lk = 150
    q2, k2, v2 = rand(rng, 1, 2, 3, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    mask = np.ones((3, lk), bool)
    mask[:, :100] = False
    k2[..., :100, :] = np.nan
    v2[..., :100, :] = np.nan
    q2[0, 1, 2, 0] = np.nan
    for splits in (1, 4):
        force(splits)
        got = vkcore.attention(q2, k2, v2, mask=mask, device=device)
        assert list(np.flatnonzero(np.isnan(got).any(axis=-1)[0])) == [5]
        assert_matches(got, q2, k2, v2, mask=mask)
    if path == "shared_weights":
        assert not any(g.shuffle for g in seen)
    if path == "planned":
        assert all(g.shuffle == plan.shuffles_weights(device.info, g.workgroup) for g in seen)
    assert texels and all((t is None) == (path == "storage_kv") for t in texels)
