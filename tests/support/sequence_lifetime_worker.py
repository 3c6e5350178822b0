"""Run by tests/test_sequence_lifetimes.py in a fresh process: non-waiting sequences
whose work is still running when everything that refers to them goes, in one way or
another (argv[1], the scenario). A crash (freed memory the device still reads) is the
caller's to see in the exit status; otherwise this prints ``FAIL ...`` for a wrong
result or a validation message and ``OK`` at the end.

The work is long on purpose (softmax four times over ~13 MB, then top-k: 80-160 ms on
lavapipe after its submission returned, measured 2026-12-02), so it is still on the
queue when the collector or the exit runs; what each scenario drops is then collected
at once (``gc.collect()``, or the exit itself).
"""

from __future__ import annotations

import atexit
import gc
import itertools
import os
import sys
import threading

import numpy as np

ROWS, COLS, K = 64, 50_000, 40
failures: list[str] = []


def report_validation(messages: list[str]) -> None:
    for m in messages:
        if "rror" in m:
            failures.append(f"validation: {m[:300]}")


def finish() -> None:
    for f in failures:
        print(f"FAIL {f}", flush=True)
    print("FAILED" if failures else "OK", flush=True)


def exit_check(holder: dict) -> None:
    """Registered before vkcore is imported, so it runs after vkcore's own exit handler
    has closed the devices: the messages of that close are in."""
    dev = holder.get("dev")
    if dev is not None:
        report_validation(dev.validation_messages)
    finish()
    sys.stdout.flush()


EXIT_STATE: dict = {}
if sys.argv[1] == "exit":
    atexit.register(exit_check, EXIT_STATE)

import vkcore  # noqa: E402
from vkcore import reference  # noqa: E402
from vkcore.tools.bench.program_cases import TINY  # noqa: E402

rng = np.random.default_rng(3)
X = rng.standard_normal((ROWS, COLS)).astype(np.float32)
WANT = X
for _ in range(4):
    WANT = reference.softmax(WANT)


class Box:
    """A user's object that refers to itself and to everything of one sequence."""


def chain(t):
    """Four softmax passes, then top-k: long work on one device."""
    p = t
    for _ in range(4):
        p = vkcore.softmax(p)
    return (p, *vkcore.topk(p, K))


def check_device(dev) -> None:
    """Right answers on the sizes just dropped (pooled buffers come back for them: one
    the dropped work still wrote would spoil them), and no validation message so far."""
    p, _, indices = chain(vkcore.asarray(X, device=dev))
    got = p.numpy()
    if not np.allclose(got, WANT, atol=1e-6):
        failures.append("the probabilities computed after the drop are wrong")
    top = np.sort(indices.numpy(), axis=-1)
    if not np.array_equal(top, np.sort(reference.topk(got, K)[1], axis=-1)):
        failures.append("the top-k computed after the drop is wrong")
    report_validation(dev.validation_messages)
    dev.instance.messages.clear()


def in_flight(dev, *, numpy_inputs: bool = False):
    """A non-waiting sequence of chain(), its input Tensor (None for numpy input) and
    its outputs; most of its work is still to run when this returns."""
    t = None if numpy_inputs else vkcore.asarray(X, device=dev)
    seq = vkcore.sequence(wait=False, device=dev)
    with seq:
        outs = chain(X if numpy_inputs else t)
    return seq, t, outs


def scenario_cycle(dev) -> None:
    """The sequence refers to itself and to its Tensors (made before and after it)."""
    for numpy_inputs in (False, True, False, True):
        seq, t, outs = in_flight(dev, numpy_inputs=numpy_inputs)
        seq.me = seq
        seq.keep = (t, outs)
        del seq, t, outs
        gc.collect()
        check_device(dev)


def scenario_holder_cycle(dev) -> None:
    """A user's object in a cycle holds the sequence, its Tensors and a Program."""
    prog = vkcore.Program(TINY, device=dev)
    box = Box()
    box.me = box
    box.prog = prog
    small = X[:4, :4096]
    box.x = vkcore.asarray(small, device=dev)
    box.y = vkcore.Tensor.empty(small.shape, np.float32, dev)
    box.t = vkcore.asarray(X, device=dev)
    with vkcore.sequence(wait=False, device=dev) as box.seq:
        box.outs = chain(box.t)
        prog(box.x, box.y, groups=-(-small.size // 64), a=0.5, n=small.size)
    del box, prog
    gc.collect()
    check_device(dev)


def scenario_device_dropped(_dev) -> None:
    """The device itself goes in the same collection as the sequence and its Tensors
    (never closed by the user): nothing may be freed before the device waited."""
    for _ in range(2):
        dev = vkcore.Device(pipeline_cache=False)
        box = Box()
        box.me = box
        box.dev = dev
        box.seq, box.t, box.outs = in_flight(dev)
        messages = dev.instance.messages
        del box, dev
        gc.collect()
        report_validation(messages)


def scenario_cycles_then_del_orders(dev) -> None:
    """After the cycles, no cycle: the sequence, its input and its outputs dropped in
    every order, the input released by the user first (freed by reference counts)."""
    scenario_cycle(dev)
    for order in itertools.permutations(("seq", "t", "outs")):
        seq, t, outs = in_flight(dev)
        t.buffer.destroy()  # deferred: the sequence still binds it
        names = {"seq": seq, "t": t, "outs": outs}
        del seq, t, outs
        for name in order:
            del names[name]
    check_device(dev)


def scenario_thread_gc(dev) -> None:
    """The cycles are collected by another thread, then this one calls kernels again."""
    for numpy_inputs in (False, True, False, True):
        seq, t, outs = in_flight(dev, numpy_inputs=numpy_inputs)
        seq.me = seq
        seq.keep = (t, outs)
        del seq, t, outs
        worker = threading.Thread(target=gc.collect)
        worker.start()
        worker.join()
        check_device(dev)


def scenario_exit(dev) -> None:
    """The interpreter exits while sequences in cycles run, the device left open: an
    exit handler of the program's own (it runs before vkcore's) drops one cycle and
    collects; the other is left to the exit itself."""
    EXIT_STATE["dev"] = dev
    kept = []
    for _ in range(2):
        seq, t, outs = in_flight(dev)
        seq.me = seq
        seq.keep = (t, outs)
        kept.append(seq)
        del seq, t, outs

    def cleanup() -> None:
        kept.pop()
        gc.collect()

    atexit.register(cleanup)
    kept[0] = None  # only the cycle itself refers to that one now
    sys.exit(0)


def main() -> int:
    name = sys.argv[1]
    dev = vkcore.Device(pipeline_cache=False)
    vkcore.softmax(X[:2], device=dev)  # compile the variants before timing matters
    globals()[f"scenario_{name}"](dev)
    if dev.closed:
        return 0
    check_device(dev)
    dev.close()
    report_validation(dev.validation_messages)
    finish()
    return 1 if failures else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # the status as computed (the checks above have run)
