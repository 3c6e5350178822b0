"""Adversarial tests of shaders/attention_lanes.comp's TEXEL and SHUFFLE paths: short
and partial blocks and splits, NaN/inf planted right where the clamped key index of the
SHUFFLE path reads (the split's last key, keys just past a split's end, rows past a
cache's length), causal rows with no key, whole splits masked, every GQA ratio,
resumed passes, llvmpipe's loop limit at the largest single pass, determinism, Tensors
and sequences."""

from __future__ import annotations

import numpy as np
import pytest
from test_attention_accuracy import assert_matches, rand

import vkcore
from vkcore import reference
from vkcore.kernels.attention import attention as attention_kernel
from vkcore.kernels.attention import plan

# Two of the four crossings of the weights path with the k and v reads: each choice is
# taken once here, and test_attention_lanes.py runs the other two (shuffle-storage,
# shared-texel). Every distinct grid is a cold llvmpipe compile of the unrolled kernel.
PATHS = ["shuffle-texel", "shared-storage"]


@pytest.fixture(params=PATHS)
def path(request, device, monkeypatch):
    """One of the ways through attention_lanes.comp; records the grids and the
    texel choices of the calls and offers ``force(n)`` for the split count."""
    if not plan.lanes_kernel(device.info, 4, 4):
        pytest.skip("attention_lanes.comp runs on CPU devices only")
    weights, kv = request.param.split("-")
    if weights == "shuffle" and not plan.shuffles_weights(
        device.info, plan.workgroup_size(device.info)
    ):
        pytest.skip("this device does not shuffle weights")
    if weights == "shared":
        monkeypatch.setattr(plan, "shuffles_weights", lambda info, workgroup: False)
    if kv == "storage":
        monkeypatch.setenv("VKCORE_TEXEL", "0")
    grids, texels = [], []
    real_grid, real_texels = plan.grid, attention_kernel._kv_texels

    def grid_spy(*a, **kw):
        g = real_grid(*a, **kw)
        grids.append(g)
        return g

    def texel_spy(dev, kvs):
        got = real_texels(dev, kvs)
        texels.append(got)
        return got

    monkeypatch.setattr(plan, "grid", grid_spy)
    monkeypatch.setattr(attention_kernel, "_kv_texels", texel_spy)

    class P:
        name = request.param
        shuffle = weights == "shuffle"
        texel = kv == "texel"

        @staticmethod
        def force(n):
            monkeypatch.setattr(plan, "split_count", lambda *a: n)

        @staticmethod
        def check_taken():
            assert grids and all(g.lanes for g in grids), grids
            assert all(g.shuffle == P.shuffle for g in grids), grids
            assert texels and all((t is not None) == P.texel for t in texels), texels

    P.grids = grids
    return P


def zero_rows_exact(got, rows):
    assert np.all(got[..., rows, :] == 0), got[..., rows, :]


LENGTHS = [1, 2, 7, 8, 9, 15, 16, 17, 41, 65]


