"""vkcore.sequence: several calls in one submission, non-blocking submission, replay."""

from __future__ import annotations

import gc
import threading
import time
import warnings

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.device.submit.submitter import Submitter
from vkcore.tools.bench.program_cases import TINY

ATOL = 1e-6


@pytest.fixture
def submissions(monkeypatch):
    """How many times anything was submitted (each vkQueueSubmit of a call)."""
    count = [0]
    real = Submitter._submit_and_wait

    def spy(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Submitter, "_submit_and_wait", spy)
    return count


def _x(rng, shape=(4, 1000)):
    return rng.standard_normal(shape).astype(np.float32)


def test_kernels_and_programs_mixed_in_one_submission(device, rng, submissions):
    x = _x(rng)
    xt = vkcore.asarray(x, device=device)
    scale = vkcore.Program(TINY, device=device)
    scaled = vkcore.Tensor.empty(x.shape, np.float32, device)
    w = (rng.standard_normal((64, 1000)) * 0.1).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    h = vkcore.asarray(x[0], device=device)
    submissions[0] = 0
    with vkcore.sequence(device=device) as seq:
        scale(xt, scaled, groups=-(-x.size // 64), a=0.5, n=x.size)
        probs = vkcore.softmax(scaled)
        logp = vkcore.log_softmax(probs)
        logits = vkcore.matvec(qt, h)
        top = vkcore.softmax(logits)
        assert submissions[0] == 0  # nothing submitted while recording
    assert submissions[0] == 0 and seq.state == "done"  # the sequence's own submission
    assert len(seq.steps) >= 5
    want = reference.softmax(np.float32(0.5) * x)
    np.testing.assert_allclose(probs.numpy(), want, atol=ATOL)
    np.testing.assert_allclose(logp.numpy(), reference.log_softmax(want), atol=1e-5)
    want_logits = vkcore.matvec(qt, x[0])
    np.testing.assert_array_equal(logits.numpy(), want_logits)
    np.testing.assert_allclose(top.numpy(), reference.softmax(want_logits), atol=ATOL)
    qt.release()


def test_numpy_inputs_are_uploaded_when_recorded_and_give_tensors(device, rng):
    x = _x(rng)
    with vkcore.sequence(device=device):
        y = vkcore.softmax(x, device=device)
        values, indices = vkcore.topk(x, 5, device=device)
    assert isinstance(y, vkcore.Tensor) and isinstance(indices, vkcore.Tensor)
    np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)
    want_v, want_i = reference.topk(x, 5)
    np.testing.assert_array_equal(values.numpy(), want_v)
    np.testing.assert_array_equal(indices.numpy(), want_i)


def test_uploaded_numpy_inputs_are_the_values_at_recording(device, rng):
    x = _x(rng)
    want = reference.softmax(x)
    with vkcore.sequence(device=device):
        y = vkcore.softmax(x, device=device)
        x[:] = 0  # after recording: the uploaded copy is what runs
    np.testing.assert_allclose(y.numpy(), want, atol=ATOL)


def test_reading_a_result_before_submission_is_an_error(device, rng):
    xt = vkcore.asarray(_x(rng), device=device)
    seq = vkcore.sequence(device=device)
    with pytest.raises(RuntimeError, match="before its sequence was submitted"), seq:
        y = vkcore.softmax(xt)
        y.numpy()


def test_a_numpy_result_inside_a_sequence_is_refused_not_wrong(device, rng):
    prog = vkcore.Program(TINY, device=device)
    x = np.ones(256, np.float32)
    seq = vkcore.sequence(device=device)
    with pytest.raises(TypeError, match="inside a sequence pass a vkcore.Tensor"), seq:
        prog(x, np.empty_like(x), groups=4, a=1.0, n=256)


def test_writing_a_buffer_the_recording_uses_is_an_error(device, rng):
    x = _x(rng)
    xt = vkcore.asarray(x, device=device)
    with (
        pytest.raises(RuntimeError, match="being recorded"),
        vkcore.sequence(device=device),
    ):
        vkcore.softmax(xt)
        xt.write(x * 2)


def test_replay_on_new_data(device, rng, submissions):
    x = _x(rng)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.softmax(xt)
        z = vkcore.log_softmax(y)
    for scale in (2.0, -1.0, 0.25):
        xt.write(x * np.float32(scale))
        seq.run()
        want = reference.softmax(x * np.float32(scale))
        np.testing.assert_allclose(y.numpy(), want, atol=ATOL)
        np.testing.assert_allclose(z.numpy(), reference.log_softmax(want), atol=1e-5)


def test_several_in_flight_with_inputs_released_meanwhile(device, rng):
    seqs, outs, wants, inputs = [], [], [], []
    for _ in range(4):
        x = _x(rng, (8, 4096))
        xt = vkcore.asarray(x, device=device)
        with vkcore.sequence(wait=False, device=device) as seq:
            outs.append(vkcore.softmax(vkcore.softmax(xt)))
        wants.append(reference.softmax(reference.softmax(x)))
        inputs.append(xt.buffer)
        xt.buffer.destroy()  # released by the user while the work may still run
        del xt
        seqs.append(seq)
    gc.collect()
    for seq, y, want, buf in zip(seqs, outs, wants, inputs, strict=True):
        np.testing.assert_allclose(y.numpy(), want, atol=ATOL)  # waits for it
        assert seq.done()
        assert buf.alive  # deferred: the sequence still holds it
        seq.release()
        assert not buf.alive  # freed once no sequence holds it


def test_wait_and_done_after_a_non_waiting_submission(device, rng):
    xt = vkcore.asarray(_x(rng, (64, 32000)), device=device)
    with vkcore.sequence(wait=False, device=device) as seq:
        y = vkcore.softmax(xt)
    assert seq.state in ("submitted", "done")
    seq.wait()
    assert seq.done()
    np.testing.assert_allclose(y.numpy(), reference.softmax(xt.numpy()), atol=ATOL)


def test_an_immediate_call_after_a_non_waiting_one_sees_its_result(device, rng):
    x = _x(rng, (16, 8192))
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(wait=False, device=device):
        y = vkcore.softmax(xt)
    z = vkcore.log_softmax(y)  # submitted after the sequence: starts after it
    np.testing.assert_allclose(z.numpy(), reference.log_softmax(reference.softmax(x)), atol=1e-5)


def test_an_exception_inside_the_block_discards_the_recording(device, rng, submissions):
    xt = vkcore.asarray(_x(rng), device=device)
    gc.collect()
    before = device.live_objects()
    submissions[0] = 0
    with pytest.raises(KeyError), vkcore.sequence(device=device) as seq:
        vkcore.softmax(xt)
        raise KeyError("in the block")
    assert seq.state == "discarded" and submissions[0] == 0
    with pytest.raises(RuntimeError, match="nothing to replay"):
        seq.run()
    del seq
    gc.collect()
    after = device.live_objects()
    # none left behind (kept recordings of other calls may have gone with pool buffers)
    assert after["descriptor_sets"] <= before["descriptor_sets"]
    assert after["buffers"] <= before["buffers"] + 2  # at most the pool's free ones
    np.testing.assert_allclose(vkcore.softmax(xt).numpy(), reference.softmax(xt.numpy()), atol=ATOL)


def test_misuse_is_refused(device, rng):
    xt = vkcore.asarray(_x(rng), device=device)
    seq = vkcore.sequence(device=device)
    with pytest.raises(RuntimeError, match="end its with block"):
        seq.run()
    with seq:
        vkcore.softmax(xt)
        inner = vkcore.sequence(device=device)
        with pytest.raises(RuntimeError, match="already recording"), inner:
            pass
    with pytest.raises(RuntimeError, match="already used"), seq:
        pass
    with pytest.raises(TypeError, match="wait must be a bool"):
        vkcore.sequence(wait=1, device=device)


def test_threads_record_their_own_sequences(device, rng):
    """Each thread's calls go to its own sequence; another thread's immediate calls are
    not captured by it."""
    xs = [_x(np.random.default_rng(i), (4, 2048)) for i in range(4)]
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            xt = vkcore.asarray(xs[i], device=device)
            if i % 2:
                with vkcore.sequence(device=device):
                    y = vkcore.softmax(vkcore.log_softmax(xt))
                results[i] = y.numpy()
            else:
                results[i] = vkcore.softmax(vkcore.log_softmax(xs[i], device=device))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, x in enumerate(xs):
        want = reference.softmax(reference.log_softmax(x))
        np.testing.assert_allclose(np.asarray(results[i]), want, atol=1e-5)


def test_closing_the_device_with_a_sequence_in_flight(rng):
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        xt = vkcore.asarray(_x(rng, (64, 8192)), device=dev)
        with vkcore.sequence(wait=False, device=dev):
            vkcore.softmax(xt)
    assert not [m for m in dev.validation_messages if "rror" in m]


@pytest.mark.parametrize("inputs", ["tensor", "numpy"])
def test_closing_the_device_while_a_sequence_records(rng, inputs):
    """The buffers the recording holds are freed with the device (none left alive at
    vkDestroyDevice), and the block ends without submitting."""
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        x = _x(rng)
        xt = vkcore.asarray(x, device=dev) if inputs == "tensor" else x
        with vkcore.sequence(device=dev) as seq:
            vkcore.softmax(xt)
            vkcore.topk(xt, 5)
            dev.close()
    assert seq.state == "released"
    assert not [m for m in dev.validation_messages if "rror" in m]


@pytest.mark.parametrize(
    "data, error, match",
    [
        (np.zeros((2, 3), np.float32), ValueError, "shape"),
        (np.zeros((4, 1000), np.complex64), TypeError, "float32"),
        (np.full((4, 1000), 0.1 + 0.2j), TypeError, "float32"),
    ],
)
def test_tensor_write_refuses_what_does_not_fit(device, data, error, match):
    t = vkcore.Tensor.empty((4, 1000), np.float32, device)
    with pytest.raises(error, match=match):
        t.write(data)


def test_tensor_write_takes_exact_conversions(device):
    t = vkcore.Tensor.empty((3,), np.float32, device)
    t.write(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])
    t.write([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(t.numpy(), np.array([0.5, -1.0, 2.0], np.float32))
    t.write([0.1, 1e39, -1e39])  # floats round into a float dtype, as asarray stores them
    np.testing.assert_array_equal(t.numpy(), np.array([0.1, np.inf, -np.inf], np.float32))


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "int8", "int16", "int32"])
def test_tensor_write_converts_integers_between_signed_and_unsigned_exactly(device, dtype):
    t = vkcore.Tensor.empty((3,), dtype, device)
    for given in ([1, 2, 3], np.array([4, 5, 6], np.int8), np.array([7, 8, 9], np.uint64)):
        t.write(given)
        np.testing.assert_array_equal(t.numpy(), np.asarray(given))
    info = np.iinfo(dtype)
    for outside in ([info.max + 1, 0, 0], [info.min - 1, 0, 0]):
        with pytest.raises(ValueError, match="exactly"):
            t.write(outside)
    with pytest.raises(TypeError, match=dtype):
        t.write([0.5, 1.0, 2.0])  # floats into integers: another kind, refused as before


