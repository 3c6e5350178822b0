"""Lifetimes: dropped devices are collected, forked children never touch the parent's
Vulkan objects, and no numpy array outlives the memory it shows."""

from __future__ import annotations

import gc
import logging
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
from checks import python_path_with
from repo_paths import SUPPORT

import vkcore
from vkcore.base.per_device import PerDeviceMap
from vkcore.device.memory.buffer import Buffer

DROPPED_DEVICES = 20
# RSS after the 20th dropped device against after the 5th (100 leaked devices took
# 119 -> 900 MiB: about 8 MiB each, so 15 leaked would add about 120 MiB).
DROPPED_RSS_BOUND_MIB = 24


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found")


@pytest.fixture
def vk_warnings(caplog):
    """Warnings on the vkcore logger (validation messages of dropped devices land there)."""
    caplog.set_level(logging.WARNING, logger="vkcore")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "vkcore"]


def use_every_kernel(dev: vkcore.Device, x: np.ndarray, big: np.ndarray) -> list:
    """Run softmax (numpy and Tensor), quantize, dequantize and every matvec mode; what
    a user might keep: a pooled numpy result, which must not keep the device alive."""
    vkcore.softmax(x, device=dev)
    vkcore.softmax(vkcore.asarray(x, device=dev))
    qt = vkcore.quantize(x, device=dev)
    vkcore.dequantize(qt)
    for activations in ("float", "int8", "uint8"):
        vkcore.matvec(qt, x[0], activations=activations)
    vkcore.matvec_f32(x, x[0], device=dev)
    return [vkcore.softmax(big, device=dev)]  # from the device's host-array pool


def test_dropped_devices_are_collected(vk_warnings):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 1000)).astype(np.float32)
    big = rng.standard_normal((256, 1024)).astype(np.float32)  # 1 MiB: a pooled result
    refs, kept, rss = [], [], {}
    for i in range(DROPPED_DEVICES):
        dev = vkcore.Device(validation=i == 0, pipeline_cache=False)
        kept = use_every_kernel(dev, x, big)  # the latest result stays alive
        refs.append(weakref.ref(dev))
        del dev  # dropped without close()
        gc.collect()
        if i in (4, DROPPED_DEVICES - 1):
            rss[i] = rss_mib()
    alive = sum(ref() is not None for ref in refs)
    assert alive == 0, f"{alive} of {len(refs)} dropped devices were never collected"
    growth = rss[DROPPED_DEVICES - 1] - rss[4]
    assert growth <= DROPPED_RSS_BOUND_MIB, f"RSS grew {growth:.1f} MiB over dropped devices"
    # The first had the validation layer, which reports every Vulkan object still
    # alive at vkDestroyDevice: collection destroyed everything, in a safe order.
    assert vk_warnings() == []
    want = vkcore.reference.softmax(big)
    np.testing.assert_allclose(kept[-1], want, atol=1e-6, rtol=0)  # outlived its device


def test_dropped_devices_do_not_pile_up_without_explicit_collection():
    """Dropped devices wait for the cyclic collector; creating a device while a few are
    open runs it, so a loop that drops devices never holds more than a few at once."""
    from vkcore.device.device import _COLLECT_WHEN_OPEN

    x = np.random.default_rng(12).standard_normal((4, 256)).astype(np.float32)
    gc.collect()
    refs, most = [], 0
    for _ in range(3 * _COLLECT_WHEN_OPEN):
        dev = vkcore.Device(pipeline_cache=False)
        vkcore.softmax(x, device=dev)
        vkcore.matvec(vkcore.quantize(x, device=dev), x[0])
        refs.append(weakref.ref(dev))
        del dev
        most = max(most, sum(ref() is not None for ref in refs))
    assert most <= _COLLECT_WHEN_OPEN + 1, f"{most} dropped devices alive at once"


