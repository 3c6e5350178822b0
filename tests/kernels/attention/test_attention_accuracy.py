"""vkcore.attention against the float64 reference (vkcore.reference.attention) on the
values the device holds: max error <= 1e-5 x max|v| (docs/attention.md), NaN exactly
where the reference has it, zeros for queries with no attended key.

Covers the score orderings that break a naive online softmax (ascending, one dominant
key at either end, all equal, -1e30 to 80), every split count including splits whose
keys are all masked, grouped-query ratios, head dimensions 1, 3, 64, 80, 128 and 256,
lengths that are no multiple of any tile, and every kind of mask.
"""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels.attention import plan

REL = 1e-5


def assert_matches(got, q, k, v, **kw):
    ref = reference.attention(q, k, v, **kw)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg="NaN rows differ")
    live = ~np.isnan(ref)
    bound = REL * max(float(np.abs(np.nan_to_num(v, posinf=0, neginf=0)).max(initial=0)), 1e-30)
    err = float(np.abs(got[live] - ref[live]).max(initial=0))
    assert err <= bound, f"max |err| {err:.3e} > {bound:.3e}"


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.fixture
def forced_splits(monkeypatch):
    """Force plan.split_count's answer; returns the grids the calls used."""
    grids = []
    real_grid = plan.grid

    def spy(*args, **kwargs):
        g = real_grid(*args, **kwargs)
        grids.append(g)
        return g

    monkeypatch.setattr(plan, "grid", spy)

    def force(n):
        monkeypatch.setattr(plan, "split_count", lambda *a: n)

    return force, grids


