"""Exact repeats of small numpy top-k calls (vkcore.compute.repeat): each repeat ranks
its own logits, bit for bit against the reference, and anything that is not a repeat
(another k, axis, dtype, layout, the fused form) runs the full call."""

from __future__ import annotations

import numpy as np
import pytest
from checks import check_softmax_topk, check_topk

import vkcore

SHAPE = (4, 1000)


def _logits(rng, shape=SHAPE):
    return (rng.standard_normal(shape) * 3).astype(np.float32)


@pytest.mark.parametrize("fused", [False, True])
def test_repeats_rank_each_calls_own_logits(device, rng, fused):
    f = vkcore.softmax_topk if fused else vkcore.topk
    check = check_softmax_topk if fused else check_topk
    for _ in range(3):
        f(_logits(rng), 8, device=device)
    hits, objects = device.submitter.reuse_hits, device.live_objects()
    for _ in range(4):
        x = _logits(rng)
        x[1, ::7] = np.nan  # the rank rules (NaN last) hold on a repeat too
        check(x, 8, f(x, 8, device=device))
    assert device.submitter.reuse_hits == hits + 4
    assert device.live_objects() == objects, "a repeat allocates nothing"


@pytest.mark.parametrize("change", ["k", "axis 0", "float64", "strided", "1-d", "k as np.int64"])
def test_anything_but_a_repeat_runs_the_full_call(device, rng, change):
    for _ in range(3):
        vkcore.topk(_logits(rng), 8, device=device)
    x, k, axis = _logits(rng), 8, -1
    if change == "k":
        k = 9
    elif change == "axis 0":
        axis, k = 0, 3
    elif change == "float64":
        x = x.astype(np.float64)
    elif change == "strided":
        x = _logits(rng, (4, 2000))[:, ::2]
    elif change == "1-d":
        x = _logits(rng, (4000,))
    elif change == "k as np.int64":
        k = np.int64(8)
    values, indices = vkcore.topk(x, k, axis=axis, device=device)
    if axis == 0:
        values, indices = values.T, indices.T
        x = x.T
    check_topk(np.ascontiguousarray(x).astype(np.float32), int(k), (values, indices))


def test_bad_arguments_still_raise_after_repeats(device, rng):
    x = _logits(rng)
    for _ in range(3):
        vkcore.topk(x, 8, device=device)
    with pytest.raises(ValueError, match="k"):
        vkcore.topk(x, 1001, device=device)
    with pytest.raises((TypeError, ValueError), match="k"):
        vkcore.topk(x, 8.0, device=device)
    with pytest.raises((TypeError, ValueError), match="axis"):
        vkcore.topk(x, 8, axis=2, device=device)
