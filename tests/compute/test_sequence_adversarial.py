"""Adversarial checks of vkcore.Program calls (the numpy fast path, threads, devices) and
of vkcore.sequence (README "Your own shaders" and "Sequences"), through the public API.

Every result is compared with numpy or vkcore.reference: softmax within 1e-6, integer
results (and results of a program that only copies or scales by a power of two) bit for
bit. The session device fails a test on any validation message.
"""

from __future__ import annotations

import functools
import gc
import threading

import numpy as np
import pytest
from adversarial_programs import COPY_WORDS, SCALE, groups_for, run_threads  # noqa: F401

import vkcore
from vkcore import reference

ATOL = 1e-6

# ---------------------------------------------------------------- Program, numpy fast path


def test_fast_path_gives_the_general_paths_bytes_for_other_dtypes_and_shapes(device, scale):
    """Same byte size, other dtype or shape after a held-staging call: each call gives
    what a fresh Program (no held staging) computes on the same arrays, the values of x
    converted to float32 (float x[]), never its bytes reinterpreted."""
    rng = np.random.default_rng(1)
    x32 = rng.standard_normal(256).astype(np.float32)
    variants = [
        x32,
        x32.reshape(16, 16),
        x32.view(np.int32),  # same bytes, another dtype
        rng.standard_normal(512).astype(np.float16),  # same byte size, other values
        rng.integers(0, 255, 1024, dtype=np.uint8),
    ]
    for x in variants:
        y = np.zeros(256, np.float32)
        scale(x, y, groups=4, a=2.0, n=256)
        fresh = vkcore.Program(SCALE, device=device)
        want = np.zeros(256, np.float32)
        fresh(x, want, groups=4, a=2.0, n=256)
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(y, np.float32(2) * x.reshape(-1)[:256].astype(np.float32))


def test_fast_path_then_non_contiguous_and_read_only_arrays(scale):
    base = np.arange(512, dtype=np.float32)
    x = base[:256].copy()
    y = np.zeros(256, np.float32)
    scale(x, y, groups=4, a=2.0, n=256)
    scale(x, y, groups=4, a=2.0, n=256)  # the held path
    strided = base[::2]  # 256 floats, same byte size, not contiguous
    scale(strided, y, groups=4, a=2.0, n=256)
    np.testing.assert_array_equal(y, 2 * strided)
    reversed_x = base[255::-1]
    scale(reversed_x, y, groups=4, a=3.0, n=256)
    np.testing.assert_array_equal(y, 3 * reversed_x)
    ro = x.copy()
    ro.flags.writeable = False
    scale(ro, y, groups=4, a=0.5, n=256)  # a read-only input is fine
    np.testing.assert_array_equal(y, 0.5 * x)
    y_ro = np.zeros(256, np.float32)
    y_ro.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        scale(x, y_ro, groups=4, a=1.0, n=256)
    assert not y_ro.any()
    with pytest.raises(ValueError, match="C-contiguous"):
        scale(x, np.zeros(512, np.float32)[::2], groups=4, a=1.0, n=256)
    scale(x, y, groups=4, a=-1.0, n=256)  # and the fast path again after the refusals
    np.testing.assert_array_equal(y, -x)


def test_one_array_for_the_read_and_the_written_binding(scale):
    x = np.arange(256, dtype=np.float32)
    want = x.copy()
    for _ in range(3):  # general path, then the held path
        scale(x, x, groups=4, a=2.0, n=256)
        want *= 2
        np.testing.assert_array_equal(x, want)


def test_push_values_and_groups_change_between_calls(scale):
    x = np.arange(256, dtype=np.float32)
    for a, n, g in [(2.0, 256, 4), (3.0, 256, 4), (3.0, 100, 4), (3.0, 256, 1), (2.0, 256, 4)]:
        y = np.full(256, -7.0, np.float32)
        scale(x, y, groups=g, a=a, n=n)
        reach = min(n, 64 * g)
        want = np.full(256, -7.0, np.float32)
        want[:reach] = np.float32(a) * x[:reach]
        np.testing.assert_array_equal(y, want)


