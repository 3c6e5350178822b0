"""Adversarial checks that found defects, now fixed: dropped sequences leaked (holders
are weak now), a discarded recording cached uint8 row sums, readonly numpy arguments
were converted inside a sequence, replays from several threads overlapped, and a
Tensor larger than one binding was softmaxed wrongly inside a sequence (now refused).

Adversarial checks of vkcore.Program calls (the numpy fast path, threads, devices) and
of vkcore.sequence (README "Your own shaders" and "Sequences"), through the public API.

Every result is compared with numpy or vkcore.reference: softmax within 1e-6, integer
results (and results of a program that only copies or scales by a power of two) bit for
bit. The session device fails a test on any validation message.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import threading

import numpy as np
import pytest
from adversarial_programs import COPY_WORDS, SCALE, groups_for, run_threads  # noqa: F401

import vkcore
from vkcore import reference

ATOL = 1e-6


# Was a defect: a sequence is never collected while any buffer it binds lives: Buffer._holders
# keeps it strongly, and most kernels bind the device's dummy buffer (and users bind
# long-lived Tensors), so every dropped sequence keeps its command buffer, fence,
# descriptor sets and leased outputs: 200 sequences leave +200 buffers, +400 sets.
def test_many_sequences_dropped_without_release_do_not_leak(device, scale, rng):
    x = rng.standard_normal((2, 512)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    yt = vkcore.Tensor.empty((1024,), np.float32, device)

    def one(i: int) -> None:
        with vkcore.sequence(wait=bool(i % 2), device=device):
            p = vkcore.softmax(xt)
            scale(p.reshape(1024), yt, groups=16, a=float(i), n=1024)

    for i in range(20):  # warm the pools and pipelines
        one(i)
    gc.collect()
    before = device.live_objects()
    for i in range(200):
        one(i)
    gc.collect()
    after = device.live_objects()
    assert after == before
    np.testing.assert_allclose(
        yt.numpy(), np.float32(199) * reference.softmax(x).reshape(-1), rtol=1e-6, atol=1e-6
    )


# Was a defect: _discard() unholds every buffer, so a discarded result is read without any
# error: it returns the previous result of that size (the leased pool memory).


# Was a defect: matvec_vector.run keeps qt.rowsum as soon as the steps are *recorded*; the
# discarded sequence never computed them, so every later uint8 matvec on qt is wrong.
def test_uint8_matvec_first_called_in_a_discarded_sequence(device):
    """The row sums of uint8 activations are computed once per weight tensor, by the
    first call; when that call was recorded in a sequence that is then discarded, the
    sums were never computed, and later calls must not use them."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((64, 512)) * 0.1).astype(np.float32)
    qt = vkcore.quantize(w, symmetric=False, device=device)
    q, s, z = reference.quantize(w, 8, False, True)
    x = rng.standard_normal(512).astype(np.float32)
    try:
        with pytest.raises(KeyError), vkcore.sequence(device=device):
            vkcore.matvec(qt, x, activations="uint8")
            raise KeyError("in the block")
        y = vkcore.matvec(qt, x, activations="uint8")
        np.testing.assert_array_equal(y, reference.matvec(q, s, z, x, activations="uint8"))
    finally:
        qt.release()


# Was a defect: Program._as_tensors uploaded readonly numpy arguments with vkcore.asarray,
# which converted int64/float64 to float32 and byte-swapped big-endian data, while outside
# a sequence the array's own bytes were bound. Both paths now convert to the binding's
# element type (uint for COPY_WORDS) by the same rule: the shader sees the same words.
@pytest.mark.parametrize(
    "x",
    [
        np.arange(64, dtype=np.int64),
        np.arange(64, dtype=np.uint8),
        np.arange(128, dtype=np.uint32).astype(">u4"),  # big-endian
        list(range(100)),
    ],
    ids=["int64", "uint8", "big-endian", "list"],
)
def test_a_readonly_numpy_argument_binds_the_same_words_inside_a_sequence(device, copy_words, x):
    """A readonly numpy argument is "uploaded for the call" outside a sequence and
    "uploaded as a Tensor when recorded" inside one: the shader must see the same words
    either way, the values of ``x`` as uint32."""
    words = len(x)
    outside = np.zeros(words, np.uint32)
    copy_words(x, outside, groups=groups_for(words), n=words)
    np.testing.assert_array_equal(outside, np.asarray(x).astype(np.uint32))
    yt = vkcore.Tensor.empty((words,), np.uint32, device)
    yt.write(np.zeros(words, np.uint32))
    with vkcore.sequence(device=device):
        copy_words(x, yt, groups=groups_for(words), n=words)
    np.testing.assert_array_equal(yt.numpy(), outside)


