"""Adversarial checks of exact repeats (vkcore.compute.repeat): a call that looks like a
kept one must give exactly what the full call gives, bit for bit, exception for
exception. Each test keeps a call (three identical calls), then makes one that a repeat
may wrongly take for it, and compares against a Program that never kept anything (the
full call) or the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from adversarial_programs import SCALE

import vkcore

N = 256


def _kept(prog, x, y, **kwargs):
    kwargs.setdefault("groups", N // 64)
    for _ in range(3):
        prog(x, y, **kwargs)
    assert prog._kept is not None, "three identical calls keep the latest"


def _x():
    return np.linspace(1.0, 2.0, N, dtype=np.float32)


def _full(device, x, **kwargs):
    """What the full call gives (a fresh Program keeps nothing yet)."""
    fresh = vkcore.Program(SCALE, device=device)
    y = np.zeros(N, np.float32)
    fresh(x, y, **kwargs)
    return y


def test_a_negative_zero_push_value_is_not_the_kept_positive_zero(device, scale):
    """-0.0 == 0.0 in Python, but the push bytes differ: the full call computes -0.0 * x
    (sign bit set); a repeat of the a=0.0 call resubmits +0.0 and returns +0.0."""
    x = _x()
    _kept(scale, x, np.zeros(N, np.float32), a=0.0, n=N)
    want = _full(device, x, groups=N // 64, a=-0.0, n=N)
    assert np.all(np.signbit(want)), "the full call gives -0.0 for positive x"
    y = np.zeros(N, np.float32)
    scale(x, y, groups=N // 64, a=-0.0, n=N)
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


def test_a_positive_zero_push_value_is_not_the_kept_negative_zero(device, scale):
    x = _x()
    _kept(scale, x, np.zeros(N, np.float32), a=-0.0, n=N)
    want = _full(device, x, groups=N // 64, a=0.0, n=N)
    y = np.zeros(N, np.float32)
    scale(x, y, groups=N // 64, a=0.0, n=N)
    np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(
    "groups",
    [(N // 64 * 1.0, 1, 1), (N // 64, True, True), (N // 64, 1.0, 1)],
    ids=["float x", "bools", "float y"],
)
def test_groups_equal_to_the_kept_tuple_but_not_ints_still_raise(device, scale, groups):
    """groups=(4.0, 1, 1) or (4, True, True) is a TypeError for the full call ("groups must
    be an int or 1 to 3 ints"); it compares equal to the kept (4, 1, 1), so a repeat runs
    it silently."""
    x = _x()
    fresh = vkcore.Program(SCALE, device=device)
    with pytest.raises(TypeError, match="groups must be an int or 1 to 3 ints"):
        fresh(x, np.zeros(N, np.float32), groups=groups, a=2.0, n=N)
    _kept(scale, x, np.zeros(N, np.float32), groups=(N // 64, 1, 1), a=2.0, n=N)
    with pytest.raises(TypeError, match="groups must be an int or 1 to 3 ints"):
        scale(x, np.zeros(N, np.float32), groups=groups, a=2.0, n=N)


def test_a_true_group_count_still_raises_after_repeats_of_one_group(device, scale):
    """(True, 1, 1) == (1, 1, 1): the full call refuses a bool group count."""
    x = _x()
    _kept(scale, x, np.zeros(N, np.float32), groups=(1, 1, 1), a=2.0, n=64)
    with pytest.raises(TypeError, match="groups must be an int or 1 to 3 ints"):
        scale(x, np.zeros(N, np.float32), groups=(True, 1, 1), a=2.0, n=64)


# ---------------------------------------------------------------- regression (pass)


def test_numpy_push_values_and_nan_push_values_run_the_full_call(device, scale):
    """np.float32 / NaN values are never kept (a NaN never equals itself): every call with
    them computes its own result."""
    x = _x()
    _kept(scale, x, np.zeros(N, np.float32), a=2.0, n=N)
    for a in (np.float32(2.0), np.float64(2.0), float("nan"), float("nan")):
        y = np.zeros(N, np.float32)
        scale(x, y, groups=N // 64, a=a, n=N)
        np.testing.assert_array_equal(y.view(np.uint32), (np.float32(a) * x).view(np.uint32))
    y = np.zeros(N, np.float32)
    scale(x, y, groups=N // 64, a=2.0, n=np.uint32(N))
    np.testing.assert_array_equal(y, np.float32(2.0) * x)


def test_a_repeat_where_the_result_array_is_the_input_array(device, scale):
    """x passed to both bindings (y aliases x): each repeat scales its own last result."""
    x = _x()
    want = x.copy()
    for _ in range(6):
        scale(x, x, groups=N // 64, a=2.0, n=N)
        want = np.float32(2.0) * want
        np.testing.assert_array_equal(x, want)


def test_other_shapes_of_the_same_bytes_repeat_with_their_own_data(device, scale):
    """0-d-free reshapes (2-D, (1, N)) of the same nbytes are the same bytes to the shader."""
    x = _x()
    _kept(scale, x, np.zeros(N, np.float32), a=2.0, n=N)
    for shape in ((16, 16), (1, N), (N, 1), (2, 8, 16)):
        xs = (x + 1).reshape(shape)
        y = np.zeros(shape, np.float32)
        scale(xs, y, groups=N // 64, a=2.0, n=N)
        np.testing.assert_array_equal(y, np.float32(2.0) * xs)


def test_a_non_waiting_sequence_before_a_tensor_repeat(device, scale):
    """A repeat over Tensors right after a wait=False sequence that wrote its input: the
    resubmission goes behind the sequence's work, as the full call's does."""
    x = vkcore.asarray(_x(), device=device)
    y = vkcore.Tensor.empty((N,), np.float32, device)
    _kept(scale, x, y, a=2.0, n=N)
    with vkcore.sequence(wait=False) as seq:
        scale(x, x, groups=N // 64, a=3.0, n=N)  # x *= 3, on the device
    scale(x, y, groups=N // 64, a=2.0, n=N)
    seq.wait()
    np.testing.assert_array_equal(y.numpy(), np.float32(2.0) * (np.float32(3.0) * _x()))
    seq.release()
