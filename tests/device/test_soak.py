"""Soak: many kernel calls and device lifetimes; memory and live Vulkan objects stay flat.

``make test`` runs the short version (a few seconds); ``make soak`` sets
``VKCORE_SOAK=long`` and prints the figures. Bounds, checked after a warm-up that runs
every kernel on every case once (so pipelines, recorded commands and reused buffers
exist before the baseline is taken):

* live objects: pipelines unchanged; buffers at most ``BUFFER_SLACK`` above the
  warm-up count at every sample; descriptor sets within the pool (``MAX_SETS``);
* with a new shape on every call, live buffers stay under ``DISTINCT_BUFFER_BOUND``;
* resident memory (VmRSS) grows by at most ``RSS_BOUND_MIB`` after the warm-up;
* creating and closing devices: every close is free of validation messages (the layer
  reports any Vulkan object left alive at vkDestroyDevice), every closed device is
  garbage-collected, and RSS after the last cycle is within ``CYCLE_RSS_BOUND_MIB`` of
  RSS after the second.
"""

from __future__ import annotations

import gc
import itertools
import os
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from checks import assert_matvec_matches

import vkcore
from vkcore import _vk
from vkcore.compute.repeat import KEPT_PER_KERNEL

pytestmark = pytest.mark.soak

LONG = os.environ.get("VKCORE_SOAK", "").strip().lower() == "long"
CALLS = 20_000 if LONG else 200
DISTINCT_CALLS = 3_000 if LONG else 150
DEVICE_CYCLES = 60 if LONG else 3
SAMPLE_EVERY = 50
ACTIVATIONS = ["float", "int8", "uint8"]

# Above the warm-up count: what the pools may still settle, plus the staging buffers the
# calls kept for exact repeats may hold as they come and go (vkcore.compute.repeat: at most
# KEPT_PER_KERNEL per kernel, softmax's owning x, y and partial states; the others bind
# buffers kept anyway).
BUFFER_SLACK = 8 + 3 * KEPT_PER_KERNEL
DISTINCT_BUFFER_BOUND = 256
MAX_SETS = 1024
RSS_BOUND_MIB = 32 if LONG else 24
CYCLE_RSS_BOUND_MIB = 24

SOFTMAX_SHAPES = [
    (1, 1),
    (1, 7),
    (3, 64),
    (5, 1000),
    (16, 257),
    (64, 4096),
    (2, 40_000),
    (300, 12),
    (1, 65_536),
]
QUANT_SHAPES = [(1, 1), (3, 64), (16, 257), (64, 1000), (5, 4099)]
QUANT_OPTIONS = [(8, True, True), (8, False, True), (4, True, False), (2, False, False)]

Call = Callable[[vkcore.Device, np.random.Generator, Any], None]


@dataclass(frozen=True)
class Kernel:
    """One kind of kernel call and the finite set of cases (shapes, modes) it cycles through."""

    call: Call
    cases: list[Any]


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def softmax_numpy(algorithm: str) -> Call:
    def call(dev: vkcore.Device, rng: np.random.Generator, shape: tuple[int, int]) -> None:
        x = (rng.standard_normal(shape) * 10).astype(np.float32)
        y = vkcore.softmax(x, algorithm=algorithm, device=dev)
        np.testing.assert_allclose(y, vkcore.reference.softmax(x), atol=1e-6, rtol=0)

    return call


def softmax_tensor(dev: vkcore.Device, rng: np.random.Generator, shape: tuple[int, int]) -> None:
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    t = vkcore.asarray(x, device=dev)
    y = vkcore.softmax(t)
    np.testing.assert_allclose(y.numpy(), vkcore.reference.softmax(x), atol=1e-6, rtol=0)
    t.buffer.destroy()
    y.buffer.destroy()


def quantize_roundtrip(dev: vkcore.Device, rng: np.random.Generator, case: Any) -> None:
    (m, n), (bits, symmetric, per_channel) = case
    w = (rng.standard_normal((m, n)) * 3).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=dev)
    try:
        q, s, z = vkcore.reference.quantize(w, bits, symmetric, per_channel)
        np.testing.assert_array_equal(qt.q, q)
        np.testing.assert_array_equal(vkcore.dequantize(qt), vkcore.reference.dequantize(q, s, z))
    finally:
        qt.release()


