"""vkcore.topk and vkcore.softmax_topk against vkcore.reference: indices bit for bit,
values bit for bit, probabilities within 1e-6 of the float64 reference."""

import numpy as np
import pytest
from checks import PROB_ATOL, check_softmax_topk, check_topk

import vkcore
from vkcore import reference
from vkcore.kernels.sampling import topk_steps


def logits(rng, shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


CASES = [
    ((1, 1), 1),
    ((4, 100), 1),
    ((4, 100), 7),
    ((4, 100), 100),  # k = n
    ((3, 50_000), 40),  # rows split across workgroups, merged
    ((64, 32_000), 40),
    ((64, 32_000), 128),
    ((2, 5_000), 129),
    ((3, 40_000), 300),  # large private heaps (select on a CPU device)
    ((2, 20_000), 512),
]


def test_the_sort_just_beyond_the_select_kernel(device, rng):
    k = topk_steps.select_k_max(device) + 1
    x = logits(rng, (2, 3 * k))
    assert topk_steps.select_plan(device, 2, 3 * k, k) is None
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


@pytest.mark.parametrize(("shape", "k"), CASES)
def test_topk_and_softmax_topk_match_the_reference(device, rng, shape, k):
    x = logits(rng, shape)
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


def test_long_row_small_and_whole_k(device, rng):
    x = logits(rng, (1, 1 << 20))
    check_topk(x, 128, vkcore.topk(x, 128, device=device))
    check_softmax_topk(x, 40, vkcore.softmax_topk(x, 40, device=device))
    check_topk(x, 1 << 20, vkcore.topk(x, 1 << 20, device=device))


def test_64x32000_whole_sort(device, rng):
    x = logits(rng, (64, 32_000))
    check_topk(x, 32_000, vkcore.topk(x, 32_000, device=device))


@pytest.mark.parametrize("k", [1, 5, 64, 200])
def test_ties_go_to_the_lower_index(device, rng, k):
    x = np.round(logits(rng, (16, 1000), 1.5))  # a few distinct values, many ties
    x[0] = 1.0  # one row of a single value: indices 0..k-1
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))
    np.testing.assert_array_equal(vkcore.topk(x, k, device=device)[1][0], np.arange(k))


@pytest.mark.parametrize("k", [3, 10, 300])
def test_inf_nan_and_signed_zero(device, rng, k):
    x = logits(rng, (6, 400))
    x[0, ::3] = -np.inf  # -inf after every finite value
    x[1, 5:50] = np.nan  # NaN last, after -inf
    x[1, 60:70] = -np.inf
    x[2, :] = -np.inf  # a row of only -inf: indices 0..k-1, probabilities 0
    x[3, :] = np.nan  # a row of only NaN
    x[4, 7] = np.inf  # +inf first; its probabilities are NaN
    x[5, :] = 0.0
    x[5, ::2] = -0.0  # -0 and +0 tie: index order
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))
    probs, idx = vkcore.softmax_topk(x, k, device=device)
    assert np.all(probs[2] == 0) and np.all(np.isnan(probs[1])) and np.all(np.isnan(probs[4]))
    np.testing.assert_array_equal(idx[3], np.arange(k))
    assert idx[4, 0] == 7


def test_nan_ranks_after_minus_inf(device):
    x = np.array([[np.nan, -np.inf, 1.0, np.nan, -np.inf]], dtype=np.float32)
    values, idx = vkcore.topk(x, 5, device=device)
    np.testing.assert_array_equal(idx, [[2, 1, 4, 0, 3]])
    assert (
        values[0, 0] == 1.0 and np.isneginf(values[0, 1:3]).all() and np.isnan(values[0, 3:]).all()
    )


@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_sorted_rows(device, rng, order):
    """Ascending rows make every element enter the running top-k lists."""
    x = np.sort(logits(rng, (4, 60_000)), axis=-1)
    if order == "descending":
        x = x[:, ::-1].copy()
    for k in (1, 40, 128):
        check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, 40, vkcore.softmax_topk(x, 40, device=device))


def test_axis_ndim_dtypes(device, rng):
    x = logits(rng, (5, 30, 7))
    check_topk(x, 4, vkcore.topk(x, 4, axis=1, device=device), axis=1)
    check_topk(x, 3, vkcore.topk(x, 3, axis=0, device=device), axis=0)
    check_topk(x, 7, vkcore.topk(x, 7, device=device))
    vals, idx = vkcore.topk(x[0, :, 0], 5, device=device)  # 1-D
    assert vals.shape == idx.shape == (5,)
    for arr in (x.astype(np.float64), x.astype(np.float16), (x * 10).astype(np.int32)):
        check_topk(arr, 6, vkcore.topk(arr, 6, device=device))
    check_topk([3, 1, 2], 2, vkcore.topk([3, 1, 2], 2, device=device))
    probs, idx = vkcore.softmax_topk(x, 4, axis=1, device=device)
    ref_p, ref_i = reference.softmax_topk(x, 4, axis=1)
    np.testing.assert_array_equal(idx, ref_i)
    assert np.abs(probs - ref_p).max() <= PROB_ATOL


