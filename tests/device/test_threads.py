"""One Device shared by eight Python threads: correct results, serialized queue and cache.

Softmax, transfers, quantize/dequantize and every matvec mode (also on one shared
QuantizedTensor) run concurrently.

Each thread checks its own results against the numpy references, so a thread that saw
another thread's buffer, or a half-written one, fails. A tracking wrapper around the
device's Vulkan functions proves that a pipeline-cache save never overlaps a pipeline
creation on the same cache.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from checks import assert_matvec_matches

import vkcore
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels.common import pack_u32

THREADS = 8

# data[i] = i * scale + offset; the workgroup size is a specialization constant, so every
# size is a distinct pipeline made from the same SPIR-V.
FILL_SHADER = """\
#version 450
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) buffer Out { uint data[]; };
layout(push_constant) uniform Push { uint scale; uint offset; uint count; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < count) data[i] = i * scale + offset;
}
"""


def run_threads(
    work: Callable[[int], Any], count: int = THREADS, timeout: float = 120
) -> list[Any]:
    """Run ``work(index)`` on ``count`` threads started together; re-raise the first error."""
    start = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            start.wait()
            results[index] = work(index)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread hung (deadlock?)"
    if errors:
        raise errors[0]
    return results


def random_rows(rng: np.random.Generator) -> np.ndarray:
    rows = int(rng.integers(1, 40))
    cols = int(rng.choice([1, 3, 4, 63, 64, 257, 1000, 4096, 10000]))
    x = (rng.standard_normal((rows, cols)) * rng.choice([0.1, 1.0, 30.0])).astype(np.float32)
    return x


def test_eight_threads_softmax_on_one_device(device):
    def work(index: int) -> int:
        rng = np.random.default_rng(100 + index)
        calls = 0
        for step in range(20):
            x = random_rows(rng)
            algorithm = "online" if (index + step) % 2 == 0 else "safe"
            if step % 3 == 0:  # the Tensor path: data stays on the device between steps
                t = vkcore.asarray(x, device=device)
                y = vkcore.softmax(t, algorithm=algorithm).numpy()
                t.buffer.destroy()
            else:
                y = vkcore.softmax(x, algorithm=algorithm, device=device)
            np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0)
            calls += 1
        return calls

    assert sum(run_threads(work)) == THREADS * 20


def test_eight_threads_upload_download_never_mix(device):
    dtypes = ["float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32"]

    def work(index: int) -> int:
        rng = np.random.default_rng(200 + index)
        for step in range(40):
            shape = (int(rng.integers(1, 50)), int(rng.integers(1, 300)))
            a = (rng.standard_normal(shape) * 100).astype(dtypes[(index + step) % len(dtypes)])
            t = vkcore.asarray(a, device=device)
            np.testing.assert_array_equal(t.numpy(), a)
            t.buffer.destroy()
        return 40

    assert sum(run_threads(work)) == THREADS * 40


class TrackingLib:
    """Wraps a device's cffi ``lib``: counts pipeline creations and cache reads in flight.

    A creation and a save (vkGetPipelineCacheData, vkMergePipelineCaches) that overlap in
    time on the same cache are recorded in ``overlaps``. Each tracked call also sleeps a
    little to widen the window a missing lock would leave open.
    """

    SAVE_CALLS = ("vkGetPipelineCacheData", "vkMergePipelineCaches")

    def __init__(self, lib: Any) -> None:
        self._lib = lib
        self._guard = threading.Lock()
        self.creating = 0
        self.saving = 0
        self.creations = 0
        self.saves = 0
        self.overlaps: list[str] = []

    def _tracked(self, name: str, kind: str) -> Callable[..., Any]:
        func = getattr(self._lib, name)

        def call(*args: Any) -> Any:
            with self._guard:
                other = self.saving if kind == "creating" else self.creating
                if other:
                    self.overlaps.append(
                        f"{name} while {'saving' if kind == 'creating' else 'creating'}"
                    )
                setattr(self, kind, getattr(self, kind) + 1)
            try:
                time.sleep(0.001)
                return func(*args)
            finally:
                with self._guard:
                    setattr(self, kind, getattr(self, kind) - 1)
                    if kind == "creating":
                        self.creations += 1
                    else:
                        self.saves += 1

        return call

    def __getattr__(self, name: str) -> Any:
        if name == "vkCreateComputePipelines":
            return self._tracked(name, "creating")
        if name in self.SAVE_CALLS:
            return self._tracked(name, "saving")
        return getattr(self._lib, name)


def test_cache_save_never_runs_during_a_pipeline_creation(tmp_path, monkeypatch):
    shaders = tmp_path / "shaders"
    shaders.mkdir()
    (shaders / "fill.comp").write_text(FILL_SHADER)
    monkeypatch.setenv("VKCORE_SHADER_DIR", str(shaders))
    with vkcore.Device(validation=True, cache_dir=str(tmp_path / "cache")) as dev:
        if dev.pipeline_cache.path is None:
            pytest.skip("pipeline cache persistence is disabled here")
        tracker = TrackingLib(dev.lib)
        dev.lib = tracker
        stop = threading.Event()
        saves = []

        def saver() -> None:
            while not stop.is_set():
                # Directly on the cache (no device lock) and through the device.
                dev.pipeline_cache.save(force=True)
                saves.append(dev.save_pipeline_cache())

        def creator(index: int) -> int:
            out = vkcore.Tensor.empty((1000,), np.uint32, dev)
            made = 0
            for size in range(1 + index, 129, THREADS - 1):  # disjoint workgroup sizes
                pipe = vkcore.Program.builtin("fill.comp", workgroup=size, device=dev).pipeline
                groups = -(-1000 // size)
                push = pack_u32(size, index, 1000)
                dev.submitter.run([Dispatch(pipe, (out.buffer,), push, (groups, 1, 1))])
                expected = np.arange(1000, dtype=np.uint32) * np.uint32(size) + np.uint32(index)
                np.testing.assert_array_equal(out.numpy(), expected)
                made += 1
            out.buffer.destroy()
            return made

        save_thread = threading.Thread(target=saver, daemon=True)
        save_thread.start()
        try:
            made = run_threads(creator, count=THREADS - 1)
        finally:
            stop.set()
            save_thread.join(60)
        assert not save_thread.is_alive()
        dev.lib = tracker._lib
        assert sum(made) == 128
        assert tracker.creations == 128
        assert tracker.saves > 0 and saves, "the saver never ran"
        assert tracker.overlaps == []
        assert dev.validation_messages == []


def test_close_while_threads_work_fails_cleanly(rng):
    """Closing a device other threads are using: they finish or get a clear error, no crash."""
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    x = rng.standard_normal((64, 2048)).astype(np.float32)
    expected = vkcore.reference.softmax(x)
    started = threading.Event()

    def work(index: int) -> str:
        try:
            for _ in range(200):
                if index % 2:
                    y = vkcore.softmax(x, device=dev)
                    np.testing.assert_allclose(y, expected, atol=1e-6, rtol=0)
                else:
                    t = vkcore.asarray(x, device=dev)
                    np.testing.assert_array_equal(t.numpy(), x)
                started.set()
            return "finished"
        except RuntimeError as exc:
            assert "closed" in str(exc) or "released" in str(exc), exc
            return "refused"

    closer = threading.Thread(target=lambda: (started.wait(30), dev.close()), daemon=True)
    closer.start()
    outcomes = run_threads(work, count=4)
    closer.join(30)
    assert not closer.is_alive()
    assert dev.closed
    assert set(outcomes) <= {"finished", "refused"}
    assert dev.validation_messages == []


@pytest.mark.skipif(not hasattr(vkcore, "quantize"), reason="this vkcore has no quantization")
def test_eight_threads_quantize_and_matvec(device):
    """Each thread quantizes its own weights and also shares one QuantizedTensor."""
    rng = np.random.default_rng(9)
    shared_w = rng.standard_normal((40, 300)).astype(np.float32)
    shared = vkcore.quantize(shared_w, bits=8, symmetric=False, device=device)
    sq, ss, sz = shared.q, shared.scale, shared.zero_point
    options = [(8, True, True), (8, False, True), (4, True, False), (2, False, False)]
    modes = ["float", "int8", "uint8"]

    def check_matvec(qt, q, s, z, x, bias, activations):
        y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=device)
        assert_matvec_matches(
            y, vkcore.reference.matvec(q, s, z, x, bias, activations), activations
        )

    def work(index: int) -> int:
        local = np.random.default_rng(300 + index)
        bits, symmetric, per_channel = options[index % len(options)]
        m, n = int(local.integers(1, 50)), int(local.integers(1, 700))
        w = (local.standard_normal((m, n)) * 2).astype(np.float32)
        qt = vkcore.quantize(
            w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device
        )
        try:
            q, s, z = vkcore.reference.quantize(w, bits, symmetric, per_channel)
            np.testing.assert_array_equal(qt.q, q)
            np.testing.assert_array_equal(
                vkcore.dequantize(qt), vkcore.reference.dequantize(q, s, z)
            )
            for step in range(12):
                activations = modes[(index + step) % 3]
                x = local.standard_normal(n).astype(np.float32)
                bias = local.standard_normal(m).astype(np.float32) if step % 2 else None
                check_matvec(qt, q, s, z, x, bias, activations)
                xs = local.standard_normal(300).astype(np.float32)
                check_matvec(shared, sq, ss, sz, xs, None, activations)
        finally:
            qt.release()
        return 12

    try:
        assert sum(run_threads(work)) == THREADS * 12
    finally:
        shared.release()


def test_pooled_results_across_threads(device):
    """Large softmax results come from the device's host pool and go back to it from
    whichever thread drops them: no result ever shares memory with another live one."""
    from vkcore import reference

    def work(index: int) -> int:
        rng = np.random.default_rng(index)
        held = []
        for step in range(6):
            x = rng.standard_normal((64 + index % 3, 4096)).astype(np.float32)  # >= 1 MiB
            y = vkcore.softmax(x, device=device)
            assert type(y.base).__name__ == "_Lent"
            np.testing.assert_allclose(y, reference.softmax(x), rtol=0, atol=1e-6)
            held.append((y, y.copy()))
            if step % 2:
                held.pop(0)  # dropped here, maybe while another thread is inside a call
        for y, expected in held:
            np.testing.assert_array_equal(y, expected)  # nobody wrote into a held result
        return len(held)

    assert run_threads(work) == [3] * THREADS