@pytest.mark.parametrize("lk", LENGTHS)
def test_short_lengths_every_split(device, rng, path, lk):
    """Lengths around one block (8 lanes) with every split count: partial last blocks,
    splits of a single key; the last key (the one the clamp re-reads) masked with NaN
    k and v, and a fully masked query."""
    hq, lq = 2, 3
    q, k, v = rand(rng, 1, hq, lq, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 8)
    mask = np.ones((lq, lk), bool)
    if lk > 1:
        mask[:, -1] = False
        k[..., -1, :] = np.nan
        v[..., -1, :] = np.nan
    mask[1] = False  # a query with no key
    for splits in sorted({1, 2, 3, max(1, lk // 8), -(-lk // 8), 256}):
        path.force(splits)
        for causal in (False, True):
            got = vkcore.attention(q, k, v, mask=mask, causal=causal, device=device)
            assert_matches(got, q, k, v, mask=mask, causal=causal)
            zero_rows_exact(got, [1])
            if lk > 1:
                assert np.isfinite(got).all()
        # no mask: every key attended, plain partial blocks
        k2, v2 = np.nan_to_num(k, nan=0.5), np.nan_to_num(v, nan=-2.0)
        for causal in (False, True):
            got = vkcore.attention(q, k2, v2, causal=causal, device=device)
            assert_matches(got, q, k2, v2, causal=causal)
    path.check_taken()


@pytest.mark.parametrize("lk", [9, 17, 25, 33, 57])
def test_nan_just_past_each_split_end_masked(device, rng, path, lk):
    """Splits of one block: the keys just before and just past each split's end are
    masked and hold NaN (and +inf) keys and values; nothing may change."""
    q, k, v = rand(rng, 1, 4, 5, 8), rand(rng, 1, 2, lk, 8), rand(rng, 1, 2, lk, 4)
    mask = np.ones((lk,), bool)
    poisoned = [j for j in range(lk) if j % 8 in (0, 7)]
    mask[poisoned] = False
    for j in poisoned:
        k[..., j, :] = np.nan if j % 2 else np.inf
        v[..., j, :] = np.inf if j % 2 else np.nan
    for splits in (1, 2, 3, -(-lk // 8)):
        path.force(splits)
        for causal in (False, True):
            got = vkcore.attention(q, k, v, mask=mask, causal=causal, device=device)
            assert np.isfinite(got).all(), (splits, causal)
            assert_matches(got, q, k, v, mask=mask, causal=causal)
    path.check_taken()


@pytest.mark.parametrize("lq, lk", [(20, 7), (9, 1), (17, 8), (33, 9), (16, 15)])
def test_causal_more_queries_than_keys(device, rng, path, lq, lk):
    """Causal with Lq > Lk: the first Lq - Lk queries attend nothing and give exactly 0,
    even with NaN/inf in every k and v (the clamped index must not read them either).
    GQA group 3: a tile mixes rows of several heads."""
    q, k, v = rand(rng, 1, 3, lq, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    for splits in (1, 2, 5):
        path.force(splits)
        got = vkcore.attention(q, k, v, causal=True, device=device)
        assert_matches(got, q, k, v, causal=True)
        zero_rows_exact(got, slice(0, lq - lk))
    path.check_taken()


def test_causal_excluded_nan_inside_partial_blocks(device, rng, path):
    """Causal prefill, Lq == Lk = 37: query i never reads key j > i. NaN in the keys and
    values above the diagonal is invisible only if the clamped index stays below the
    tile's causal end; each query gets its own Lk so that position holds NaN."""
    lk = 37
    q, k, v = rand(rng, 1, 2, lk, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 8)
    for splits in (1, 2, 3, 5):
        path.force(splits)
        for i in (0, 1, 7, 8, 9, 16, 23, 36):
            # q rows 0..i over keys 0..lk-1 with NaN at keys > i (causal, bottom right:
            # query t of i+1 queries attends j <= t + lk - (i+1) -> use explicit mask).
            kk, vv = k.copy(), v.copy()
            kk[..., i + 1 :, :] = np.nan
            vv[..., i + 1 :, :] = np.nan
            mask = np.tri(lk, lk, 0, dtype=bool)[: i + 1]
            got = vkcore.attention(q[:, :, : i + 1], kk, vv, mask=mask, device=device)
            assert np.isfinite(got).all(), (splits, i)
            assert_matches(got, q[:, :, : i + 1], kk, vv, mask=mask)
    path.check_taken()


def test_whole_split_masked(device, rng, path):
    """A mask that excludes every key of a whole split (NaN behind it), and one that
    excludes every key but one in a partial last block."""
    lk = 8 * 4 * 3 + 5  # three splits of 4 blocks and a partial fourth split
    q, k, v = rand(rng, 1, 2, 4, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    path.force(4)
    mask = np.ones((4, lk), bool)
    mask[:, 32:64] = False
    k[..., 32:64, :] = np.nan
    v[..., 32:64, :] = np.nan
    mask[1, :] = False
    mask[2, :] = False
    mask[2, lk - 3] = True  # only one key in the last (partial) split
    mask[3, 96:] = False  # the whole last split masked for query 3
    got = vkcore.attention(q, k, v, mask=mask, device=device)
    g = path.grids[-1]
    assert g.splits == 4 and g.chunk == 32, g
    assert np.isfinite(got).all()
    zero_rows_exact(got, [1])
    assert_matches(got, q, k, v, mask=mask)
    # query 2: exactly v[lk-3] (one key, weight 1)
    np.testing.assert_allclose(got[0, :, 2], np.broadcast_to(v[0, 0, lk - 3], (2, 4)), atol=1e-6)
    path.check_taken()


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("n", [1, 7, 9, 17, 33])
def test_cache_garbage_past_length(device, rng, path, dtype, n):
    """A cache whose rows past len(cache) hold NaN (planted in the buffers, codes and
    scales too): the last block of the last split is partial and the clamped index must
    stay below the length. batch 2, GQA 3."""
    d = {"float32": 4, "float16": 8, "int8": 16}[dtype]
    cap, heads, batch = 48, 2, 2
    cache = vkcore.KVCache(heads, d, cap, batch=batch, dtype=dtype, device=device)
    for name in ("k", "v", "k_scales", "v_scales"):
        buf = cache.buffer(name)
        if name.endswith("scales") and dtype != "int8":
            continue
        words = buf.nbytes // 4
        buf.write(np.full(words, 0x7FC00000, np.uint32))  # NaN float32, NaN halves too
        if name in ("k", "v") and dtype == "int8":
            buf.write(np.full(words, 0x7F7F7F7F, np.uint32))  # codes 127
    k, v = rand(rng, batch, heads, n, d), rand(rng, batch, heads, n, d)
    cache.append(k, v)
    keys, values = cache.numpy()
    assert np.isfinite(keys).all() and np.isfinite(values).all()
    q = rand(rng, batch, 6, 3, d)
    try:
        for splits in (1, 2, 3):
            path.force(splits)
            for causal in (False, True):
                got = vkcore.attention(q, cache, causal=causal)
                assert np.isfinite(got).all(), (splits, causal)
                assert_matches(got, q, keys, values, causal=causal)
                if causal and n < 3:
                    zero_rows_exact(got, slice(0, 3 - n))
    finally:
        cache.release()
    path.check_taken()


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("bad", ["nan_v", "inf_v", "nan_k"])
def test_cache_non_finite_appended_values(device, rng, path, dtype, bad):
    """A NaN/inf in an appended value or key at position p: with causal decode rows,
    queries that attend p give NaN (int8: docs say so; float: the reference on the held
    values decides), the queries that do not attend p are untouched."""
    d = {"float32": 4, "float16": 8, "int8": 16}[dtype]
    n, cap = 19, 40
    cache = vkcore.KVCache(1, d, cap, dtype=dtype, device=device)
    k, v = rand(rng, 1, n, d), rand(rng, 1, n, d)
    p = n - 2  # attended by the last two of 4 queries (causal bottom right)
    if bad == "nan_v":
        v[0, p, 1] = np.nan
    elif bad == "inf_v":
        v[0, p, 1] = np.inf
    else:
        k[0, p, 1] = np.nan
    cache.append(k, v)
    keys, values = cache.numpy()
    q = rand(rng, 2, 4, d)
    try:
        for splits in (1, 2, 3):
            path.force(splits)
            got = vkcore.attention(q, cache, causal=True)
            ref = reference.attention(q[None], keys, values, causal=True)[0]
            # rows 0, 1 attend keys <= 15, 16 -> never p = 17
            assert np.isfinite(got[:, :2]).all(), got[:, :2]
            if dtype == "int8" or bad == "nan_k" or bad == "nan_v":
                assert np.isnan(got[:, 2:]).all(axis=-1).all() or np.isnan(ref[:, 2:]).any()
            np.testing.assert_array_equal(
                np.isnan(got), np.isnan(ref), err_msg=f"NaN placement, splits={splits}"
            )
            live = np.isfinite(ref)
            bound = 1e-5 * np.abs(np.nan_to_num(values, nan=0, posinf=0, neginf=0)).max()
            assert np.abs(got[live] - ref[live]).max(initial=0) <= bound
            np.testing.assert_array_equal(np.isinf(got), np.isinf(ref), err_msg="inf placement")
    finally:
        cache.release()
    path.check_taken()


@pytest.mark.parametrize("ratio", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("hkv", [1, 2])
def test_every_gqa_ratio(device, rng, path, ratio, hkv):
    """Query head h reads KV head h // ratio, with tiles of up to 16 rows mixing heads,
    causal rows, and splits; rows of different lengths Lq."""
    hq = hkv * ratio
    for lq, lk in ((1, 29), (5, 29), (7, 3)):
        q = rand(rng, 2, hq, lq, 8)
        k, v = rand(rng, 2, hkv, lk, 8), rand(rng, 2, hkv, lk, 12)
        for splits in (1, 3):
            path.force(splits)
            got = vkcore.attention(q, k, v, causal=True, device=device)
            assert_matches(got, q, k, v, causal=True)
            # each query head separately must give the same bits (nothing crosses heads
            # within a tile other than by the formula)
            for h in (0, hq - 1):
                one = vkcore.attention(
                    q[:, h : h + 1],
                    k[:, h // ratio : h // ratio + 1],
                    v[:, h // ratio : h // ratio + 1],
                    causal=True,
                    device=device,
                )
                assert_matches(
                    one,
                    q[:, h : h + 1],
                    k[:, h // ratio : h // ratio + 1],
                    v[:, h // ratio : h // ratio + 1],
                    causal=True,
                )
    path.check_taken()


@pytest.mark.parametrize("steps", [40, 100, 300])
def test_resumed_passes_with_splits_and_masks(device, rng, path, monkeypatch, steps):
    """Passes of a few blocks (MAX_LOOP_STEPS lowered) combined with splits, causal,
    masks with NaN behind them, a fully masked query, a NaN query and partial blocks."""
    monkeypatch.setattr(plan, "MAX_LOOP_STEPS", steps)
    lq, lk = 6, 8 * 23 + 3
    q, k, v = rand(rng, 1, 4, lq, 4), rand(rng, 1, 2, lk, 4), rand(rng, 1, 2, lk, 8)
    k[..., :, 0] = np.linspace(-30, 60, lk)  # ascending: the reference moves
    mask = rng.random((4, lq, lk)) > 0.3
    mask[:, :, 40:70] = False
    k[..., 40:70, :] = np.nan
    v[..., 40:70, :] = np.nan
    mask[1, 2] = False
    q2 = q.copy()
    q2[0, 3, 4, 1] = np.nan
    for splits in (1, 2, 4):
        path.force(splits)
        for causal in (False, True):
            got = vkcore.attention(q2, k, v, mask=mask, causal=causal, device=device)
            g = path.grids[-1]
            assert g.passes > 1 or g.chunk <= g.max_chunk
            assert_matches(got, q2, k, v, mask=mask, causal=causal)
            assert np.all(got[0, 1, 2] == 0)
            assert np.isnan(got[0, 3, 4]).all()
            assert np.isfinite(np.delete(got.reshape(-1, 8), 3 * lq + 4, axis=0)).all()
    assert any(g.passes > 2 for g in path.grids), [g.passes for g in path.grids]
    path.check_taken()


@pytest.mark.parametrize(
    "rows, d, dv, dtype",
    [
        (1, 4, 4, "float32"),
        (16, 4, 4, "float32"),
        (2, 256, 256, "float32"),
        (16, 64, 64, "int8"),
    ],
)
def test_largest_single_pass_loop_limit(device, rng, path, rows, d, dv, dtype):
    """One split of exactly max_chunk keys: one pass, the plan's bound of llvmpipe's loop
    limit (65,535 iterations over an invocation). Ascending scores, so a loop ended early
    (the last, largest keys missing) shows as a large error."""
    path.force(1)
    _check_largest_single_pass(device, rng, rows, d, dv, dtype, path.grids)
    path.check_taken()


@pytest.mark.parametrize("wg", [4, 16])  # a part of a subgroup, two subgroups: no shuffles
@pytest.mark.parametrize("texel", ["1", "0"])
def test_largest_single_pass_other_workgroups(device, rng, monkeypatch, wg, texel):
    if not plan.lanes_kernel(device.info, 4, 4):
        pytest.skip("attention_lanes.comp runs on CPU devices only")
    monkeypatch.setenv("VKCORE_TEXEL", texel)
    monkeypatch.setattr(plan, "workgroup_size", lambda info: wg)
    monkeypatch.setattr(plan, "split_count", lambda *a: 1)
    grids = []
    real_grid = plan.grid

    def grid_spy(*a, **kw):
        grids.append(real_grid(*a, **kw))
        return grids[-1]

    monkeypatch.setattr(plan, "grid", grid_spy)
    _check_largest_single_pass(device, rng, 16, 4, 4, "float32", grids)
    assert not grids[-1].shuffle and grids[-1].workgroup == wg


def _check_largest_single_pass(device, rng, rows, d, dv, dtype, grids):
    per = {"float32": 1, "float16": 2, "int8": 4}[dtype]
    g = plan.lanes_grid(device.info, 2, 1, rows, 1 << 16, d // per, dv // per, per)
    lk = g.max_chunk
    q = np.zeros((1, 1, rows, d), np.float32)
    q[..., 0] = 1
    k = np.zeros((1, 1, lk, d), np.float32)
    k[..., 0] = np.linspace(-20, 20, lk)
    v = rand(rng, 1, 1, lk, dv)
    if dtype == "float32":
        got = vkcore.attention(q, k, v, scale=1.0, device=device)
        keys, values = k, v
    else:
        cache = vkcore.KVCache(1, d, lk, dtype=dtype, device=device)
        cache.append(k[0], v[0])
        keys, values = cache.numpy()
        got = vkcore.attention(q[0], cache, scale=1.0)[None]
        cache.release()
    gg = grids[-1]
    assert gg.splits == 1 and gg.passes == 1 and gg.tile == g.tile, gg
    assert_matches(got, q, keys, values, scale=1.0)


def test_unforced_prefill_single_split_long_keys(device, rng, path):
    """No forcing: 8 heads of 16 rows (8 tiles: one split as planned) over 50,000 keys,
    in as many passes as the plan's loop-step count gives (it once planned one pass,
    which llvmpipe cut short after about 47,700 keys on the shared-weights path).
    Ascending scores, the last keys dominate."""
    lk = 50_000
    q = np.zeros((1, 8, 16, 4), np.float32)
    q[..., 0] = 1
    k = np.zeros((1, 8, lk, 4), np.float32)
    k[..., 0] = np.linspace(-20, 20, lk)
    v = rand(rng, 1, 8, lk, 4)
    got = vkcore.attention(q, k, v, scale=1.0, device=device)
    g = path.grids[-1]
    assert g.splits == 1, g
    assert g.passes * g.max_chunk >= lk, g
    assert_matches(got, q, k, v, scale=1.0)
    path.check_taken()


@pytest.mark.parametrize("d, dv", [(4, 36), (12, 4), (256, 256), (64, 132)])
def test_dims_off_the_workgroup(device, rng, path, d, dv):
    """v rows of 9 or 33 uvec4s over 8 lanes (lanes past V4 read nothing), long k rows."""
    q, k, v = rand(rng, 1, 2, 5, d), rand(rng, 1, 1, 23, d), rand(rng, 1, 1, 23, dv)
    for splits in (1, 3):
        path.force(splits)
        got = vkcore.attention(q, k, v, causal=True, device=device)
        assert_matches(got, q, k, v, causal=True)
    path.check_taken()


def test_determinism_tensors_and_sequence(device, rng, path):
    """Repeated calls give the same bits; Tensors in give a Tensor of the same bits; a
    sequence recording the call (and replaying it) too; out= q (a numpy input)."""
    q, k, v = rand(rng, 1, 4, 9, 8), rand(rng, 1, 2, 45, 8), rand(rng, 1, 2, 45, 8)
    mask = rng.random((9, 45)) > 0.3
    path.force(3)
    first = vkcore.attention(q, k, v, causal=True, mask=mask, device=device)
    assert_matches(first, q, k, v, causal=True, mask=mask)
    for _ in range(3):
        np.testing.assert_array_equal(
            vkcore.attention(q, k, v, causal=True, mask=mask, device=device), first
        )
    tq, tk, tv = (vkcore.asarray(x, device=device) for x in (q, k, v))
    t = vkcore.attention(tq, tk, tv, causal=True, mask=mask)
    assert isinstance(t, vkcore.Tensor)
    np.testing.assert_array_equal(t.numpy(), first)
    tout = vkcore.Tensor.empty(first.shape, np.float32, device)
    assert vkcore.attention(tq, tk, tv, causal=True, mask=mask, out=tout) is tout
    np.testing.assert_array_equal(tout.numpy(), first)
    with vkcore.sequence(device=device) as seq:
        s = vkcore.attention(tq, tk, tv, causal=True, mask=mask)
    np.testing.assert_array_equal(s.numpy(), first)
    q2 = rand(rng, 1, 4, 9, 8)
    tq.write(q2)
    seq.run()
    expect = vkcore.attention(q2, k, v, causal=True, mask=mask, device=device)
    np.testing.assert_array_equal(s.numpy(), expect)
    qq = q.copy()
    assert vkcore.attention(qq, k, v, causal=True, mask=mask, out=qq, device=device) is qq
    np.testing.assert_array_equal(qq, first)
    path.check_taken()


def test_sequence_append_and_decode_over_cache(device, rng, path):
    """Append then attend inside one sequence (the call attends the new positions), over
    a cache with garbage past its length; replay with new inputs."""
    for dtype in ("float16", "int8"):
        d = 16
        cache = vkcore.KVCache(2, d, 30, dtype=dtype, device=device)
        for name in ("k", "v"):
            buf = cache.buffer(name)
            buf.write(
                np.full(
                    buf.nbytes // 4, 0x7FC07FC0 if dtype == "float16" else 0x7F7F7F7F, np.uint32
                )
            )
        cache.append(rand(rng, 2, 8, d), rand(rng, 2, 8, d))
        k_in = vkcore.asarray(rand(rng, 2, 1, d), device=device)
        v_in = vkcore.asarray(rand(rng, 2, 1, d), device=device)
        q_in = vkcore.asarray(rand(rng, 4, 2, d), device=device)
        path.force(2)
        with vkcore.sequence(device=device) as seq:
            cache.append(k_in, v_in)
            ctx = vkcore.attention(q_in, cache, causal=True)
        assert len(cache) == 9
        keys, values = cache.numpy()
        got = ctx.numpy()
        assert np.isfinite(got).all()
        assert_matches(got[None], q_in.numpy()[None], keys, values, causal=True)
        k_in.write(rand(rng, 2, 1, d))
        v_in.write(rand(rng, 2, 1, d, scale=3))
        seq.run()
        keys, values = cache.numpy()
        assert len(cache) == 9
        assert_matches(ctx.numpy()[None], q_in.numpy()[None], keys, values, causal=True)
        cache.release()
    path.check_taken()


def test_extreme_scores_in_partial_blocks(device, rng, path):
    """+inf / NaN scores placed in the last (partial) block and in a single-key split,
    -inf scores from overflow (weight 0, like a mask), one dominant key at the clamped
    index: each affects only its query."""
    lk = 17
    q, k, v = rand(rng, 1, 1, 6, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    add = np.zeros((6, lk), np.float32)
    add[0, 16] = np.inf  # the single-key last split
    add[1, 16] = np.nan
    add[2, 15] = np.inf
    add[3, 16] = 80.0  # dominant last key
    add[4, 16] = -3e38  # tiny weight
    add[5, :] = -np.inf
    add[5, 16] = 0
    for splits in (1, 2, 3):
        path.force(splits)
        got = vkcore.attention(q, k, v, mask=add, device=device)
        assert list(np.flatnonzero(np.isnan(got).any(axis=-1)[0, 0])) == [0, 1, 2]
        assert np.isnan(got[0, 0, :3]).all()
        assert_matches(got, q, k, v, mask=add)
        np.testing.assert_allclose(got[0, 0, 5], v[0, 0, 16], atol=1e-6, rtol=0)
    path.check_taken()