@pytest.mark.parametrize(
    "x", [np.linspace(-2, 2, 64), np.arange(64, dtype=np.float32), np.array([-1, 0, 1])]
)
def test_a_readonly_argument_that_does_not_convert_is_refused_inside_a_sequence_too(
    device, copy_words, x
):
    """Floats for a uint binding (TypeError) and a negative integer (ValueError): the
    same refusal outside and inside a sequence, naming the argument."""
    y = np.zeros(x.size, np.uint32)
    with pytest.raises((TypeError, ValueError), match="buffer 0") as outside:
        copy_words(x, y, groups=1, n=x.size)
    yt = vkcore.Tensor.empty((x.size,), np.uint32, device)
    with vkcore.sequence(device=device), pytest.raises(type(outside.value), match="buffer 0"):
        copy_words(x, yt, groups=1, n=x.size)


@pytest.fixture
def small_bindings(device, monkeypatch):
    """maxStorageBufferRange lowered to 256 KiB (as on a device with a small limit)."""
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_storage_buffer_range=256 << 10)
    )
    return device


# Was a defect: softmax_split.tensor_split copies pieces with submitter._copy at once (not
# recorded) and reuses one x/y buffer for every piece, while the dispatches are
# recorded for later: inside a sequence the result is garbage.


# Was a defect: Sequence.run() is wait(); _submit_now(); wait() with no lock around it: two
# threads resubmit the command buffer while pending and reset the fence in use
# (VUID-vkQueueSubmit-pCommandBuffers-00071, VUID-vkResetFences-pFences-01123).
def test_run_from_two_threads_at_once(device, scale, rng):
    """seq.run() from two threads: each replay is submitted once the previous finished
    (no validation message: a command buffer resubmitted while pending, a fence reset
    while in use)."""
    x = rng.standard_normal((16, 4096)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device) as seq:
        y = vkcore.softmax(xt)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(30):
                seq.run()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    run_threads([work] * 3)
    assert not errors, errors
    np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)


# Was a defect (intermittent, about 2 runs in 3; held staging is now chosen under the
# device lock): RuntimeError 'this vkcore
# buffer was released' from Program._run_held.
def test_program_calls_in_threads_while_another_thread_records_sequences(device, scale):
    """Held staging buffers given back to the pool by one thread's call of another size
    while other threads borrow pool buffers for calls and recordings."""
    errors: list[BaseException] = []
    wrong: list[str] = []
    stop = threading.Event()

    def caller(t: int) -> None:
        try:
            rng = np.random.default_rng(200 + t)
            for i in range(60):
                n = (256, 1024)[(i + t) % 2]
                x = rng.standard_normal(n).astype(np.float32)
                y = np.zeros(n, np.float32)
                scale(x, y, groups=groups_for(n), a=2.0, n=n)
                if not np.array_equal(y, 2 * x):
                    wrong.append(f"caller {t} call {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def recorder() -> None:
        try:
            rng = np.random.default_rng(300)
            while not stop.is_set():
                x = rng.standard_normal((1, 256)).astype(np.float32)
                with vkcore.sequence(device=device):
                    y = vkcore.softmax(x, device=device)
                    z = vkcore.softmax(np.tile(x, (1, 4)), device=device)
                if not np.allclose(y.numpy(), reference.softmax(x), atol=ATOL, rtol=0):
                    wrong.append("recorder y")
                if not np.allclose(z.numpy(), reference.softmax(np.tile(x, (1, 4))), atol=ATOL):
                    wrong.append("recorder z")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    rec = threading.Thread(target=recorder)
    callers = [threading.Thread(target=caller, args=(t,)) for t in range(2)]
    try:
        rec.start()
        for th in callers:
            th.start()
        for th in callers:
            th.join()
    finally:
        stop.set()
        rec.join()
        sys.setswitchinterval(old)
    assert not errors, errors
    assert not wrong, wrong


# Was a defect: Program._held_for picks the held staging buffers outside the device lock;
# another thread's call of another size gives them back to the pool, a lease adopts
# their memory, and this call's upload raises 'this vkcore buffer was released'.


def test_softmax_larger_than_one_binding_inside_a_sequence_is_refused(device, monkeypatch):
    """Its pieces are copied as the call goes, which a recording cannot do: a clear error
    instead of a wrong answer."""
    import dataclasses

    xt = vkcore.asarray(np.ones((300, 1000), np.float32), device=device)
    small = dataclasses.replace(device.info, max_storage_buffer_range=256 * 1024)
    monkeypatch.setattr(device, "info", small)
    seq = vkcore.sequence(device=device)
    with pytest.raises(ValueError, match="larger than one storage binding"), seq:
        vkcore.softmax(xt)
