"""Adversarial checks of exact repeats (vkcore.compute.repeat): a repeated (3rd+) call
must give exactly what the full call gives, including its exceptions."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels.sampling import topk_steps

M, N = 40, 256


def _error(call):
    with pytest.raises(Exception) as info:
        call()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("shape", [(N, 1), (1, N)])
@pytest.mark.parametrize("kernel", ["matvec", "matvec_f32"])
def test_tensor_repeat_checks_x_shape(device, rng, shape, kernel):
    """A Tensor x reshaped (same buffer) to a batch shape: the full call raises
    TypeError (out is for a vector x), a repeat of the kept (n,) call must too.
    FAILS: _repeated_tensors never checks x.shape, so it returns out as if x were (n,)."""
    w = rng.standard_normal((M, N)).astype(np.float32)

    def make():
        if kernel == "matvec":
            qt = vkcore.quantize(w, device=device)
            return lambda x, out: vkcore.matvec(qt, x, out=out, activations="int8")
        fm = vkcore.F32Matrix(w, device=device)
        return lambda x, out: vkcore.matvec_f32(fm, x, out=out)

    x = vkcore.asarray(rng.standard_normal(N).astype(np.float32), device=device)
    out = vkcore.asarray(np.zeros(M, np.float32), device=device)
    fresh = make()
    want = _error(lambda: fresh(x.reshape(shape), out))  # the full call's answer
    call = make()
    for _ in range(4):  # kept, then repeated
        call(x, out)
    assert _error(lambda: call(x.reshape(shape), out)) == want


# ---------------------------------------------------------------- kept passing checks
def _bad_rows(rng, n):
    x = rng.standard_normal((4, n)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, :] = np.nan
    x[2, 3], x[2, 7] = np.inf, -np.inf
    x[3, ::2] = -np.inf
    return x


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("k", [1, 17, "kmax", "kmax+1", "n"])
def test_topk_repeats_nonfinite_rows_new_arrays(device, rng, fused, k):
    n = 1000
    kmax = topk_steps.select_k_max(device)
    kk = {"kmax": kmax, "kmax+1": kmax + 1, "n": n}.get(k, k)
    x = _bad_rows(rng, n)
    f = vkcore.softmax_topk if fused else vkcore.topk
    ref = reference.softmax_topk if fused else reference.topk
    prev = None
    for _ in range(5):
        v, i = f(x, kk, device=device)
        rv, ri = ref(x, kk)
        assert np.array_equal(i, ri)
        if fused:
            np.testing.assert_allclose(v, rv, atol=1e-6, equal_nan=True)
        else:
            assert np.array_equal(v, rv, equal_nan=True)
        if prev is not None:
            assert prev[0] is not v and prev[1] is not i
            prev[0][...] = 7.0  # the caller scribbling on an earlier result
            prev[1][...] = 7
        prev = (v, i)


@pytest.mark.parametrize("fused", [False, True])
def test_topk_repeats_views_readonly_and_mutated(device, rng, fused):
    f = vkcore.softmax_topk if fused else vkcore.topk
    ref = reference.softmax_topk if fused else reference.topk
    big = rng.standard_normal((10, 600)).astype(np.float32)
    ro = big.copy()
    ro.flags.writeable = False
    for x in (big[2:6], ro, big[3]):
        for _ in range(4):
            v, i = f(x, 20, device=device)
            rv, ri = ref(x, 20)
            assert np.array_equal(i, ri)
            np.testing.assert_allclose(v, rv, atol=1e-6 if fused else 0)
    y = np.empty((2, 500), np.float32)
    for _ in range(5):
        y[...] = rng.standard_normal(y.shape)
        v, i = f(y, 10, device=device)
        assert np.array_equal(i, ref(y, 10)[1])


def test_matvec_tensor_repeat_bias_is_out(device, rng):
    w = rng.standard_normal((M, N)).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    xv = rng.standard_normal(N).astype(np.float32)
    cur = rng.standard_normal(M).astype(np.float32)
    x, o = vkcore.asarray(xv, device=device), vkcore.asarray(cur, device=device)
    for _ in range(5):
        got = vkcore.matvec(qt, x, bias=o, out=o, activations="int8").numpy()
        cur = reference.matvec(qt.q, qt.scale, qt.zero_point, xv, cur, "int8")
        assert np.array_equal(got, cur)


def test_topk_repeat_inside_and_after_sequence(device, rng):
    a = rng.standard_normal((2, 300)).astype(np.float32)
    for _ in range(3):
        vkcore.topk(a, 4, device=device)
    with vkcore.sequence(device=device):
        v, _ = vkcore.topk(a, 4, device=device)
    assert isinstance(v, vkcore.Tensor)
    v, i = vkcore.topk(a, 4, device=device)
    assert isinstance(v, np.ndarray) and np.array_equal(i, reference.topk(a, 4)[1])