def test_sizes_alternate_between_held_and_pooled_staging(scale):
    rng = np.random.default_rng(2)
    for n in [256, 64, 256, 20000, 256, 20000, 64, 256]:  # 80 KB: past the held limit
        x = rng.standard_normal(n).astype(np.float32)
        y = np.zeros(n, np.float32)
        scale(x, y, groups=groups_for(n), a=2.0, n=n)
        np.testing.assert_array_equal(y, 2 * x)


def test_a_tensor_destroyed_between_calls(device, scale):
    x = np.arange(256, dtype=np.float32)
    xt = vkcore.asarray(x, device=device)
    yt = vkcore.Tensor.empty((256,), np.float32, device)
    scale(xt, yt, groups=4, a=2.0, n=256)
    np.testing.assert_array_equal(yt.numpy(), 2 * x)
    xt.buffer.destroy()
    with pytest.raises(ValueError, match="released"):
        scale(xt, yt, groups=4, a=2.0, n=256)
    with pytest.raises((ValueError, RuntimeError), match="released"):
        scale.record(xt, yt, groups=4, a=2.0, n=256)
    x2 = vkcore.asarray(x + 1, device=device)  # may reuse the freed memory
    scale(x2, yt, groups=4, a=2.0, n=256)
    np.testing.assert_array_equal(yt.numpy(), 2 * (x + 1))
    # a kernel result (a pooled, leased buffer) as input, destroyed, then another of its size
    probs = vkcore.softmax(vkcore.asarray(np.zeros((1, 256), np.float32), device=device))
    scale(probs, yt, groups=4, a=256.0, n=256)
    np.testing.assert_array_equal(yt.numpy(), np.ones(256, np.float32))
    probs.buffer.destroy()
    probs2 = vkcore.softmax(vkcore.asarray(np.zeros((1, 256), np.float32) - 1, device=device))
    scale(probs2, yt, groups=4, a=512.0, n=256)
    np.testing.assert_array_equal(yt.numpy(), np.full(256, 2.0, np.float32))


def test_one_program_called_from_several_threads(device, scale):
    """Per thread its own array sizes (the held staging buffers change hands between
    calls of different sizes) and its own scale; every result must be its own."""
    errors: list[BaseException] = []
    wrong: list[str] = []
    sizes = [256, 512, 64, 256, 1000, 17000]

    def work(t: int) -> None:
        try:
            rng = np.random.default_rng(100 + t)
            n = sizes[t]
            for i in range(40):
                x = rng.standard_normal(n).astype(np.float32)
                y = np.zeros(n, np.float32)
                a = float(t + 1) * (1 if i % 2 else -1)
                scale(x, y, groups=groups_for(n), a=a, n=n)
                if not np.array_equal(y, np.float32(a) * x):
                    wrong.append(f"thread {t} call {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads([functools.partial(work, t) for t in range(len(sizes))])
    assert not errors, errors
    assert not wrong, wrong


def test_programs_on_two_devices(device, scale):
    x = np.arange(256, dtype=np.float32)
    with vkcore.Device(validation=True, pipeline_cache=False) as other:
        p2 = vkcore.Program(SCALE, device=other)
        y1, y2 = np.zeros(256, np.float32), np.zeros(256, np.float32)
        for a in (2.0, 4.0):
            scale(x, y1, groups=4, a=a, n=256)
            p2(x, y2, groups=4, a=-a, n=256)
            np.testing.assert_array_equal(y1, a * x)
            np.testing.assert_array_equal(y2, -a * x)
        t_other = vkcore.asarray(x, device=other)
        with pytest.raises(ValueError, match="another device"):
            scale(t_other, y1, groups=4, a=1.0, n=256)
        with vkcore.sequence(device=other) as seq:  # records the other device's calls only
            out_other = vkcore.Tensor.empty((256,), np.float32, other)
            p2(t_other, out_other, groups=4, a=3.0, n=256)
            scale(x, y1, groups=4, a=5.0, n=256)  # this device: runs at once
            np.testing.assert_array_equal(y1, 5 * x)
        assert seq.state == "done"
        np.testing.assert_array_equal(out_other.numpy(), 3 * x)
        del p2, t_other, out_other, seq
        gc.collect()
        assert not other.validation_messages


# ---------------------------------------------------------------- sequences: kernels


def test_long_rows_that_split_several_times_in_one_sequence(device):
    rng = np.random.default_rng(3)
    xs = [(rng.standard_normal((2, 70001)) * 4).astype(np.float32) for _ in range(3)]
    xs[1][0] = np.sort(xs[1][0])  # the maximum at the end of the row
    with vkcore.sequence(device=device):
        outs = [vkcore.softmax(x, device=device) for x in xs]
        logs = [vkcore.log_softmax(x, device=device) for x in xs]
        again = vkcore.softmax(outs[0])
    for x, y, ly in zip(xs, outs, logs, strict=True):
        np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL, rtol=0)
        np.testing.assert_allclose(ly.numpy(), reference.log_softmax(x), atol=1e-6, rtol=1e-6)
    want = reference.softmax(reference.softmax(xs[0]))
    np.testing.assert_allclose(again.numpy(), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("activations", ["float", "int8", "uint8"])
def test_matvec_twice_on_one_weight_tensor_in_one_sequence(device, activations):
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((96, 640)) * 0.1).astype(np.float32)
    symmetric = activations != "uint8"
    qt = vkcore.quantize(w, symmetric=symmetric, device=device)
    q, s, z = reference.quantize(w, 8, symmetric, True)
    x1 = rng.standard_normal(640).astype(np.float32)
    x2 = rng.standard_normal(640).astype(np.float32) * 3
    try:
        with vkcore.sequence(device=device):
            y1 = vkcore.matvec(qt, x1, activations=activations)
            y2 = vkcore.matvec(qt, x2, activations=activations)
            y3 = vkcore.matvec(qt, vkcore.asarray(x1, device=device), activations=activations)
        want1 = vkcore.matvec(qt, x1, activations=activations)
        want2 = vkcore.matvec(qt, x2, activations=activations)
        np.testing.assert_array_equal(y1.numpy(), want1)
        np.testing.assert_array_equal(y2.numpy(), want2)
        np.testing.assert_array_equal(y3.numpy(), want1)
        if activations != "float":
            np.testing.assert_array_equal(
                want1, reference.matvec(q, s, z, x1, activations=activations)
            )
            np.testing.assert_array_equal(
                want2, reference.matvec(q, s, z, x2, activations=activations)
            )
    finally:
        qt.release()