def expected_splits(g, keys, forced):
    """The forced split count in whole blocks."""
    blocks = -(-keys // (g.workgroup * g.block_keys))
    return -(-blocks // -(-blocks // min(forced, blocks)))


SCORE_ORDERS = {
    "ascending": lambda n: np.linspace(-30, 80, n),
    "descending": lambda n: np.linspace(80, -30, n),
    "dominant first": lambda n: np.r_[80.0, np.zeros(n - 1)],
    "dominant last": lambda n: np.r_[np.zeros(n - 1), 80.0],
    "all equal": lambda n: np.full(n, 3.0),
    "-1e30 to 80": lambda n: np.r_[np.full(n // 2, -1e30), np.linspace(-1e30, 80, n - n // 2)],
    "steps of 5": lambda n: np.arange(n) % 23 * 5.0 - 40,
}


@pytest.mark.parametrize("order", sorted(SCORE_ORDERS))
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_adversarial_score_orders(device, rng, forced_splits, order, splits):
    """D = 1 and q = 1: the scores are exactly the keys (scale 1), in the given order."""
    force, grids = forced_splits
    force(splits)
    n = 2053
    k = SCORE_ORDERS[order](n).astype(np.float32).reshape(1, 1, n, 1)
    q = np.ones((1, 2, 3, 1), np.float32)  # two query heads of one KV head
    v = rand(rng, 1, 1, n, 5)
    got = vkcore.attention(q, k, v, scale=1.0, device=device)
    g = grids[-1]
    assert g.splits == expected_splits(g, n, splits)
    assert_matches(got, q, k, v, scale=1.0)


def test_long_decode_65536_keys(device, rng):
    """One decode step over 65,536 keys, ascending scores (a reference moved at every
    block of a naive kernel), split as the device plans it."""
    n = 65_536
    q = np.ones((1, 4, 1, 4), np.float32) * np.float32([1, 0.5, -0.25, 2]).reshape(4, 1, 1)
    k = np.zeros((1, 1, n, 4), np.float32)
    k[..., 0] = np.linspace(-20, 40, n)
    k[..., 1:] = rand(rng, n, 3, scale=0.1)
    v = rand(rng, 1, 1, n, 8)
    got = vkcore.attention(q, k, v, scale=1.0, device=device)
    assert_matches(got, q, k, v, scale=1.0)


@pytest.mark.parametrize("d, dv", [(1, 256), (3, 3), (64, 80), (80, 64), (128, 1), (256, 128)])
def test_head_dimensions(device, rng, d, dv):
    q, k, v = rand(rng, 1, 2, 5, d), rand(rng, 1, 1, 71, d), rand(rng, 1, 1, 71, dv)
    assert_matches(vkcore.attention(q, k, v, device=device), q, k, v)
    assert_matches(vkcore.attention(q, k, v, causal=True, device=device), q, k, v, causal=True)


@pytest.mark.parametrize("hq, hkv", [(1, 1), (2, 1), (3, 3), (6, 2), (8, 1), (12, 4)])
@pytest.mark.parametrize("lq", [1, 13])
def test_grouped_query_ratios(device, rng, hq, hkv, lq):
    """Query head h reads KV head h // (Hq // Hkv); tiles may cover rows of several heads."""
    q, k, v = rand(rng, 2, hq, lq, 16), rand(rng, 2, hkv, 37, 16), rand(rng, 2, hkv, 37, 9)
    assert_matches(vkcore.attention(q, k, v, causal=True, device=device), q, k, v, causal=True)


@pytest.mark.parametrize("lq, lk", [(1, 1), (7, 3), (3, 7), (33, 33), (65, 129), (130, 31)])
def test_lengths_and_causal_alignment(device, rng, lq, lk):
    """Lengths off every tile; causal aligned bottom right (Lq > Lk: the first rows have
    no key and give zeros), which equals the boolean mask tri(Lq, Lk, Lk - Lq)."""
    q, k, v = rand(rng, 1, 2, lq, 8), rand(rng, 1, 2, lk, 8), rand(rng, 1, 2, lk, 8)
    got = vkcore.attention(q, k, v, causal=True, device=device)
    assert_matches(got, q, k, v, causal=True)
    tri = np.tri(lq, lk, lk - lq, dtype=bool)
    explicit = vkcore.attention(q, k, v, mask=tri, device=device)
    assert_matches(explicit, q, k, v, causal=True)
    np.testing.assert_allclose(explicit, got, atol=2 * REL * np.abs(v).max(), rtol=0)
    if lq > lk:
        assert np.all(got[:, :, : lq - lk] == 0)


def mask_cases(rng, lead, hq, lq, lk):
    b = rng.random((*lead, hq, lq, lk)) > 0.4
    yield "bool full", b
    yield "bool (Lq, Lk)", b[(0,) * len(lead) + (0,)]
    yield "bool (Lk,)", b[(0,) * len(lead) + (0, 0)]
    yield "bool per head (Hq, 1, Lk)", b[(0,) * len(lead)][:, :1]
    add = rng.standard_normal((*lead, 1, lq, lk)).astype(np.float32) * 3
    add[..., 0, :3] = -np.inf
    yield "additive, -inf entries, broadcast heads", add
    yield "additive float64 (1, Lk)", rng.standard_normal((1, lk))
    none = b.copy()
    none[..., 1, :] = False
    yield "bool with a fully masked row", none


def test_masks_of_every_kind(device, rng):
    check_masks_of_every_kind(device, rng, dv=6)


def check_masks_of_every_kind(device, rng, dv):
    """Every mask of mask_cases, with and without causal, against the reference (``dv``
    picks the kernel: the lanes kernel needs rows of whole word groups)."""
    lead, hq, hkv, lq, lk = (2,), 4, 2, 5, 67
    q, k, v = (
        rand(rng, *lead, hq, lq, 8),
        rand(rng, *lead, hkv, lk, 8),
        rand(rng, *lead, hkv, lk, dv),
    )
    for name, mask in mask_cases(rng, lead, hq, lq, lk):
        for causal in (False, True):
            got = vkcore.attention(q, k, v, mask=mask, causal=causal, device=device)
            try:
                assert_matches(got, q, k, v, mask=mask, causal=causal)
            except AssertionError as exc:
                raise AssertionError(f"{name}, causal={causal}: {exc}") from None


def test_masked_keys_are_never_read(device, rng, forced_splits):
    """NaN keys and values behind a mask change nothing; the splits that hold only masked
    keys merge as nothing; a query with every key masked gives exactly 0."""
    force, _ = forced_splits
    lk = 400
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 1, lk, 4), rand(rng, 1, 1, lk, 4)
    mask = np.ones((3, lk), bool)
    mask[:, :300] = False  # the first splits see only masked keys
    mask[2] = False  # a query with no key
    k[..., :300, :] = np.nan
    v[..., :300, :] = np.nan
    for splits in (1, 2, 5, 13):
        force(splits)
        got = vkcore.attention(q, k, v, mask=mask, device=device)
        assert np.isfinite(got).all()
        assert np.all(got[:, :, 2] == 0)
        assert_matches(got, q, k, v, mask=mask)
        additive = np.where(mask, np.float32(0), np.float32(-np.inf))
        np.testing.assert_array_equal(vkcore.attention(q, k, v, mask=additive, device=device), got)


def test_non_finite_scores_poison_only_their_query(device, rng, forced_splits):
    force, _ = forced_splits
    q, k, v = rand(rng, 1, 1, 6, 4), rand(rng, 1, 1, 90, 4), rand(rng, 1, 1, 90, 4)
    q[0, 0, 1, 2] = np.nan  # query 1: NaN scores
    mask = np.zeros((6, 90), np.float32)
    mask[3, 70] = np.inf  # query 3: a +inf score
    mask[4, 5] = np.nan  # query 4: a NaN score
    for splits in (1, 4):
        force(splits)
        got = vkcore.attention(q, k, v, mask=mask, device=device)
        bad = np.isnan(got).any(axis=-1)[0, 0]
        assert list(np.flatnonzero(bad)) == [1, 3, 4]
        assert np.isnan(got[0, 0, [1, 3, 4]]).all()
        assert_matches(got, q, k, v, mask=mask)


@pytest.mark.parametrize("splits", [1, 2, 3, 7, 64])
def test_every_split_count_with_causal_tiles(device, rng, forced_splits, splits):
    """Causal prefill rows under every split count: splits past a tile's last key are
    empty states, which merge as nothing."""
    force, grids = forced_splits
    force(splits)
    q, k, v = rand(rng, 1, 4, 45, 12), rand(rng, 1, 2, 45, 12), rand(rng, 1, 2, 45, 7)
    got = vkcore.attention(q, k, v, causal=True, device=device)
    assert grids[-1].splits == expected_splits(grids[-1], 45, splits)
    assert_matches(got, q, k, v, causal=True)


def test_scale_and_large_magnitudes(device, rng):
    q, k, v = (
        rand(rng, 1, 1, 4, 16, scale=30),
        rand(rng, 1, 1, 50, 16, scale=30),
        rand(rng, 1, 1, 50, 3),
    )
    for scale in (None, 0.01, -2.0, 1e-20):
        got = vkcore.attention(q, k, v, scale=scale, device=device)
        assert_matches(got, q, k, v, scale=scale)


@pytest.mark.parametrize("size", [1, 3, 12, 13, 100, 256])
def test_any_workgroup_size(device, rng, monkeypatch, size):
    """Any workgroup size a device allows: a multiple of the subgroup or not (key lanes
    then 1, 4 or 8), over every KV layout, with splits and causal tiles."""
    monkeypatch.setattr(plan, "workgroup_size", lambda info: size)
    q, k, v = rand(rng, 1, 4, 9, 20), rand(rng, 1, 2, 300, 20), rand(rng, 1, 2, 300, 7)
    mask = rng.random((9, 300)) > 0.2
    assert_matches(
        vkcore.attention(q, k, v, causal=True, mask=mask, device=device),
        q,
        k,
        v,
        causal=True,
        mask=mask,
    )
    for dtype in ("float16", "int8"):
        cache = vkcore.KVCache(2, 20, 300, dtype=dtype, device=device)
        cache.append(k[0], v[0][..., :1].repeat(20, -1))
        keys, values = cache.numpy()
        got = vkcore.attention(q[0, :, :2], cache)
        assert_matches(got[None], q[:, :, :2], keys, values)
        cache.release()


@pytest.mark.parametrize(
    ("q_mag", "k_mag", "scale", "mask_add"),
    [
        (1.0, 1.0, 3e38, 0.0),  # the score overflows
        (1e20, 1e20, 1e-30, 0.0),  # the dot product overflows, the exact score is ~1e10
        (1.0, 1.0, 1e38, 3.4e38),  # the sum with the mask overflows
        (-1.0, 1.0, 3e38, 0.0),  # scores below -float32 max: weight 0, like -inf
    ],
    ids=["score", "dot", "mask sum", "negative"],
)
def test_scores_beyond_float32_are_infinities(device, rng, q_mag, k_mag, scale, mask_add):
    """Dot products, scores and their sums with the mask are float32 on the device: past
    float32's range they are infinities, and the reference says so too (it agreed only
    up to scores of about 1e38)."""
    # Terms of one sign: the partial sums of a dot product stay below its total (with
    # mixed signs a partial sum may pass the range while the total would not).
    q = np.abs(rng.standard_normal((1, 2, 3, 8))).astype(np.float32) * np.float32(q_mag)
    k = np.abs(rng.standard_normal((1, 1, 9, 8))).astype(np.float32) * np.float32(k_mag)
    q[0, 1, 2] = np.float32(1e-30)  # a row whose scores stay in range
    v = rng.standard_normal((1, 1, 9, 4)).astype(np.float32)
    mask = np.zeros((3, 9), np.float32)
    mask[:, 4] = mask_add
    kw = {"scale": scale, "mask": mask}
    ref = reference.attention(q, k, v, **kw)
    if q_mag > 0:
        assert np.isnan(ref[0, 0, 0]).all()
    assert not np.isnan(ref[0, 1, 2]).any()
    assert_matches(vkcore.attention(q, k, v, device=device, **kw), q, k, v, **kw)