def test_tensor_write_out_of_range_float16_is_infinite_without_numpy_warnings(device):
    t = vkcore.Tensor.empty((2,), np.float16, device)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t.write([1e6, -70000])  # beyond float16's range: infinities, as asarray stores them
    np.testing.assert_array_equal(t.numpy(), np.array([np.inf, -np.inf], np.float16))


def test_sample_inside_a_sequence_reads_its_tokens_after(device, rng):
    logits = (rng.standard_normal((3, 500)) * 3).astype(np.float32)
    logits[2, 7] = np.nan
    lt = vkcore.asarray(logits, device=device)
    with vkcore.sequence(device=device):
        drawn = vkcore.sample(lt, top_k=20, seed=11)
        clean = vkcore.sample(logits[:2], top_k=20, seed=11, device=device)
        greedy = vkcore.sample(logits[:2], temperature=0.0, device=device)
    np.testing.assert_array_equal(clean.numpy(), reference.sample(logits[:2], top_k=20, seed=11))
    np.testing.assert_array_equal(greedy.numpy(), np.argmax(logits[:2], axis=-1))
    with pytest.raises(ValueError, match=r"logits row 2 has a NaN"):
        drawn.numpy()  # the row without a distribution is reported when read


def test_a_sequence_released_inside_its_block_submits_nothing(device, rng, submissions):
    xt = vkcore.asarray(_x(rng), device=device)
    with vkcore.sequence(device=device) as seq:
        vkcore.softmax(xt)
        seq.release()
        with pytest.raises(RuntimeError, match="not recording"):
            vkcore.softmax(xt)
    assert seq.state == "released"
    with pytest.raises(RuntimeError, match="nothing to replay"):
        seq.run()
    np.testing.assert_allclose(vkcore.softmax(xt).numpy(), reference.softmax(xt.numpy()), atol=ATOL)


