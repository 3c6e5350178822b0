"""Run by tests/device/test_lifetimes.py in a fresh process (with a timeout): fork with live
devices, then check the child from the parent. Prints one line per finding; exits 0 when
every check held, 1 otherwise (a hang is the caller's timeout).

Scenarios (argv[1]):

* ``untouched``: the child never calls vkcore and leaves through ``sys.exit`` (atexit
  handlers run): it must exit promptly with its own status.
* ``kernels``: the child calls every kernel on inherited objects (each must raise a
  RuntimeError saying the device belongs to the parent), closes and drops them (no Vulkan
  call, no hang), then uses the default device, which must be a new one giving right
  answers; it leaves through ``os._exit`` (see the README on Mesa's exit handler).
* ``own_device``: the child creates its own Device, runs a kernel on it and leaves through
  ``sys.exit(5)`` without closing it: the status must be 5 (no crash in the driver's exit
  handlers, which would join the parent's threads).
* ``pool``: a multiprocessing Pool with the "fork" start method whose workers compute
  softmax on their default devices.
* in every scenario the parent then checks that its own device, tensors and default
  device still work.
"""

from __future__ import annotations

import gc
import os
import sys
import time

import numpy as np
from adversarial_programs import SCALE

import vkcore

CHILD_SECONDS = 30


def fail(msg: str) -> None:
    print(f"FAIL {msg}", flush=True)


def expect_parent_error(label: str, call) -> bool:
    try:
        call()
    except RuntimeError as exc:
        if "parent process" in str(exc):
            return True
        fail(f"{label}: RuntimeError without the parent-process reason: {exc}")
        return False
    except Exception as exc:  # noqa: BLE001 - report any other kind as a failure
        fail(f"{label}: {type(exc).__name__}: {exc}")
        return False
    fail(f"{label}: no error on an inherited device")
    return False


def child_kernels(state: dict) -> int:
    dev, x, t, qt, f32 = state["dev"], state["x"], state["t"], state["qt"], state["f32"]
    ok = True
    calls = {
        "softmax numpy": lambda: vkcore.softmax(x, device=dev),
        "softmax safe": lambda: vkcore.softmax(x, algorithm="safe", device=dev),
        "softmax Tensor": lambda: vkcore.softmax(t),
        "softmax Tensor repeated": lambda: vkcore.softmax(t, out=state["out"]),
        "Program repeated": lambda: state["scale"](
            x.reshape(-1), state["y"], groups=x.size // 64, a=2.0, n=x.size
        ),
        "Tensor.numpy": lambda: t.numpy(),
        "asarray": lambda: vkcore.asarray(x, device=dev),
        "quantize": lambda: vkcore.quantize(x, device=dev),
        "dequantize": lambda: vkcore.dequantize(qt),
        "matvec float": lambda: vkcore.matvec(qt, x[0]),
        "matvec int8": lambda: vkcore.matvec(qt, x[0], activations="int8"),
        "matvec uint8": lambda: vkcore.matvec(qt, x[0], activations="uint8"),
        "matvec_f32": lambda: vkcore.matvec_f32(f32, x[0]),
        "qt.q": lambda: qt.q,
        "save_pipeline_cache": lambda: dev.save_pipeline_cache(),
    }
    for label, call in calls.items():
        ok &= expect_parent_error(label, call)
    if vkcore.default_device() is state["default"]:
        fail("default_device() in the child is the parent's")
        ok = False
    y = vkcore.softmax(x)  # the child's own default device
    if not np.allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0):
        fail("softmax on the child's new default device is wrong")
        ok = False
    dev.close()  # no Vulkan call on the parent's objects, no hang
    qt.release()
    for name in ("t", "qt", "f32", "dev", "default", "out", "scale"):
        del state[name]
    gc.collect()
    vkcore.default_device().close()
    return 0 if ok else 1