def test_collected_buffer_handles_are_freed_by_close(vk_warnings):
    """The collector clears weak references before it runs finalizers, so a device being
    collected with its buffers cannot reach them: it frees their recorded handles, and
    the buffers' own destroy() then calls nothing (no double free, no call on a
    destroyed VkDevice)."""
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    buf = Buffer(dev, 4096)
    if dev.info.texel_formats:
        buf.view(sorted(dev.info.texel_formats)[0])  # a texel view to free as well
    dead = weakref.ref(type("Gone", (), {})())  # a weak reference already cleared
    dev._buffers[id(buf)] = dead  # as the collector leaves it
    dev.close()
    assert dev.validation_messages == []  # the layer names any object left alive
    buf.destroy()
    buf.destroy()
    assert dev.validation_messages == [] and vk_warnings() == []


def test_per_device_state_lives_on_the_device():
    table: PerDeviceMap[object] = PerDeviceMap()
    a = vkcore.Device(pipeline_cache=False)
    b = vkcore.Device(pipeline_cache=False)
    table[a] = {"device": a}  # state that refers back to its device
    assert table.setdefault(b, [b]) == [b] and table.setdefault(b, None) == [b]
    assert a in table and table[a]["device"] is a and table.get(a)["device"] is a
    assert len(table) == 2 and set(table) == {a, b} and dict(table.items())[b] == [b]
    assert table.pop(b) == [b] and b not in table and table.pop(b, "none") == "none"
    with pytest.raises(KeyError):
        table[b]
    assert table.get(object()) is None and object() not in table
    with pytest.raises(TypeError, match="Device"):
        table[object()] = 1
    a.close()
    assert a not in table and len(table) == 0  # close drops it
    table[b] = [b]
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None, "an entry that refers to its device kept the device alive"
    assert len(table) == 0


def run_fork_scenario(scenario: str) -> subprocess.CompletedProcess:
    worker = SUPPORT / "fork_worker.py"
    root = str(Path(vkcore.__file__).resolve().parents[1])  # this vkcore, not another
    env = dict(os.environ, VKCORE_VALIDATION="0", PYTHONPATH=python_path_with(root))
    try:
        return subprocess.run(
            [sys.executable, str(worker), scenario],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fork scenario {scenario!r} hung: {exc.stdout!r} {exc.stderr!r}")


@pytest.mark.parametrize("scenario", ["untouched", "kernels", "own_device", "pool"])
def test_fork_child_never_touches_parent_objects(scenario):
    """A forked child exits promptly with its own status whether or not it uses vkcore;
    every kernel on an inherited object raises RuntimeError naming the parent process; the
    child's default device is a new one; the parent's objects keep working."""
    out = run_fork_scenario(scenario)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "OK" in out.stdout, text
    assert "FAIL" not in out.stdout, text


def test_inherited_device_message(device):
    """The message a forked child sees, checked without forking."""
    dev = vkcore.Device(pipeline_cache=False)
    t = vkcore.asarray(np.ones(8, np.float32), device=dev)
    handle = dev.handle
    dev._abandon()  # what the fork hook does in the child
    with pytest.raises(RuntimeError, match="belongs to the parent process"):
        vkcore.softmax(np.ones(8, np.float32), device=dev)
    with pytest.raises(RuntimeError, match="belongs to the parent process"):
        t.numpy()
    dev.close()  # nothing to do, no Vulkan call
    # This process is not a child: destroy for real what the test abandoned.
    dev.lib.vkDestroyDevice(handle, dev.ffi.NULL)


# ---------------------------------------------------------------------- views and reads
@pytest.fixture(params=["mapped", "staging"])
def any_path_device(request, monkeypatch):
    if request.param == "staging":
        monkeypatch.setenv("VKCORE_FORCE_STAGING", "1")
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        yield dev
        assert dev.validation_messages == []


# Non-contiguous arrays to read into: (label, owner shape for an (m, n) view, the view).
STRIDED = [
    ("every other column", lambda m, n: (m, 2 * n), lambda o: o[:, ::2]),
    ("transposed", lambda m, n: (n, m), lambda o: o.T),
    ("reversed rows", lambda m, n: (m, n), lambda o: o[::-1]),
    ("reversed columns", lambda m, n: (m, n), lambda o: o[:, ::-1]),
    ("window", lambda m, n: (m + 3, n + 5), lambda o: o[1:-2, 2:-3]),
]


def strided_outputs(shape: tuple[int, int], dtype) -> list[tuple[str, np.ndarray, np.ndarray]]:
    m, n = shape
    out = []
    for label, owner_shape, view_of in STRIDED:
        owner = np.full(owner_shape(m, n), 99, dtype)  # 99: what must stay untouched
        out.append((label, view_of(owner), owner))
    return out


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint16"])
def test_read_into_non_contiguous_fills_it(any_path_device, dtype):
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((6, 10)) * 50).astype(dtype)
    t = vkcore.asarray(a, device=any_path_device)
    outputs = strided_outputs(a.shape, a.dtype)
    for (label, _, view_of), (_, view, owner) in zip(STRIDED, outputs, strict=True):
        assert not view.flags.c_contiguous
        expected = owner.copy()
        view_of(expected)[...] = a
        t.buffer.read(view)
        np.testing.assert_array_equal(view, a, err_msg=label)
        np.testing.assert_array_equal(owner, expected, err_msg=label)  # nothing else written


