"""A real Ctrl-C landing anywhere in repeated small calls. ``_thread.interrupt_main``
sets the flag a SIGINT sets, and CPython raises KeyboardInterrupt where it checks for
signals between bytecodes, which is where a user's Ctrl-C lands. A thread sends it at
random moments while the main thread repeats a kept call. After each KeyboardInterrupt
no lock of the device or of the repeat's staging buffers may be held, and the next
call must give exactly what the full call gives.

A trace hook can raise at points no signal reaches, such as between a ``with lock:``
block's last line and its ``__exit__``. Those points are left to the method-level
injections of tests/device/test_exception_safety.py."""

from __future__ import annotations

import _thread
import random
import threading
import time

import numpy as np
import pytest

import vkcore

N = 256
TRIALS = 150


def _free(lock) -> bool:
    """Whether ``lock`` (a Lock or an RLock) is held by no thread."""
    if not lock.acquire(blocking=False):
        return False
    lock.release()
    return True


def _interrupted_repeats(call, locks, rng) -> int:
    """Repeat ``call`` until a Ctrl-C sent after a random delay lands; returns how many
    calls completed first. Fails if a lock stays held."""
    timer = threading.Timer(rng.uniform(0, 300e-6), _thread.interrupt_main)
    done = 0
    deadline = time.monotonic() + 5
    try:
        timer.start()  # the Ctrl-C may land while the thread starts, before any call
        while time.monotonic() < deadline:
            call()
            done += 1
        pytest.fail("the interrupt never arrived")
    except KeyboardInterrupt:
        pass
    finally:
        timer.join()
    held = [lock for lock in locks if not _free(lock)]
    assert not held, f"locks still held after a Ctrl-C: {held}"
    return done


def test_ctrl_c_in_repeated_program_calls(device, scale):
    x = np.linspace(1.0, 2.0, N, dtype=np.float32)
    want = (np.float32(3.0) * x).view(np.uint32)
    y = np.zeros(N, np.float32)

    def call():
        scale(x, y, groups=N // 64, a=3.0, n=N)

    for _ in range(3):
        call()
    rng = random.Random(0)
    for _ in range(TRIALS):
        kept = scale._kept
        staging = [b for _, b in kept.repeat.inputs + kept.repeat.outputs] if kept else []
        _interrupted_repeats(call, [device.lock] + [b._lock for b in staging], rng)
        y[:] = 0
        call()
        np.testing.assert_array_equal(y.view(np.uint32), want)
    assert scale._kept is not None, "the calls still repeat after the interrupts"


def test_ctrl_c_in_repeated_softmax_calls(device, rng):
    x = rng.standard_normal((4, 100), dtype=np.float32)
    want = vkcore.softmax(x, device=device)
    order = random.Random(1)
    for _ in range(TRIALS):
        _interrupted_repeats(lambda: vkcore.softmax(x, device=device), [device.lock], order)
        np.testing.assert_array_equal(vkcore.softmax(x, device=device), want)