def child_own_device(state: dict) -> None:
    x = state["x"]
    dev = vkcore.Device(pipeline_cache=False)
    if not np.allclose(vkcore.softmax(x, device=dev), vkcore.reference.softmax(x), atol=1e-6):
        print("FAIL softmax on the child's own device is wrong", flush=True)
        os._exit(1)
    sys.exit(5)  # interpreter exit with the device open: vkcore's atexit closes it


def worker_softmax(seed: int) -> bool:
    x = np.random.default_rng(seed).standard_normal((4, 300)).astype(np.float32)
    return bool(np.allclose(vkcore.softmax(x), vkcore.reference.softmax(x), atol=1e-6, rtol=0))


def run_pool() -> bool:
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        result = pool.map_async(worker_softmax, range(6))
        return all(result.get(timeout=CHILD_SECONDS))


def parent_state() -> dict:
    x = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    dev = vkcore.Device(pipeline_cache=False)
    state = {
        "x": x,
        "dev": dev,
        "default": vkcore.default_device(),
        "t": vkcore.asarray(x, device=dev),
        "qt": vkcore.quantize(x, device=dev),
        "f32": vkcore.F32Matrix(x, device=dev),
    }
    vkcore.softmax(x)  # the default device has run a kernel too
    vkcore.softmax(state["t"])
    vkcore.matvec(state["qt"], x[0], activations="uint8")
    # Calls kept for an exact repeat (vkcore.compute.repeat): the child's repeat must
    # refuse as the full call does, not copy into the parent's mappings.
    out = vkcore.Tensor.empty(x.shape, np.float32, dev)
    state["scale"] = prog = vkcore.Program(SCALE, device=dev)
    y = np.empty(x.size, np.float32)
    for _ in range(3):
        vkcore.softmax(x, device=dev)
        vkcore.softmax(state["t"], out=out)
        prog(x.reshape(-1), y, groups=x.size // 64, a=2.0, n=x.size)
    state["out"], state["y"] = out, y
    return state


def wait(pid: int) -> int | None:
    """The child's exit code, or None if it is still running after CHILD_SECONDS."""
    deadline = time.monotonic() + CHILD_SECONDS
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def main() -> int:
    scenario = sys.argv[1]
    state = parent_state()
    start = time.monotonic()
    if scenario == "pool":
        ok = run_pool()
        print(f"pool workers {'agree' if ok else 'DISAGREE'} with the reference", flush=True)
        return finish(state, ok)
    pid = os.fork()
    if pid == 0:
        if scenario == "untouched":
            sys.exit(7)  # normal interpreter exit: atexit handlers, finalizers
        if scenario == "own_device":
            child_own_device(state)
        try:
            code = child_kernels(state)
        except BaseException as exc:  # noqa: BLE001 - report, never fall into the parent's code
            print(f"FAIL child raised {type(exc).__name__}: {exc}", flush=True)
            code = 1
        sys.stdout.flush()
        os._exit(code)
    code = wait(pid)
    print(f"child exit {code} after {time.monotonic() - start:.2f} s", flush=True)
    want = {"untouched": 7, "own_device": 5}.get(scenario, 0)
    ok = code == want
    if not ok:
        fail(f"child exit status {code}, expected {want} (None: hung)")
    return finish(state, ok)


def finish(state: dict, ok: bool) -> int:
    """Check that the parent's objects still work; close; the exit status."""
    x = state["x"]
    ref = vkcore.reference.softmax(x)
    checks = {
        "parent device": np.allclose(vkcore.softmax(x, device=state["dev"]), ref, atol=1e-6),
        "parent tensor": np.array_equal(state["t"].numpy(), x),
        "parent default": vkcore.default_device() is state["default"]
        and np.allclose(vkcore.softmax(x), ref, atol=1e-6),
        "parent matvec": np.array_equal(
            vkcore.matvec(state["qt"], x[0], activations="uint8"),
            vkcore.reference.matvec(
                state["qt"].q, state["qt"].scale, state["qt"].zero_point, x[0], None, "uint8"
            ),
        ),
    }
    for label, good in checks.items():
        if not good:
            fail(f"{label} broken after the fork")
            ok = False
    state["dev"].close()
    print("OK" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
