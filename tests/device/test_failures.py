"""Failure paths: too-large buffers, out of memory, no device/driver/loader, Ctrl-C.

Each failure must give a clear exception from the API and one clear line from the CLI,
never crash the interpreter, and leave a device that was already open usable.
Paths that need a broken environment run in a subprocess.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import vkcore
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels.common import pack_u32

# A deliberately slow kernel: invocation i mixes a 32-bit state from i, `iterations` times.
# (llvmpipe caps a loop at 65535 iterations, so long runs come from many invocations.)
SPIN_SHADER = """\
#version 450
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Out { uint data[]; };
layout(push_constant) uniform Push { uint iterations; uint count; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= count) return;
    uint acc = i;
    for (uint k = 0u; k < iterations; ++k) {
        acc = (acc ^ (acc >> 15u)) * 2246822519u + k;
    }
    data[i] = acc;
}
"""


def spin_reference(count: int, iterations: int) -> np.ndarray:
    acc = np.arange(count, dtype=np.uint32)
    for k in range(iterations):
        acc = (acc ^ (acc >> np.uint32(15))) * np.uint32(2246822519) + np.uint32(k)
    return acc


@pytest.fixture
def spin_dir(tmp_path, monkeypatch):
    """A shader folder holding spin.comp, selected through VKCORE_SHADER_DIR."""
    folder = tmp_path / "shaders"
    folder.mkdir()
    (folder / "spin.comp").write_text(SPIN_SHADER)
    monkeypatch.setenv("VKCORE_SHADER_DIR", str(folder))
    return folder


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got: {stderr!r}"
    assert lines[0].startswith("vkcore: error: "), lines[0]
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def softmax_still_works(device) -> None:
    x = np.random.default_rng(5).standard_normal((8, 300)).astype(np.float32)
    np.testing.assert_allclose(
        vkcore.softmax(x, device=device), vkcore.reference.softmax(x), atol=1e-6
    )
    device.check()


# ---------------------------------------------------------------- too large / out of memory
def test_allocations_beyond_the_device_limit_are_value_errors(device):
    gc.collect()  # garbage of earlier tests freed now, not in the middle
    before = device.live_objects()
    limit = device.info.max_memory_allocation_size
    with pytest.raises(ValueError, match="maxMemoryAllocationSize"):
        Buffer(device, limit + 1)
    with pytest.raises(ValueError, match="maxMemoryAllocationSize"):
        vkcore.Tensor.empty((limit // 4 + 1,), np.float32, device)
    with pytest.raises(ValueError, match="maxMemoryAllocationSize"):
        vkcore.Tensor.empty((1 << 20, 1 << 20, 1 << 20), np.float32, device)
    # A broadcast view claims 8 GiB: refused before numpy makes a contiguous copy of it.
    huge = np.broadcast_to(np.float32(1.0), (limit // 4 + 1,))
    start = time.perf_counter()
    with pytest.raises(ValueError, match="data needs"):
        vkcore.asarray(huge, device=device)
    assert time.perf_counter() - start < 5, "the refusal must not copy the view first"
    assert device.live_objects() == before
    softmax_still_works(device)


def test_softmax_beyond_one_binding_is_split(device):
    limit = device.info.max_storage_buffer_range
    if limit > 256 << 20:
        pytest.skip(f"maxStorageBufferRange is {limit} bytes: too large to exceed cheaply")
    x = np.zeros((limit // 4 // 1024 + 1, 1024), np.float32)
    y = vkcore.softmax(
        x, device=device
    )  # split by rows (tests/kernels/softmax/test_softmax_split.py)
    assert np.array_equal(y, np.full_like(x, np.float32(1 / 1024)))
    softmax_still_works(device)


OOM_CHILD = """
    import json, resource
    import numpy as np
    import vkcore
    from vkcore.device.memory.buffer import Buffer

    def vm_bytes():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    dev = vkcore.Device(validation=True, pipeline_cache=False)
    x = np.random.default_rng(0).standard_normal((16, 1000)).astype(np.float32)
    def softmax_ok():
        error = np.abs(vkcore.softmax(x, device=dev) - vkcore.reference.softmax(x)).max()
        return bool(error < 1e-6)

    ok_before = softmax_ok()
    dev.submitter.drop_recorded()  # kept recordings are a cache, not what is counted
    objects_before = dev.live_objects()
    size = min(dev.info.max_memory_allocation_size, 1 << 30)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    # Leave far less address space than the buffer needs, so the driver's allocation fails.
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + size // 4, hard))
    try:
        Buffer(dev, size)
        error = None
    except vkcore.VulkanError as exc:
        error = (exc.call, exc.result_name, str(exc))
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    dev.check()  # the driver's own report of the failure must not raise again here
    ok_after = softmax_ok()
    dev.submitter.drop_recorded()
    objects_after = dev.live_objects()
    dev.close()
    print(json.dumps({"error": error, "ok_before": ok_before, "ok_after": ok_after,
                      "objects_before": objects_before, "objects_after": objects_after}))