class ResidentWeights:
    """Quantized weights made once per (shape, options) and reused, as a model would."""

    def __init__(self) -> None:
        self.cache: dict[Any, tuple[Any, np.ndarray, np.ndarray, np.ndarray]] = {}

    def get(self, dev: vkcore.Device, key: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        if key not in self.cache:
            (m, n), (bits, symmetric, per_channel) = key
            w = np.random.default_rng(m * 7919 + n).standard_normal((m, n)).astype(np.float32)
            qt = vkcore.quantize(
                w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=dev
            )
            self.cache[key] = (qt, qt.q, qt.scale, qt.zero_point)
        return self.cache[key]

    def release(self) -> None:
        for qt, *_ in self.cache.values():
            qt.release()
        self.cache.clear()


def matvec_quantized(resident: ResidentWeights) -> Call:
    def call(dev: vkcore.Device, rng: np.random.Generator, case: Any) -> None:
        shape, options, activations, with_bias = case
        qt, q, s, z = resident.get(dev, (shape, options))
        m, n = qt.shape
        x = (rng.standard_normal(n) * 2).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32) if with_bias else None
        y = vkcore.matvec(qt, x, bias=bias, activations=activations, device=dev)
        assert_matvec_matches(
            y, vkcore.reference.matvec(q, s, z, x, bias, activations), activations
        )

    return call


def matvec_f32(dev: vkcore.Device, rng: np.random.Generator, shape: tuple[int, int]) -> None:
    w = rng.standard_normal(shape).astype(np.float32)
    x = rng.standard_normal(shape[1]).astype(np.float32)
    want = w.astype(np.float64) @ x.astype(np.float64)
    y = vkcore.matvec_f32(w, x, device=dev)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * (float(np.abs(want).max()) + 1))


def kernels(resident: ResidentWeights) -> dict[str, Kernel]:
    """Every kernel call the soak repeats, by name (quantization ones where vkcore has them)."""
    table = {
        "softmax_online": Kernel(softmax_numpy("online"), SOFTMAX_SHAPES),
        "softmax_safe": Kernel(softmax_numpy("safe"), SOFTMAX_SHAPES),
        "softmax_tensor": Kernel(softmax_tensor, SOFTMAX_SHAPES),
    }
    if hasattr(vkcore, "quantize"):
        weights = list(itertools.product(QUANT_SHAPES, QUANT_OPTIONS))
        table["quantize_dequantize"] = Kernel(quantize_roundtrip, weights)
        modes = list(itertools.product(QUANT_SHAPES, QUANT_OPTIONS, ACTIVATIONS, [False, True]))
        table["matvec"] = Kernel(matvec_quantized(resident), modes)
        table["matvec_f32"] = Kernel(matvec_f32, QUANT_SHAPES)
    return table


@dataclass
class Soak:
    calls: int = 0
    seconds: float = 0.0
    rss_start: float = 0.0
    rss_end: float = 0.0
    objects_start: dict[str, int] = field(default_factory=dict)
    objects_end: dict[str, int] = field(default_factory=dict)
    max_buffers: int = 0
    max_sets: int = 0
    kernels: list[str] = field(default_factory=list)

    def sample(self, dev: vkcore.Device) -> None:
        live = dev.live_objects()
        self.max_buffers = max(self.max_buffers, live["buffers"])
        self.max_sets = max(self.max_sets, live["descriptor_sets"])

    def report(self, title: str) -> str:
        return (
            f"{title}: {self.calls} calls ({', '.join(self.kernels)}) in {self.seconds:.1f} s; "
            f"RSS {self.rss_start:.1f} -> {self.rss_end:.1f} MiB; "
            f"objects {self.objects_start} -> {self.objects_end}; "
            f"max buffers {self.max_buffers}, max descriptor sets {self.max_sets}"
        )


def test_kernels_soak_flat_memory_and_objects(device):
    rng = np.random.default_rng(2024)
    resident = ResidentWeights()
    try:
        soak = run_soak(device, rng, kernels(resident))
    finally:
        resident.release()
    print("\n" + soak.report("soak, repeated shapes"))
    assert soak.objects_end["pipelines"] == soak.objects_start["pipelines"]
    assert soak.max_buffers <= soak.objects_start["buffers"] + BUFFER_SLACK
    assert soak.max_sets <= MAX_SETS
    assert soak.rss_end - soak.rss_start <= RSS_BOUND_MIB