def test_empty_rows(device):
    vals, idx = vkcore.topk(np.zeros((0, 5), np.float32), 3, device=device)
    assert vals.shape == idx.shape == (0, 3) and idx.dtype == np.int64


def test_tensor_in_tensor_out(device, rng):
    x = logits(rng, (3, 8, 500))
    t = vkcore.asarray(x, device=device)
    for fn, check in ((vkcore.topk, check_topk), (vkcore.softmax_topk, check_softmax_topk)):
        for k in (10, 500):
            a, b = fn(t, k)
            assert isinstance(a, vkcore.Tensor) and isinstance(b, vkcore.Tensor)
            assert a.dtype == np.float32 and b.dtype == np.int64 and b.shape == (3, 8, k)
            check(x, k, (a.numpy(), b.numpy()))
    with pytest.raises(ValueError, match="last axis"):
        vkcore.topk(t, 2, axis=0)
    with pytest.raises(TypeError, match="float32 Tensor"):
        vkcore.topk(vkcore.asarray(np.arange(6, dtype=np.int32), device=device), 2)


def test_plans_respect_the_loop_budget(device):
    """No select invocation scans more than its share of llvmpipe's loop budget."""
    for rows, n, k in [(1, 1 << 20, 128), (64, 32_000, 40), (1, 1 << 24, 1), (7, 3, 3)]:
        plan = topk_steps.select_plan(device, rows, n, k)
        assert plan is not None
        most = topk_steps.max_elements_per_invocation(k, plan.workgroup)
        assert plan.chunk // plan.workgroup <= most
        assert plan.nchunks == 1 or -(-plan.nchunks * k // plan.workgroup) <= most
    assert topk_steps.select_plan(device, 1, 1000, topk_steps.select_k_max(device) + 1) is None


@pytest.mark.parametrize("fn", [vkcore.topk, vkcore.softmax_topk])
def test_bad_arguments(device, fn):
    x = np.zeros((2, 10), np.float32)
    for k, exc, msg in [
        (True, TypeError, "k must be an int"),
        (2.0, TypeError, "k must be an int"),
        ("3", TypeError, "k must be an int"),
        (0, ValueError, r"k must be in 1\.\.10"),
        (11, ValueError, r"k must be in 1\.\.10"),
        (-1, ValueError, r"k must be in 1\.\.10"),
    ]:
        with pytest.raises(exc, match=msg):
            fn(x, k, device=device)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fn(x, 1, axis=2, device=device)
    with pytest.raises(TypeError, match="axis must be an int"):
        fn(x, 1, axis=(0, 1), device=device)
    with pytest.raises(TypeError, match="axis must be an int"):
        fn(x, 1, axis=True, device=device)
    with pytest.raises(ValueError, match="length is 0"):
        fn(np.zeros((3, 0), np.float32), 1, device=device)
    with pytest.raises(ValueError, match="at least one dimension"):
        fn(np.float32(1.0), 1, device=device)
    for bad in (np.zeros(4, bool), np.zeros(4, complex), "abc", None, np.array(["a", "b"])):
        with pytest.raises(TypeError, match="x must"):
            fn(bad, 1, device=device)


# The select kernel's first pass sets a floor from each invocation's largest block maxima
# (blocks of four, invocations striding by 4 x workgroup); these rows aim at that floor.
def _stride(device, rows, n, k):
    return 4 * topk_steps.select_plan(device, rows, n, k).workgroup


@pytest.mark.parametrize("k", [1, 5, 40, 128])
def test_the_best_all_in_one_invocations_share(device, rng, k):
    """Every large value in blocks one invocation scans: the other invocations' maxima
    are far below the k-th, and the floor must not drop what the one invocation holds."""
    n = 20_000
    stride = _stride(device, 3, n, k)
    x = logits(rng, (3, n), 0.1)
    blocks = np.arange(n) // 4 * 4
    x[0, blocks % stride == 0] += 100.0  # invocation 0's blocks, all four elements
    x[1, np.arange(n) % stride == 3] += 100.0  # one element per block of invocation 0
    x[2, n - 4 * k :] += 100.0  # the last blocks (and the tail)
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


@pytest.mark.parametrize("k", [2, 16, 33, 127])
def test_ties_at_the_floor(device, rng, k):
    """Values from a few levels, so the k-th value ties with many others around the
    floor: the lower indices must win, in every invocation's share."""
    x = rng.integers(0, 4, size=(8, 9_000)).astype(np.float32)
    x[1] = 0.0
    x[1, rng.choice(9_000, size=k + 3, replace=False)] = 1.0  # just over k at the top
    x[2] = 0.0
    x[2, rng.choice(9_000, size=max(1, k - 1), replace=False)] = 1.0  # just under k
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


@pytest.mark.parametrize("n", [5, 31, 33, 127, 1023, 4099])
def test_rows_of_every_tail_length(device, rng, n):
    """Rows that are not whole blocks (scalar loads) or not whole strides (a tail)."""
    x = logits(rng, (5, n))
    x[1, : n // 2] = np.nan
    x[2, ::2] = -np.inf
    for k in sorted({1, min(n, 9), min(n, 40), min(n, 128)}):
        check_topk(x, k, vkcore.topk(x, k, device=device))
        check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


def test_fewer_finite_values_than_k(device, rng):
    """The floor of a row with fewer than k values above NaN is NaN's key: -inf and NaN
    entries must still fill the list, in order."""
    x = np.full((3, 3_000), np.nan, dtype=np.float32)
    x[0, rng.choice(3_000, 10, replace=False)] = rng.standard_normal(10)
    x[1, rng.choice(3_000, 30, replace=False)] = -np.inf
    x[1, 7] = 2.0
    x[2, ::100] = 1.0
    for k in (5, 40, 128):
        check_topk(x, k, vkcore.topk(x, k, device=device))
        check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


@pytest.mark.parametrize("per_invocation", [1, 4, 15])
@pytest.mark.parametrize("rows", [16, 1])  # whole rows; a row split into chunks
def test_floor_counts_k_exactly(device, rng, per_invocation, rows):
    """k - 1 large values spread one per block, the same number of blocks in every
    invocation's share of a chunk, and the k-th value just below them in the same chunk:
    a floor taken from one slot too few per invocation would drop the k-th."""
    n = 40_000
    plan = topk_steps.select_plan(device, rows, n, 2)
    wg = plan.workgroup
    assert (plan.nchunks == 1) == (rows == 16)
    k = min(wg * per_invocation + 1, topk_steps.select_k_max(device))
    x = logits(rng, (rows, n), 0.01)
    large = (np.arange(k - 1) // wg) * 4 * wg + (np.arange(k - 1) % wg) * 4  # block starts
    assert large[-1] + 3 < topk_steps.select_plan(device, rows, n, k).chunk
    x[:, large + 1] = 50.0 + np.arange(k - 1, dtype=np.float32)
    x[0, large[-1] + 2] = 40.0  # the k-th inside a block that already holds a large value
    if rows > 1:
        x[1, n - 1] = 40.0  # the k-th in the last block of some invocation
    check_topk(x, k, vkcore.topk(x, k, device=device))
    check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))


def test_the_one_pass_select_of_gpus(device, rng, monkeypatch):
    """The select kernel as a GPU runs it (no floor pass: each element read once, the
    floor rising as the lists fill), on the shapes and values that test the two-pass one."""
    monkeypatch.setattr(topk_steps, "uses_floor_pass", lambda device: False)
    x = logits(rng, (6, 9_001))
    x[1, ::3] = -np.inf
    x[2, 5:900] = np.nan
    x[3] = np.round(x[3])  # ties
    x[4] = np.sort(x[4])  # every element enters
    for k in (1, 7, 40, 128):
        check_topk(x, k, vkcore.topk(x, k, device=device))
        check_softmax_topk(x, k, vkcore.softmax_topk(x, k, device=device))
    long_row = logits(rng, (1, 300_000))  # split into chunks, merged
    check_topk(long_row, 40, vkcore.topk(long_row, 40, device=device))
    check_softmax_topk(long_row, 40, vkcore.softmax_topk(long_row, 40, device=device))


@pytest.mark.parametrize("fn", [vkcore.topk, vkcore.softmax_topk, vkcore.sample])
def test_integer_input_is_float32_and_the_refusal_says_so(device, fn):
    """Integer logits are taken as float32 (the numeric-input rule softmax follows); what
    is refused names both the float and the integer dtypes."""
    ints = np.array([[3, 9, -2, 9, 0]], dtype=np.int64)
    if fn is vkcore.sample:
        assert int(fn(ints, temperature=0.0, device=device)[0]) == 1
    else:
        np.testing.assert_array_equal(fn(ints, 2, device=device)[1], [[1, 3]])
    args = () if fn is vkcore.sample else (1,)
    with pytest.raises(TypeError, match=r"float16, float32 or float64.*integer dtype"):
        fn(np.ones((1, 3), bool), *args, device=device)