def test_device_seconds_of_a_sequence(device, rng):
    """Timestamps around the steps: positive, within the wall time, renewed by a replay,
    None before submission and after release."""
    x = vkcore.asarray(_x(rng, (64, 4096)), device=device)
    with vkcore.sequence(device=device, wait=False, timed=True) as seq:
        probs = vkcore.softmax(x)
        vkcore.log_softmax(probs)
        assert seq.device_seconds is None  # recording: nothing ran
    start = time.perf_counter()
    first = seq.device_seconds  # waits for the submission
    wall = time.perf_counter() - start
    assert first is not None and first > 0
    assert seq.state == "done"
    start = time.perf_counter()
    seq.run()
    replay_wall = time.perf_counter() - start
    again = seq.device_seconds
    assert again is not None and 0 < again <= replay_wall
    assert first <= wall + replay_wall + 1.0  # no stale or garbage tick count
    seq.release()
    assert seq.device_seconds is None


def test_device_seconds_is_none_without_timestamps(device, rng, monkeypatch):
    monkeypatch.setattr(device.submitter, "timestamps", False)
    x = vkcore.asarray(_x(rng), device=device)
    with vkcore.sequence(device=device, timed=True) as seq:
        vkcore.softmax(x)
    assert seq.device_seconds is None
    seq.release()


