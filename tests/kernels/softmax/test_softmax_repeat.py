"""Exact repeats of small softmax calls (vkcore.compute.repeat): the kept call is used
only for a call the full path would make the same way, and its results are each call's
own. Tolerances as in the kernel's contract (docs/softmax.md): 1e-6 absolute."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference

SHAPE = (3, 256)


def _x(rng, shape=SHAPE, dtype=np.float32):
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _close(y, x, axis=-1, log=False):
    ref = reference.log_softmax(x, axis=axis) if log else reference.softmax(x, axis=axis)
    assert y.dtype == np.float32 and y.shape == np.shape(x)
    np.testing.assert_allclose(y, ref, atol=1e-6 if not log else 1e-5, rtol=1e-6)


def _kept(device, x, **kwargs):
    for _ in range(3):  # a recording from the second call, the repeat kept with it
        vkcore.softmax(x, device=device, **kwargs)


def test_repeats_resubmit_and_follow_the_data(device, rng):
    _kept(device, _x(rng))
    sub = device.submitter
    hits, objects = sub.reuse_hits, device.live_objects()
    for _ in range(4):
        x = _x(rng)
        _close(vkcore.softmax(x, device=device), x)
    assert sub.reuse_hits == hits + 4
    assert device.live_objects() == objects, "a repeat allocates nothing"


def test_each_repeat_returns_a_new_array(device, rng):
    x = _x(rng)
    _kept(device, x)
    a, b = vkcore.softmax(x, device=device), vkcore.softmax(x, device=device)
    assert a is not b and not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("where", ["new array", "x itself"])
def test_a_repeat_writes_out(device, rng, where):
    x = _x(rng)
    out = np.empty(SHAPE, np.float32)
    _kept(device, x, out=out)
    x = _x(rng)
    want = reference.softmax(x)
    target = out if where == "new array" else x
    got = vkcore.softmax(x, device=device, out=target)
    assert got is target
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "change", ["axis 0", "log", "safe", "float64", "float16", "strided", "shape", "out strided"]
)
def test_anything_but_a_repeat_runs_the_full_call(device, rng, change):
    _kept(device, _x(rng))
    x = _x(rng)
    kwargs: dict = {}
    axis, log = -1, False
    if change == "axis 0":
        kwargs["axis"] = axis = 0
    elif change == "log":
        log = True
    elif change == "safe":
        kwargs["algorithm"] = "safe"
    elif change == "float64":
        x = x.astype(np.float64)
    elif change == "float16":
        x = x.astype(np.float16)
    elif change == "strided":
        x = _x(rng, (3, 512))[:, ::2]
    elif change == "shape":
        x = _x(rng, (256, 3))
    elif change == "out strided":  # refused, as by the full call
        with pytest.raises(ValueError, match="C-contiguous"):
            vkcore.softmax(x, device=device, out=np.empty((3, 512), np.float32)[:, ::2])
        return
    f = vkcore.log_softmax if log else vkcore.softmax
    y = f(x, device=device, **kwargs)
    _close(y, x.astype(np.float32), axis=axis, log=log)


def test_a_read_only_out_still_raises_after_repeats(device, rng):
    x = _x(rng)
    out = np.empty(SHAPE, np.float32)
    _kept(device, x, out=out)
    out.flags.writeable = False
    with pytest.raises(ValueError):
        vkcore.softmax(x, device=device, out=out)


def test_repeats_on_tensors_bind_the_same_buffers(device, rng):
    x = vkcore.asarray(_x(rng), device=device)
    out = vkcore.Tensor.empty(SHAPE, np.float32, device)
    for _ in range(3):
        vkcore.softmax(x, out=out)
    hits = device.submitter.reuse_hits
    x.write(_x(rng))
    assert vkcore.softmax(x, out=out) is out
    assert device.submitter.reuse_hits == hits + 1
    _close(out.numpy(), x.numpy())


@pytest.mark.parametrize("gone", ["x", "out"])
def test_a_destroyed_tensor_buffer_is_never_reused(device, rng, gone):
    """A stale kept recording is never reused after its buffers changed: new Tensors, on
    whatever addresses, are bound afresh and get their own results."""
    xs = _x(rng)
    x = vkcore.asarray(xs, device=device)
    out = vkcore.Tensor.empty(SHAPE, np.float32, device)
    for _ in range(3):
        vkcore.softmax(x, out=out)
    if gone == "x":
        x.buffer.destroy()
        xs = _x(rng)
        x = vkcore.asarray(xs, device=device)
    else:
        out.buffer.destroy()
        out = vkcore.Tensor.empty(SHAPE, np.float32, device)
    hits = device.submitter.reuse_hits
    vkcore.softmax(x, out=out)
    assert device.submitter.reuse_hits == hits, "a recording of a destroyed buffer was reused"
    _close(out.numpy(), xs)


def test_a_leased_output_returned_to_the_pool_is_not_written_by_a_repeat(device, rng):
    """softmax(x) of a Tensor leases its output from the pool; once it goes back (and is
    handed to another call), no kept call may still write it."""
    x = vkcore.asarray(_x(rng), device=device)
    out = vkcore.softmax(x)  # a leased output
    for _ in range(3):
        vkcore.softmax(x, out=out)
    del out  # back to the pool, under a new Buffer object
    xs2 = _x(rng)
    other = vkcore.softmax(vkcore.asarray(xs2, device=device))  # may get that memory
    vkcore.softmax(x, out=vkcore.Tensor.empty(SHAPE, np.float32, device))
    _close(other.numpy(), xs2)


def test_a_repeat_on_another_device_raises(device, rng):
    x = vkcore.asarray(_x(rng), device=device)
    out = vkcore.Tensor.empty(SHAPE, np.float32, device)
    for _ in range(3):
        vkcore.softmax(x, out=out)
    other = vkcore.Device(pipeline_cache=False)
    try:
        with pytest.raises(ValueError, match="device"):
            vkcore.softmax(x, out=out, device=other)
    finally:
        other.close()


def test_a_repeat_inside_a_sequence_is_recorded(device, rng):
    x = _x(rng)
    _kept(device, x)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.softmax(x, device=device)
    assert isinstance(y, vkcore.Tensor), "inside a sequence a numpy call records"
    _close(y.numpy(), x)
    seq.release()


def test_a_closed_device_raises_on_a_repeat(rng):
    dev = vkcore.Device(pipeline_cache=False)
    x = _x(rng)
    _kept(dev, x)
    dev.close()
    with pytest.raises(RuntimeError, match="closed"):
        vkcore.softmax(x, device=dev)


def _softmax_programs(device):
    from vkcore.kernels import programs

    return dict(programs.table(device, "softmax"))


def test_a_variant_switch_in_the_environment_takes_effect_at_once(rng, monkeypatch):
    """VKCORE_TEXEL=0 chooses storage-buffer loads at each call: a kept call made with
    texel loads is not a repeat of one made after the switch."""
    dev = vkcore.Device(pipeline_cache=False)
    try:
        x = _x(rng)
        monkeypatch.delenv("VKCORE_TEXEL", raising=False)
        _kept(dev, x)
        assert all(key[4] is not None for key in _softmax_programs(dev)), "texel loads"
        monkeypatch.setenv("VKCORE_TEXEL", "0")
        _close(vkcore.softmax(x, device=dev), x)
        assert any(key[4] is None for key in _softmax_programs(dev)), "storage loads ran"
    finally:
        dev.close()


def test_a_tuning_trial_takes_effect_at_once(rng):
    """A `vkcore tune` trial of another workgroup size: the kernel under trial runs, not
    the kept call of the previous size."""
    from vkcore.kernels import tuning

    dev = vkcore.Device(pipeline_cache=False)
    try:
        x = _x(rng)
        _kept(dev, x)
        sizes = {key[3] for key in _softmax_programs(dev)}
        other = 64 if 64 not in sizes else 32
        with tuning.trial(dev, "softmax_workgroup", other):
            _close(vkcore.softmax(x, device=dev), x)
        assert other in {key[3] for key in _softmax_programs(dev)}, "the trial's size ran"
    finally:
        dev.close()