def test_topk_and_softmax_topk_several_times_in_one_sequence(device):
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((3, 5000)).astype(np.float32) for _ in range(2)]
    xs.append(rng.standard_normal((2, 70000)).astype(np.float32))
    with vkcore.sequence(device=device):
        tops = [vkcore.topk(x, 7, device=device) for x in xs]
        big = vkcore.topk(xs[0], 300, device=device)  # the sort path
        fused = [vkcore.softmax_topk(x, 5, device=device) for x in xs]
    for x, (v, i) in zip(xs, tops, strict=True):
        want_v, want_i = reference.topk(x, 7)
        np.testing.assert_array_equal(v.numpy(), want_v)
        np.testing.assert_array_equal(i.numpy(), want_i)
    want_v, want_i = reference.topk(xs[0], 300)
    np.testing.assert_array_equal(big[0].numpy(), want_v)
    np.testing.assert_array_equal(big[1].numpy(), want_i)
    for x, (p, i) in zip(xs, fused, strict=True):
        want_p, want_i = reference.softmax_topk(x, 5)
        np.testing.assert_array_equal(i.numpy(), want_i)
        np.testing.assert_allclose(p.numpy(), want_p, atol=ATOL, rtol=0)


# ---------------------------------------------------------------- sequences: replay, lifetime


def test_replay_after_the_inputs_were_written(device, scale):
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((64, 256)) * 0.1).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    xt = vkcore.asarray(np.zeros(256, np.float32), device=device)
    scaled = vkcore.Tensor.empty((256,), np.float32, device)
    try:
        with vkcore.sequence(device=device) as seq:
            scale(xt, scaled, groups=4, a=2.0, n=256)
            logits = vkcore.matvec(qt, scaled)
            probs = vkcore.softmax(logits)
            top_v, top_i = vkcore.topk(logits, 4)
        for _ in range(3):
            x = rng.standard_normal(256).astype(np.float32)
            xt.write(x)
            seq.run()
            want_logits = vkcore.matvec(qt, 2 * x)
            np.testing.assert_array_equal(scaled.numpy(), 2 * x)
            np.testing.assert_array_equal(logits.numpy(), want_logits)
            np.testing.assert_allclose(probs.numpy(), reference.softmax(want_logits), atol=ATOL)
            wv, wi = reference.topk(want_logits, 4)
            np.testing.assert_array_equal(top_v.numpy(), wv)
            np.testing.assert_array_equal(top_i.numpy(), wi)
        seq.release()
    finally:
        qt.release()


