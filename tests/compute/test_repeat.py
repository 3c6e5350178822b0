"""Exact repeats (vkcore.compute.repeat): a call that repeats a kept one resubmits the
device's recording, and only such a call. Each test makes a call kept (three calls: the
device keeps a recording from the second) and then changes one thing a repeat must not
overlook: the data, a dtype, a size, a layout, a push value's type, a Tensor's buffer, the
held staging buffer, the timing, a sequence, a closed device, another thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import vkcore

N = 256


def _kept(scale, x, y, **push):
    for _ in range(3):
        scale(x, y, groups=N // 64, **push)
    assert scale._kept is not None, "three identical calls keep the latest"


def _fresh(rng, n=N, dtype=np.float32):
    return rng.standard_normal(n).astype(dtype)


def test_a_repeat_computes_each_calls_own_data(device, rng, scale):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    hits = device.submitter.reuse_hits
    objects = device.live_objects()
    for a in (2.0, 2.0, 2.0):
        x = _fresh(rng)
        y = np.full(N, np.nan, np.float32)
        scale(x, y, groups=N // 64, a=a, n=N)
        np.testing.assert_array_equal(y, np.float32(a) * x)
    assert device.submitter.reuse_hits == hits + 3
    assert device.live_objects() == objects, "a repeat allocates nothing"


@pytest.mark.parametrize(
    "change",
    ["a", "n", "a as int", "groups tuple", "push bytes", "float64 x", "longer x", "y strided"],
)
def test_anything_but_a_repeat_runs_the_full_call(device, rng, scale, change):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    x = _fresh(rng)
    want = np.float32(2.0) * x
    kwargs = {"groups": N // 64, "a": 2.0, "n": N}
    if change == "a":
        kwargs["a"] = 3.0
        want = np.float32(3.0) * x
    elif change == "n":
        kwargs["n"] = N // 2
        want[N // 2 :] = 0
    elif change == "a as int":
        kwargs["a"] = 2
    elif change == "groups tuple":
        kwargs["groups"] = (N // 64, 1, 1)
    elif change == "push bytes":
        del kwargs["a"], kwargs["n"]
        kwargs["push"] = np.array([2.0], np.float32).tobytes() + np.uint32(N).tobytes()
    elif change == "float64 x":
        x = x.astype(np.float64)  # converted to float32 by the full call
    elif change == "longer x":
        x = np.concatenate([x, _fresh(rng, 64)])
    y_given = np.zeros(N, np.float32)
    if change == "y strided":
        big = np.zeros(2 * N, np.float32)
        y_given = big[::2]
        with pytest.raises(ValueError, match="C-contiguous"):
            scale(x, y_given, **kwargs)
        return
    scale(x, y_given, **kwargs)
    np.testing.assert_array_equal(y_given, want)


def test_a_push_value_of_the_wrong_type_still_raises_after_repeats(rng, scale):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    with pytest.raises(TypeError, match="n"):
        scale(x, y, groups=N // 64, a=2.0, n=float(N))  # equal, but a float for a uint
    with pytest.raises(TypeError):
        scale(x, y, groups=N // 64, a=2.0, n=N, m=1)  # a member the block does not have


def test_a_read_only_result_array_still_raises_after_repeats(rng, scale):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    y.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        scale(x, y, groups=N // 64, a=2.0, n=N)


def test_a_result_of_another_dtype_still_raises_after_repeats(rng, scale):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    with pytest.raises(TypeError, match="float32"):
        scale(x, np.zeros(N, np.int32), groups=N // 64, a=2.0, n=N)


def test_sizes_alternating_replace_the_held_buffers_and_stay_right(rng, scale):
    """A call of another size replaces the held staging buffer (the old one goes back to
    the pool, where another call may take it): the kept call must go with it."""
    for n in (N, N, N, 2 * N, N, 2 * N, 2 * N, 2 * N, N, N, N):
        x, y = _fresh(rng, n), np.zeros(n, np.float32)
        scale(x, y, groups=n // 64, a=2.0, n=n)
        np.testing.assert_array_equal(y, np.float32(2.0) * x)
        vkcore.softmax(_fresh(rng, n))  # borrows from the same pool


def test_a_repeat_on_tensors_binds_the_same_buffers(device, rng, scale):
    x = vkcore.asarray(_fresh(rng), device=device)
    y = vkcore.Tensor.empty((N,), np.float32, device)
    _kept(scale, x, y, a=2.0, n=N)
    hits = device.submitter.reuse_hits
    scale(x, y, groups=N // 64, a=2.0, n=N)
    assert device.submitter.reuse_hits == hits + 1
    np.testing.assert_array_equal(y.numpy(), np.float32(2.0) * x.numpy())


@pytest.mark.parametrize("gone", ["x", "y"])
def test_a_released_tensor_is_never_reused_by_a_repeat(device, rng, scale, gone):
    """A stale kept recording is never reused after its buffers changed: a released
    Tensor's buffer drops the recording, and new Tensors (which may land on the same
    addresses and ids) are bound afresh."""
    xs = _fresh(rng)
    x = vkcore.asarray(xs, device=device)
    y = vkcore.Tensor.empty((N,), np.float32, device)
    _kept(scale, x, y, a=2.0, n=N)
    kept = scale._kept.repeat.kept
    if gone == "x":
        x.buffer.destroy()
        xs = _fresh(rng)
        x = vkcore.asarray(xs, device=device)
    else:
        y.buffer.destroy()
        y = vkcore.Tensor.empty((N,), np.float32, device)
    assert kept.released, "releasing a bound buffer drops the recording"
    hits = device.submitter.reuse_hits
    scale(x, y, groups=N // 64, a=2.0, n=N)
    assert device.submitter.reuse_hits == hits, "a recording of a released buffer was reused"
    np.testing.assert_array_equal(y.numpy(), np.float32(2.0) * xs)


def test_an_evicted_recording_is_recorded_again(device, rng, scale):
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    device.submitter.drop_recorded()  # what eviction or a full descriptor pool does
    for _ in range(3):
        x = _fresh(rng)
        scale(x, y, groups=N // 64, a=2.0, n=N)
        np.testing.assert_array_equal(y, np.float32(2.0) * x)


def test_a_repeat_inside_a_sequence_is_recorded_not_run(device, rng, scale):
    x = vkcore.asarray(_fresh(rng), device=device)
    y = vkcore.Tensor.empty((N,), np.float32, device)
    _kept(scale, x, y, a=2.0, n=N)
    y.write(np.zeros(N, np.float32))
    with vkcore.sequence(device=device) as seq:
        scale(x, y, groups=N // 64, a=3.0, n=N)
        scale(x, y, groups=N // 64, a=2.0, n=N)  # the kept call's arguments
    # Run at once instead of recorded, the repeat would be overwritten by the 3x step.
    np.testing.assert_array_equal(y.numpy(), np.float32(2.0) * x.numpy())
    seq.release()


def test_timing_switched_on_records_afresh(device, rng, scale):
    if not device.submitter.timestamps:
        pytest.fail("lavapipe has timestamps; this test needs them")
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    sub = device.submitter
    sub.timed = True
    try:
        for _ in range(3):
            scale(x, y, groups=N // 64, a=2.0, n=N)
            assert device.last_device_seconds is not None, "a timed call has its seconds"
    finally:
        sub.timed = False
    scale(x, y, groups=N // 64, a=2.0, n=N)
    assert device.last_device_seconds is None
    np.testing.assert_array_equal(y, np.float32(2.0) * x)


def test_a_closed_device_raises_as_the_full_call_does(rng):
    from adversarial_programs import SCALE

    dev = vkcore.Device(pipeline_cache=False)
    prog = vkcore.Program(SCALE, device=dev)
    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(prog, x, y, a=2.0, n=N)
    dev.close()
    with pytest.raises(RuntimeError, match="closed"):
        prog(x, y, groups=N // 64, a=2.0, n=N)


def test_threads_repeating_calls_of_two_sizes_each_get_their_own_results(device, scale):
    errors: list[str] = []

    def worker(seed: int, n: int) -> None:
        r = np.random.default_rng(seed)
        for _ in range(40):
            x, y = r.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)
            scale(x, y, groups=n // 64, a=2.0, n=n)
            if not np.array_equal(y, np.float32(2.0) * x):
                errors.append(f"thread {seed}: wrong result")
                return

    threads = [threading.Thread(target=worker, args=(s, N * (1 + s % 2))) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_whole_buffer_copies_refuse_what_they_cannot_copy(device, rng):
    """Buffer.write/read of a whole buffer through the kept view; the plain paths for
    anything but an exact whole."""
    from vkcore.device.memory.buffer import Buffer

    buf = Buffer(device, N * 4)
    x = _fresh(rng)
    buf.write(x)
    out = np.zeros(N, np.float32)
    buf.read(out)
    np.testing.assert_array_equal(out, x)
    as_ints = np.zeros(N, np.uint32)
    buf.read(as_ints)  # another dtype: a new view of the same bytes
    np.testing.assert_array_equal(as_ints, x.view(np.uint32))
    with pytest.raises(ValueError, match="writable"):
        frozen = np.zeros(N, np.float32)
        frozen.flags.writeable = False
        buf.read(frozen)
    with pytest.raises(ValueError, match="does not fit"):
        buf.write(_fresh(rng, 2 * N))
    buf.destroy()
    with pytest.raises(RuntimeError, match="released"):
        buf.write(x)
    with pytest.raises(RuntimeError, match="released"):
        buf.read(out)


def test_a_dropped_repeat_refuses_and_copies_nothing(device, rng, scale):
    """A thread that found a kept call just before another thread dropped it (its staging
    buffers back in the pool, perhaps lent to another call) must not copy into them."""
    from vkcore.compute.repeat import Repeats

    x, y = _fresh(rng), np.zeros(N, np.float32)
    _kept(scale, x, y, a=2.0, n=N)
    repeat = scale._kept.repeat
    table = Repeats()
    table.put(device, "call", repeat)
    table.drop(device, "call")  # what an eviction does
    staged = repeat.inputs[0][1]
    before = np.empty(N, np.float32)
    staged.read(before)
    assert not repeat.run((_fresh(rng), y))
    after = np.empty(N, np.float32)
    staged.read(after)
    np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("given", ["float64", "list", "big-endian", "strided"])
def test_a_converted_argument_is_converted_on_every_call(device, rng, scale, given):
    """An argument the full call converts (or copies) is not bound as its own bytes: a
    repeat of such a call must convert again, never copy the raw bytes."""

    def arg(values):
        if given == "float64":
            return values.astype(np.float64)
        if given == "list":
            return values.tolist()
        if given == "big-endian":
            return values.astype(">f4")
        wide = np.zeros(2 * N, np.float32)
        wide[::2] = values
        return wide[::2]

    y = np.zeros(N, np.float32)
    for _ in range(5):
        xs = _fresh(rng)
        scale(arg(xs), y, groups=N // 64, a=2.0, n=N)
        np.testing.assert_array_equal(y, np.float32(2.0) * xs)


def test_a_structured_array_is_copied_with_its_padding(device):
    """A block of mixed scalar types takes any dtype's bytes: a structured array with
    padding is copied whole, padding included, on a repeat as on the full call."""
    from vkcore.device.memory.buffer import Buffer

    padded = np.dtype({"names": ["a"], "formats": ["<u4"], "offsets": [0], "itemsize": 8})
    arr = np.zeros(32, padded)
    arr.view(np.uint32)[:] = np.arange(64, dtype=np.uint32)  # fields and padding alike
    buf = Buffer(device, arr.nbytes)
    for _ in range(3):
        buf.write(arr)
        back = np.zeros(32, padded)
        buf.read(back)
        np.testing.assert_array_equal(back.view(np.uint32), np.arange(64, dtype=np.uint32))
    buf.destroy()