"""


def test_out_of_memory_is_vulkan_error_and_device_stays_usable(device):
    if not device.info.is_cpu:
        pytest.skip("the address-space limit only starves a CPU driver's device memory")
    out = run_python(textwrap.dedent(OOM_CHILD), env={"VKCORE_VALIDATION": "1"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["error"] is not None, "the allocation unexpectedly succeeded"
    call, name, _ = result["error"]
    assert call == "vkAllocateMemory"
    assert name in ("VK_ERROR_OUT_OF_DEVICE_MEMORY", "VK_ERROR_OUT_OF_HOST_MEMORY")
    assert result["ok_before"] and result["ok_after"]
    assert result["objects_after"] == result["objects_before"]


# ---------------------------------------------------------------- no device, driver, loader
def test_unknown_device_from_environment_api_and_cli():
    """VKCORE_DEVICE naming no device is a warning and the default device (as every
    environment variable); the same name passed to Device() is a ValueError."""
    env = {"VKCORE_DEVICE": "no-such-gpu-xyz"}
    code = """
        import logging
        import numpy as np
        import vkcore
        warnings = []
        handler = logging.Handler()
        handler.emit = lambda record: warnings.append(record.getMessage())
        logging.getLogger("vkcore").addHandler(handler)
        with vkcore.Device() as dev:
            y = vkcore.softmax(np.zeros(4, np.float32), device=dev)
            print("softmax", bool((y == np.float32(0.25)).all()))
        print("warnings", len(warnings), warnings[0] if warnings else "")
        try:
            vkcore.Device("no-such-gpu-xyz")
        except ValueError as exc:
            print("ValueError", exc)
    """
    api = run_python(textwrap.dedent(code), env=env)
    assert api.returncode == 0, api.stderr
    lines = api.stdout.splitlines()
    assert lines[0] == "softmax True"
    assert lines[1].startswith("warnings 1 ") and "no-such-gpu-xyz" in lines[1]
    assert lines[2].startswith("ValueError") and "no-such-gpu-xyz" in lines[2]
    assert "devices are: 0: " in lines[2]
    cli = subprocess.run(
        [sys.executable, "-m", "vkcore", "info"],
        env=dict(os.environ, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert "no-such-gpu-xyz" in cli.stderr and "Traceback" not in cli.stderr


NO_DRIVER_ENV = {"VK_ICD_FILENAMES": "", "VK_DRIVER_FILES": ""}
# Creating a device, listing devices and running a kernel: each must raise VulkanError.
API_CALLS_PROBE = """
        import numpy as np
        import vkcore
        calls = (vkcore.Device, vkcore.devices, lambda: vkcore.softmax(np.ones(3, np.float32)))
        for attempt in calls:
            try:
                attempt()
                print("no error")
            except vkcore.VulkanError as exc:
                print("VulkanError", exc)
"""


def assert_every_call_raised(out: subprocess.CompletedProcess, message: str, hint: str) -> None:
    """Each of API_CALLS_PROBE's three calls printed a VulkanError with ``message``."""
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("VulkanError") and message in line, line
        assert hint in line


def test_no_driver_api_raises_vulkan_error():
    out = run_python(textwrap.dedent(API_CALLS_PROBE), env=NO_DRIVER_ENV)
    assert_every_call_raised(out, "no Vulkan driver found", "mesa-vulkan-drivers")