def test_outputs_read_after_release(device, rng):
    x = rng.standard_normal((4, 3000)).astype(np.float32)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.softmax(x, device=device)
        v, i = vkcore.topk(x, 3, device=device)
    seq.release()
    seq.release()  # idempotent
    gc.collect()
    np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)
    want_v, want_i = reference.topk(x, 3)
    np.testing.assert_array_equal(v.numpy(), want_v)
    np.testing.assert_array_equal(i.numpy(), want_i)
    with pytest.raises(RuntimeError, match="released"):
        seq.run()
    # the buffers went back: a new call of the same shapes still gives its own results
    x2 = x[::-1].copy()
    np.testing.assert_allclose(vkcore.softmax(x2, device=device), reference.softmax(x2), atol=ATOL)
    np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)


def test_a_non_waiting_sequences_output_read_from_another_thread(device, rng):
    x = rng.standard_normal((32, 20000)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(wait=False, device=device) as seq:
        y = vkcore.softmax(xt)
        z = vkcore.log_softmax(y)
    got: dict[str, np.ndarray] = {}
    errors: list[BaseException] = []

    def reader(name: str, t: vkcore.Tensor) -> None:
        try:
            got[name] = t.numpy()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n, t)) for n, t in (("y", y), ("z", z))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    want = reference.softmax(x)
    np.testing.assert_allclose(got["y"], want, atol=ATOL)
    np.testing.assert_allclose(got["z"], reference.log_softmax(want), atol=1e-5)
    assert seq.done()


def test_writing_an_input_waits_for_the_sequence_in_flight(device, rng):
    x = rng.standard_normal((64, 8192)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(wait=False, device=device) as seq:
        y = vkcore.softmax(xt)
    xt.write(np.zeros_like(x))  # after the submission: it ran on x
    np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)
    seq.run()
    np.testing.assert_allclose(y.numpy(), np.full_like(x, 1 / 8192), atol=ATOL)