def run_soak(device: vkcore.Device, rng: np.random.Generator, table: dict[str, Kernel]) -> Soak:
    """Warm up on every case of every kernel (twice: a buffer leased by one case and given
    back by its release may serve another case's size next time, so the pools settle on
    the second pass), then CALLS random calls, sampling objects."""
    for _ in range(2):
        for kernel in table.values():
            for case in kernel.cases:
                kernel.call(device, rng, case)
    names = sorted(table)
    soak = Soak(rss_start=rss_mib(), objects_start=device.live_objects(), kernels=names)
    start = time.perf_counter()
    for i in range(CALLS):
        kernel = table[names[i % len(names)]]
        kernel.call(device, rng, kernel.cases[int(rng.integers(len(kernel.cases)))])
        soak.calls += 1
        if i % SAMPLE_EVERY == 0:
            soak.sample(device)
    soak.seconds = time.perf_counter() - start
    soak.rss_end = rss_mib()
    soak.objects_end = device.live_objects()
    soak.sample(device)
    return soak


def test_distinct_shapes_keep_buffers_bounded(device):
    rng = np.random.default_rng(7)
    call = softmax_numpy("online")
    soak = Soak(
        rss_start=rss_mib(), objects_start=device.live_objects(), kernels=["softmax_online"]
    )
    start = time.perf_counter()
    for i in range(DISTINCT_CALLS):
        shape = (1 + i % 5, 3 + i)  # never the same size twice
        call(device, rng, shape)
        soak.calls += 1
        if i % 10 == 0:
            soak.sample(device)
    soak.seconds = time.perf_counter() - start
    soak.rss_end = rss_mib()
    soak.objects_end = device.live_objects()
    soak.sample(device)
    print("\n" + soak.report("soak, a new shape every call"))
    assert soak.max_buffers <= DISTINCT_BUFFER_BOUND, (
        f"{soak.max_buffers} live buffers after {soak.calls} calls of distinct shapes: "
        "whatever keeps buffers for reuse must bound their number, not only their bytes "
        "(many GPUs allow only 4096 memory allocations, maxMemoryAllocationCount)"
    )
    assert soak.max_sets <= MAX_SETS


def device_cycle(x: np.ndarray, expected: np.ndarray, cache_dir: str) -> weakref.ref:
    """Create a device, run every kernel kind once, close it; a weak reference to it."""
    dev = vkcore.Device(validation=True, cache_dir=cache_dir)
    np.testing.assert_allclose(vkcore.softmax(x, device=dev), expected, atol=1e-6, rtol=0)
    t = vkcore.asarray(x, device=dev)
    vkcore.softmax(t)  # Tensor path: placeholder buffer, memoized plan
    if hasattr(vkcore, "quantize"):
        qt = vkcore.quantize(x, device=dev)
        vkcore.matvec(qt, x[0], activations="uint8", device=dev)
    dev.close()  # releases t, qt and every pooled or kept object
    assert dev.validation_messages == [], dev.validation_messages
    return weakref.ref(dev)


def test_device_create_close_cycles(tmp_path):
    rss = []
    x = np.random.default_rng(3).standard_normal((4, 1000)).astype(np.float32)
    expected = vkcore.reference.softmax(x)
    closed = []
    start = time.perf_counter()
    for _ in range(DEVICE_CYCLES):
        closed.append(device_cycle(x, expected, str(tmp_path / "cache")))
        gc.collect()
        rss.append(rss_mib())
    seconds = time.perf_counter() - start
    alive = sum(ref() is not None for ref in closed)
    base = rss[1] if len(rss) > 1 else rss[0]
    print(
        f"\nsoak, devices: {DEVICE_CYCLES} create/run/close cycles in {seconds:.1f} s; "
        f"RSS after cycle 2 {base:.1f} MiB, after the last {rss[-1]:.1f} MiB; "
        f"closed devices still alive: {alive}"
    )
    assert alive == 0, "something still refers to closed devices (they are never freed)"
    assert rss[-1] - base <= CYCLE_RSS_BOUND_MIB


def test_leak_check_can_fail():
    """The object tracker does report a Vulkan object left alive at device destruction."""
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    keep = _vk.Keep()
    info = keep.struct("VkBufferCreateInfo", size=256, usage=0x20, sharingMode=0)
    out = dev.ffi.new("VkBuffer*")
    _vk.check(dev.lib.vkCreateBuffer(dev.handle, info, dev.ffi.NULL, out), "vkCreateBuffer")
    dev.close()
    assert any("has not been destroyed" in m for m in dev.validation_messages)