@pytest.mark.parametrize("command", [["info"], ["demo", "--rows", "2", "--cols", "8"]])
def test_no_driver_cli_one_line(command):
    out = subprocess.run(
        [sys.executable, "-m", "vkcore", *command],
        env=dict(os.environ, **NO_DRIVER_ENV),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert_one_line_error(out.stderr, "VulkanError", "no Vulkan driver found")


# `import vulkan` opens libvulkan.so.1 through cffi; without a loader that raises OSError.
NO_LOADER_PRELUDE = """
    import sys

    class NoLoader:
        def find_spec(self, name, path=None, target=None):
            if name == "vulkan" or name.startswith("vulkan."):
                raise OSError("cannot load library 'libvulkan.so.1': libvulkan.so.1: "
                              "cannot open shared object file: No such file or directory")
            return None

    sys.meta_path.insert(0, NoLoader())
"""


def test_no_loader_api_raises_vulkan_error():
    code = textwrap.dedent(NO_LOADER_PRELUDE) + textwrap.dedent(API_CALLS_PROBE)
    assert_every_call_raised(run_python(code), "no Vulkan loader found", "libvulkan1")


def test_no_loader_cli_one_line():
    code = textwrap.dedent(NO_LOADER_PRELUDE) + textwrap.dedent("""
        from vkcore.tools.cli import main
        sys.exit(main(["info"]))
    """)
    out = run_python(code)
    assert out.returncode == 1
    assert_one_line_error(out.stderr, "VulkanError", "no Vulkan loader found")


# ---------------------------------------------------------------- a bad dispatch leaks nothing
def test_refused_dispatch_leaks_no_descriptor_set(device, spin_dir):
    pipe = vkcore.Program.builtin("spin.comp", workgroup=64, device=device).pipeline
    out = vkcore.Tensor.empty((128,), np.uint32, device)
    dead = Buffer(device, 512)
    dead.destroy()
    gc.collect()  # garbage of earlier tests freed now, not in the middle
    before = device.live_objects()
    for _ in range(50):
        with pytest.raises(RuntimeError, match="released"):
            device.submitter.run([Dispatch(pipe, (dead,), pack_u32(3, 128), (2, 1, 1))])
        with pytest.raises(ValueError, match="takes 1 buffers, got 2"):
            device.submitter.run(
                [Dispatch(pipe, (out.buffer, out.buffer), pack_u32(3, 128), (2, 1, 1))]
            )
    assert device.live_objects() == before
    device.submitter.run([Dispatch(pipe, (out.buffer,), pack_u32(3, 128), (2, 1, 1))])
    np.testing.assert_array_equal(out.numpy(), spin_reference(128, 3))
    out.buffer.destroy()


# ---------------------------------------------------------------- Ctrl-C during a long wait
CTRL_C_CHILD = """
    import json, sys, time
    import numpy as np
    import vkcore
    from vkcore.device.submit.commands import Dispatch
    from vkcore.kernels.common import pack_u32

    ITERATIONS = 50_000  # below llvmpipe's loop cap

    def reference(count, iterations):
        acc = np.arange(count, dtype=np.uint32)
        for k in range(iterations):
            acc = (acc ^ (acc >> np.uint32(15))) * np.uint32(2246822519) + np.uint32(k)
        return acc

    dev = vkcore.Device(validation=True)
    pipe = vkcore.Program.builtin("spin.comp", workgroup=64, device=dev).pipeline

    def run(out, count, iterations):
        start = time.perf_counter()
        groups = (count + 63) // 64
        push = pack_u32(iterations, count)
        dev.submitter.run([Dispatch(pipe, (out.buffer,), push, (groups, 1, 1))])
        return time.perf_counter() - start

    small = vkcore.Tensor.empty((64 * 64,), np.uint32, dev)
    run(small, 64, 10)  # compile
    per_invocation = run(small, 64 * 64, ITERATIONS) / (64 * 64)
    count = min(int(3.0 / per_invocation), 1 << 24)  # about three seconds
    big = vkcore.Tensor.empty((count,), np.uint32, dev)
    objects_before = dev.live_objects()
    print("WAITING", flush=True)
    start = time.perf_counter()
    interrupted = False
    try:
        run(big, count, ITERATIONS)
    except KeyboardInterrupt:
        interrupted = True
    waited = time.perf_counter() - start
    dev.check()
    run(small, 64 * 64, 7)
    correct = bool((small.numpy() == reference(64 * 64, 7)).all())
    objects_after = dev.live_objects()
    small.buffer.destroy()
    big.buffer.destroy()
    messages = dev.validation_messages
    dev.close()
    result = {"interrupted": interrupted, "waited": waited, "expected": count * per_invocation,
              "correct": correct, "messages": messages,
              "objects_before": objects_before, "objects_after": objects_after}
    print(json.dumps(result), flush=True)
"""

REOPEN_CHILD = """
    import json, logging
    import numpy as np
    import vkcore
    from vkcore.device.submit.commands import Dispatch
    from vkcore.kernels.common import pack_u32

    warnings = []

    class Collect(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logging.getLogger("vkcore").addHandler(Collect())
    with vkcore.Device(validation=True) as dev:
        pipe = vkcore.Program.builtin("spin.comp", workgroup=64, device=dev).pipeline
        out = vkcore.Tensor.empty((64,), np.uint32, dev)
        dev.submitter.run([Dispatch(pipe, (out.buffer,), pack_u32(2, 64), (1, 1, 1))])
        first = int(out.numpy()[1])
        out.buffer.destroy()
        messages = dev.validation_messages
    print(json.dumps({"warnings": warnings, "messages": messages, "first": first}))
"""


def test_ctrl_c_during_a_long_wait_leaves_device_and_cache_intact(tmp_path, spin_dir):
    cache = tmp_path / "cache"
    env = dict(os.environ, VKCORE_CACHE_DIR=str(cache), VKCORE_VALIDATION="1")
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CTRL_C_CHILD)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "WAITING", line + child.stderr.read()
        time.sleep(0.5)  # well inside the ~3 s fence wait
        child.send_signal(signal.SIGINT)
        rest, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    result = json.loads(rest.strip().splitlines()[-1])
    assert result["interrupted"], "the SIGINT did not surface as KeyboardInterrupt"
    # The interrupt is re-raised only once the kernel has finished: nothing freed in flight.
    assert result["waited"] >= 0.5 * result["expected"], result
    assert result["correct"]
    assert result["messages"] == []
    assert result["objects_after"] == result["objects_before"]
    leftovers = [p.name for p in cache.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    reopen = run_python(
        textwrap.dedent(REOPEN_CHILD),
        env={"VKCORE_CACHE_DIR": str(cache), "VKCORE_VALIDATION": "1"},
    )
    assert reopen.returncode == 0, reopen.stderr
    again = json.loads(reopen.stdout.strip().splitlines()[-1])
    assert again["warnings"] == [], "the cache written before the interrupt was not accepted"
    assert again["messages"] == []
    assert again["first"] == int(spin_reference(64, 2)[1])


# Ctrl-C landing the instant vkQueueSubmit returns (the wrapper signals the process right
# after the real call), the narrowest window: the submission must still be waited for.
CTRL_C_AT_SUBMIT_CHILD = """
    import json, os, signal
    import numpy as np
    import vkcore

    class SignalAfterSubmit:
        def __init__(self, lib):
            self._lib = lib
            self.armed = False

        def __getattr__(self, name):
            func = getattr(self._lib, name)
            if name != "vkQueueSubmit":
                return func

            def submit(*args):
                result = func(*args)
                if self.armed:
                    self.armed = False
                    os.kill(os.getpid(), signal.SIGINT)
                return result

            return submit

    dev = vkcore.Device(validation=True, pipeline_cache=False)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 5000)).astype(np.float32)
    t = vkcore.asarray(x, device=dev)
    proxy = SignalAfterSubmit(dev.lib)
    dev.lib = proxy
    outcomes = []
    for _ in range(5):
        proxy.armed = True
        try:
            vkcore.softmax(t).numpy()
            outcomes.append("finished")
        except KeyboardInterrupt:
            outcomes.append("interrupted")
    dev.lib = proxy._lib
    y = vkcore.softmax(t).numpy()
    correct = bool(np.abs(y - vkcore.reference.softmax(x)).max() <= 1e-6)
    dev.check()
    messages = dev.validation_messages
    dev.close()
    messages += dev.validation_messages[len(messages):]
    print(json.dumps({"outcomes": outcomes, "correct": correct, "messages": messages}))
"""


def test_ctrl_c_right_after_submit_still_waits():
    out = run_python(textwrap.dedent(CTRL_C_AT_SUBMIT_CHILD), env={"VKCORE_VALIDATION": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["outcomes"] == ["interrupted"] * 5
    assert result["correct"]
    assert result["messages"] == []


# Ctrl-C in the middle of Device.close: the teardown must finish (nothing left alive at
# vkDestroyDevice, no double destruction) and the interrupt arrive afterwards.
CTRL_C_IN_CLOSE_CHILD = """
    import json, os, signal
    import numpy as np
    import vkcore

    class SignalAfter:
        def __init__(self, lib, name):
            self._lib, self._name, self.fired = lib, name, 0

        def __getattr__(self, name):
            func = getattr(self._lib, name)
            if name != self._name:
                return func

            def call(*args):
                result = func(*args)
                self.fired += 1
                os.kill(os.getpid(), signal.SIGINT)
                return result

            return call

    report = {}
    for target in ("vkDestroyPipeline", "vkDestroyBuffer", "vkDestroyDevice"):
        dev = vkcore.Device(validation=True, pipeline_cache=False)
        x = np.random.default_rng(0).standard_normal((8, 3000)).astype(np.float32)
        t = vkcore.asarray(x, device=dev)
        vkcore.softmax(t)
        vkcore.softmax(x, device=dev, algorithm="safe")
        proxy = SignalAfter(dev.lib, target)
        dev.lib = proxy
        try:
            dev.close()
            outcome = "finished"
        except KeyboardInterrupt:
            outcome = "interrupted"
        report[target] = {"outcome": outcome, "fired": proxy.fired, "closed": dev.closed,
                          "messages": dev.validation_messages}
    print(json.dumps(report))
"""


def test_ctrl_c_during_close_finishes_the_teardown():
    out = run_python(textwrap.dedent(CTRL_C_IN_CLOSE_CHILD), env={"VKCORE_VALIDATION": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for target, result in report.items():
        assert result["fired"] >= 1, target
        assert result["outcome"] == "interrupted", (target, result)
        assert result["closed"], target
        assert result["messages"] == [], (target, result["messages"])