@pytest.mark.parametrize("how", ["default", "timed=False", "timed device, timed=False"])
def test_an_untimed_sequence_records_no_timestamp(device, rng, monkeypatch, how):
    """Timestamps only when asked: an untimed sequence takes no query pool, writes no
    timestamp and reports no device time; a timed device times sequences by default."""
    written = []
    real = device.lib

    class Spy:
        def __getattr__(self, name):
            if name == "vkCmdWriteTimestamp":
                written.append(name)
            return getattr(real, name)

    x = vkcore.asarray(_x(rng), device=device)
    device.timed = how == "timed device, timed=False"
    monkeypatch.setattr(device, "lib", Spy())
    try:
        timed = None if how == "default" else False
        with vkcore.sequence(device=device, timed=timed) as seq:
            vkcore.softmax(x)
        seq.run()
    finally:
        device.timed = False
    assert written == [] and seq.device_seconds is None
    seq.release()


def test_a_timed_device_times_its_sequences_and_calls(device, rng):
    x = vkcore.asarray(_x(rng), device=device)
    device.timed = True
    try:
        with vkcore.sequence(device=device) as seq:
            vkcore.softmax(x)
        vkcore.softmax(x)
        call_seconds = device.last_device_seconds
    finally:
        device.timed = False
    assert seq.device_seconds is not None and seq.device_seconds > 0
    assert call_seconds is not None and call_seconds > 0
    vkcore.softmax(x)
    assert device.last_device_seconds is None  # untimed again
    seq.release()


@pytest.mark.parametrize("bad", ["yes", 1, 0.0])
def test_timed_must_be_a_bool(device, bad):
    with pytest.raises(TypeError, match="timed"):
        vkcore.sequence(device=device, timed=bad)
    with pytest.raises(TypeError, match="timed"):
        device.timed = bad


def _interrupt_after(monkeypatch, call):
    """KeyboardInterrupt raised as the submission module (which makes fences, submits
    and waits for sequences and calls alike) checks the result of ``call``: what a
    Ctrl-C arriving just after that driver call returned does."""
    import sys

    modules = [sys.modules["vkcore.device.submit.submission"]]
    real = modules[0]._vk

    class Interrupting:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def check(result, name):
            value = real.check(result, name)
            if name == call:
                for module in modules:
                    monkeypatch.setattr(module, "_vk", real)  # once
                raise KeyboardInterrupt(f"after {name}")
            return value

    for module in modules:
        monkeypatch.setattr(module, "_vk", Interrupting())


@pytest.mark.parametrize("call", ["vkCreateFence", "vkResetFences", "vkQueueSubmit"])
def test_ctrl_c_at_the_end_of_the_block_frees_nothing_in_use(device, rng, monkeypatch, call):
    """Wherever the interrupt lands, nothing the submitted work uses is freed while it
    runs (the validation layer reports a freed in-use object; lavapipe crashed), and
    the device keeps giving right answers."""
    x = vkcore.asarray(_x(rng, (8, 30_000)), device=device)
    monkeypatch.setitem(device.submitter._spare, "fence", [])  # a fence is created
    _interrupt_after(monkeypatch, call)
    with pytest.raises(KeyboardInterrupt), vkcore.sequence(device=device) as seq:
        for _ in range(4):
            vkcore.topk(vkcore.softmax(x), 40)
    assert seq.state == "discarded"
    del seq
    gc.collect()
    want = reference.softmax_topk(x.numpy(), 40)
    for _ in range(3):
        probs, idx = vkcore.softmax_topk(x, 40)
        np.testing.assert_array_equal(idx.numpy(), want[1])
    device.check()


def test_ctrl_c_after_a_replay_is_submitted(device, rng, monkeypatch):
    x = vkcore.asarray(_x(rng), device=device)
    with vkcore.sequence(device=device) as seq:
        probs = vkcore.softmax(x)
    _interrupt_after(monkeypatch, "vkQueueSubmit")
    with pytest.raises(KeyboardInterrupt):
        seq.run()
    assert seq.state in ("submitted", "done")
    np.testing.assert_allclose(probs.numpy(), reference.softmax(x.numpy()), atol=ATOL)
    seq.release()
    device.check()