def test_an_exception_while_recording_then_ordinary_calls(device, scale, rng):
    x = rng.standard_normal((4, 1000)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    out = vkcore.Tensor.empty((4000,), np.float32, device)
    with pytest.raises(ZeroDivisionError), vkcore.sequence(device=device):
        vkcore.softmax(xt)
        scale(xt.reshape(4000), out, groups=63, a=2.0, n=4000)
        vkcore.topk(xt, 3)
        raise ZeroDivisionError("in the block")
    # nothing is recorded any more: calls run at once, with their own results
    assert device.submitter.recording() is None
    np.testing.assert_allclose(vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL)
    scale(xt.reshape(4000), out, groups=63, a=2.0, n=4000)
    np.testing.assert_array_equal(out.numpy(), 2 * x.reshape(-1))
    y = np.zeros(4000, np.float32)
    scale(x.reshape(-1), y, groups=63, a=-2.0, n=4000)
    np.testing.assert_array_equal(y, -2 * x.reshape(-1))
    with vkcore.sequence(device=device):
        z = vkcore.softmax(xt)
    np.testing.assert_allclose(z.numpy(), reference.softmax(x), atol=ATOL)


def test_readonly_numpy_arguments_of_a_program_in_a_sequence_are_copied(device, scale):
    x = np.arange(256, dtype=np.float32)
    want = 2 * x
    yt = vkcore.Tensor.empty((256,), np.float32, device)
    with vkcore.sequence(device=device) as seq:
        scale(x, yt, groups=4, a=2.0, n=256)
        x[:] = -1  # after recording
    x[:] = 99  # after submission too
    np.testing.assert_array_equal(yt.numpy(), want)
    seq.run()
    np.testing.assert_array_equal(yt.numpy(), want)


def test_closing_a_device_with_sequences_in_flight(rng):
    x = rng.standard_normal((64, 8192)).astype(np.float32)
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    try:
        prog = vkcore.Program(SCALE, device=dev)
        xt = vkcore.asarray(x, device=dev)
        seqs, outs = [], []
        for _ in range(3):
            with vkcore.sequence(wait=False, device=dev) as seq:
                y = vkcore.softmax(xt)
                out = vkcore.Tensor.empty(x.shape, np.float32, dev)
                prog(y.reshape(-1), out.reshape(-1), groups=groups_for(x.size), a=1.0, n=x.size)
            seqs.append(seq)
            outs.append(out)
        xt.buffer.destroy()  # deferred: the sequences hold it
    finally:
        dev.close()
    assert not dev.validation_messages
    for seq in seqs:
        with pytest.raises(RuntimeError):
            seq.run()
        seq.release()
    for out in outs:
        with pytest.raises(RuntimeError):
            out.numpy()


# ---------------------------------------------------------------- many and long sequences
def test_many_live_sequences(device, scale):
    """Sequences kept for replay, more descriptor sets in all than one pool's 1024."""
    x = np.arange(256, dtype=np.float32)
    xt = vkcore.asarray(x, device=device)
    seqs, outs = [], []
    for i in range(300):
        out = vkcore.Tensor.empty((256,), np.float32, device)
        with vkcore.sequence(device=device) as seq:
            for _ in range(4):
                scale(xt, out, groups=4, a=float(i), n=256)
        seqs.append(seq)
        outs.append(out)
    for i in (0, 150, 299):
        seqs[i].run()
        np.testing.assert_array_equal(outs[i].numpy(), np.float32(i) * x)
    for seq in seqs:
        seq.release()


def test_a_sequence_with_no_steps(device):
    with vkcore.sequence(device=device) as seq:
        pass
    seq.run()
    assert seq.done()
    seq.release()


def test_a_longer_sequence_than_one_descriptor_pool(device, scale):
    x = np.arange(256, dtype=np.float32)
    xt = vkcore.asarray(x, device=device)
    out = vkcore.Tensor.empty((256,), np.float32, device)
    with vkcore.sequence(device=device) as seq:
        scale(xt, out, groups=4, a=1.0, n=256)
        for _ in range(1100):
            scale(out, out, groups=4, a=1.0, n=256)
    np.testing.assert_array_equal(out.numpy(), x)
    seq.release()


def test_inputs_released_inside_the_block_after_recording(device, rng):
    w = (rng.standard_normal((32, 256)) * 0.1).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    x = rng.standard_normal(256).astype(np.float32)
    want = vkcore.matvec(qt, x)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.matvec(qt, xt)
        p = vkcore.softmax(y)
        xt.buffer.destroy()  # deferred until the sequence lets go
        qt.release()
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_allclose(p.numpy(), reference.softmax(want), atol=ATOL)
    seq.run()  # the memory is still there for a replay
    np.testing.assert_array_equal(y.numpy(), want)
    seq.release()
    assert not xt.buffer.alive


def test_a_refused_call_caught_inside_the_block(device, rng):
    x = rng.standard_normal((4, 500)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.softmax(xt)
        with pytest.raises(ValueError):
            vkcore.topk(xt, 10**6)
        with pytest.raises(TypeError):
            vkcore.softmax(xt, out=np.empty_like(x))
        z = vkcore.log_softmax(y)
    assert seq.state == "done"
    want = reference.softmax(x)
    np.testing.assert_allclose(y.numpy(), want, atol=ATOL)
    np.testing.assert_allclose(z.numpy(), reference.log_softmax(want), atol=1e-5)


def test_sample_inside_a_sequence_draws_what_an_immediate_call_draws(device, rng):
    x = rng.standard_normal((3, 300)).astype(np.float32)
    want = vkcore.sample(x, seed=11, top_k=20, device=device)
    greedy_want = np.argmax(x, axis=-1)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device) as seq:
        tokens = vkcore.sample(xt, seed=11, top_k=20)
        greedy = vkcore.sample(xt, temperature=0)
    np.testing.assert_array_equal(tokens.numpy(), want)
    np.testing.assert_array_equal(greedy.numpy(), greedy_want)
    x2 = x[::-1].copy()
    xt.write(x2)
    seq.run()
    np.testing.assert_array_equal(
        tokens.numpy(), vkcore.sample(x2, seed=11, top_k=20, device=device)
    )
    np.testing.assert_array_equal(greedy.numpy(), np.argmax(x2, axis=-1))