def test_write_from_non_contiguous(any_path_device):
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    for label, view, _ in strided_outputs(a.shape, a.dtype):
        view[...] = a
        t = vkcore.Tensor.empty(a.shape, np.float32, any_path_device)
        t.buffer.write(view)
        np.testing.assert_array_equal(t.numpy(), a, err_msg=label)


def test_read_and_write_refuse_what_cannot_be_honoured(device):
    t = vkcore.asarray(np.arange(16, dtype=np.float32), device=device)
    buf = t.buffer
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        buf.read(frozen)
    with pytest.raises(ValueError, match="does not fit"):
        buf.read(np.zeros(17, np.float32))
    with pytest.raises(ValueError, match="does not fit"):
        buf.read(np.zeros(4, np.float32), offset=-4)
    with pytest.raises(ValueError, match="does not fit"):
        buf.write(np.zeros(4, np.float32), offset=60)
    with pytest.raises(TypeError, match="numpy array"):
        buf.read([0.0] * 16)
    with pytest.raises(TypeError, match="offset"):
        buf.read(np.zeros(4, np.float32), offset=1.5)
    out = np.zeros(4, np.float32)
    buf.read(out, offset=48)
    np.testing.assert_array_equal(out, [12, 13, 14, 15])


def test_no_array_views_mapped_memory(device):
    """``Buffer.mapped`` gives copies, never a view: nothing can read the mapping after
    the buffer is gone (it would read freed memory or crash)."""
    t = vkcore.asarray(np.arange(8, dtype=np.float32), device=device)
    buf = t.buffer
    if buf.mapped is None:
        pytest.skip("this device's buffers are not mapped")
    got = buf.mapped[:]
    assert isinstance(got, np.ndarray) and got.nbytes == 32
    got[:] = 0  # a copy: the buffer is unchanged
    np.testing.assert_array_equal(t.numpy(), np.arange(8, dtype=np.float32))
    access = buf.mapped
    access[0:4] = np.float32(7).reshape(1).view(np.uint8)  # assignment writes through
    assert t.numpy()[0] == 7
    buf.destroy()
    assert buf.mapped is None
    with pytest.raises(RuntimeError, match="released"):
        access[:4]
    with pytest.raises(RuntimeError, match="released"):
        access[0:4] = b"\0\0\0\0"


def test_pooled_result_outlives_its_device():
    x = np.random.default_rng(4).standard_normal((512, 1024)).astype(np.float32)
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    y = vkcore.softmax(x, device=dev)  # a pooled, imported host array
    view = y[3:7]
    ref = weakref.ref(dev)
    dev.close()
    del dev, y
    gc.collect()
    assert ref() is None, "a pooled numpy result kept its device alive"
    np.testing.assert_allclose(view, vkcore.reference.softmax(x)[3:7], atol=1e-6, rtol=0)
    view[...] = 1.0  # still ordinary, writable memory


def test_released_buffer_messages(device):
    t = vkcore.asarray(np.ones(4, np.float32), device=device)
    t.buffer.destroy()
    with pytest.raises(RuntimeError, match="released") as exc:
        t.numpy()
    assert "closed" not in str(exc.value) and "open" in str(exc.value)
    dev = vkcore.Device(pipeline_cache=False)
    u = vkcore.asarray(np.ones(4, np.float32), device=dev)
    dev.close()
    with pytest.raises(RuntimeError, match="closed"):
        u.numpy()
