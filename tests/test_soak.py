"""Soak: many kernel calls and device lifetimes; memory and live Vulkan objects stay flat.

``make test`` runs the short version (a few seconds); ``make soak`` sets
``VKCORE_SOAK=long`` and prints the figures. Bounds, checked after a warm-up that runs
every kernel on every shape once (so pipelines, recorded commands and reused buffers
exist before the baseline is taken):

* live objects: pipelines unchanged; buffers at most ``BUFFER_SLACK`` above the
  warm-up count at every sample; descriptor sets within the pool (``MAX_SETS``);
* with a new shape on every call, live buffers stay under ``DISTINCT_BUFFER_BOUND``;
* resident memory (VmRSS) grows by at most ``RSS_BOUND_MIB`` after the warm-up;
* creating and closing devices: every close is free of validation messages (the layer
  reports any Vulkan object left alive at vkDestroyDevice), and RSS after the last
  cycle is within ``CYCLE_RSS_BOUND_MIB`` of RSS after the second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import vkcore
from vkcore import vkapi

pytestmark = pytest.mark.soak

LONG = os.environ.get("VKCORE_SOAK", "").strip().lower() == "long"
CALLS = 20_000 if LONG else 200
DISTINCT_CALLS = 3_000 if LONG else 150
DEVICE_CYCLES = 60 if LONG else 3
SAMPLE_EVERY = 50

BUFFER_SLACK = 8
DISTINCT_BUFFER_BOUND = 256
MAX_SETS = 1024
RSS_BOUND_MIB = 32 if LONG else 24
CYCLE_RSS_BOUND_MIB = 24

SHAPES = [
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

Kernel = Callable[[vkcore.Device, np.random.Generator, tuple[int, int]], None]


def rss_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def softmax_numpy(algorithm: str) -> Kernel:
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


def kernels() -> dict[str, Kernel]:
    """Every kernel call the soak repeats, by name."""
    return {
        "softmax_online": softmax_numpy("online"),
        "softmax_safe": softmax_numpy("safe"),
        "softmax_tensor": softmax_tensor,
    }


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

    def sample(self, dev: vkcore.Device) -> None:
        live = dev.live_objects()
        self.max_buffers = max(self.max_buffers, live["buffers"])
        self.max_sets = max(self.max_sets, live["descriptor_sets"])

    def report(self, title: str) -> str:
        return (
            f"{title}: {self.calls} calls in {self.seconds:.1f} s; "
            f"RSS {self.rss_start:.1f} -> {self.rss_end:.1f} MiB; "
            f"objects {self.objects_start} -> {self.objects_end}; "
            f"max buffers {self.max_buffers}, max descriptor sets {self.max_sets}"
        )


def test_kernels_soak_flat_memory_and_objects(device, record_property):
    rng = np.random.default_rng(2024)
    table = kernels()
    for call in table.values():  # warm-up: every kernel on every shape
        for shape in SHAPES:
            call(device, rng, shape)
    names = sorted(table)
    soak = Soak(rss_start=rss_mib(), objects_start=device.live_objects())
    start = time.perf_counter()
    for i in range(CALLS):
        table[names[i % len(names)]](device, rng, SHAPES[int(rng.integers(len(SHAPES)))])
        soak.calls += 1
        if i % SAMPLE_EVERY == 0:
            soak.sample(device)
    soak.seconds = time.perf_counter() - start
    soak.rss_end = rss_mib()
    soak.objects_end = device.live_objects()
    soak.sample(device)
    print("\n" + soak.report("soak, repeated shapes"))
    record_property("soak", soak.report("repeated shapes"))

    assert soak.objects_end["pipelines"] == soak.objects_start["pipelines"]
    assert soak.max_buffers <= soak.objects_start["buffers"] + BUFFER_SLACK
    assert soak.max_sets <= MAX_SETS
    assert soak.rss_end - soak.rss_start <= RSS_BOUND_MIB


def test_distinct_shapes_keep_buffers_bounded(device):
    rng = np.random.default_rng(7)
    call = softmax_numpy("online")
    soak = Soak(rss_start=rss_mib(), objects_start=device.live_objects())
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


def test_device_create_close_cycles(tmp_path):
    rss = []
    x = np.random.default_rng(3).standard_normal((4, 1000)).astype(np.float32)
    expected = vkcore.reference.softmax(x)
    start = time.perf_counter()
    for cycle in range(DEVICE_CYCLES):
        dev = vkcore.Device(validation=True, cache_dir=str(tmp_path / "cache"))
        np.testing.assert_allclose(vkcore.softmax(x, device=dev), expected, atol=1e-6, rtol=0)
        t = vkcore.asarray(x, device=dev)  # left for close() to release
        assert t.device is dev
        dev.close()
        assert dev.validation_messages == [], f"cycle {cycle}: {dev.validation_messages}"
        rss.append(rss_mib())
    seconds = time.perf_counter() - start
    base = rss[1] if len(rss) > 1 else rss[0]
    print(
        f"\nsoak, devices: {DEVICE_CYCLES} create/run/close cycles in {seconds:.1f} s; "
        f"RSS after cycle 2 {base:.1f} MiB, after the last {rss[-1]:.1f} MiB"
    )
    assert rss[-1] - base <= CYCLE_RSS_BOUND_MIB


def test_leak_check_can_fail():
    """The object tracker does report a Vulkan object left alive at device destruction."""
    dev = vkcore.Device(validation=True, pipeline_cache=False)
    keep = vkapi.Keep()
    info = keep.struct("VkBufferCreateInfo", size=256, usage=0x20, sharingMode=0)
    out = dev.ffi.new("VkBuffer*")
    vkapi.check(dev.lib.vkCreateBuffer(dev.handle, info, dev.ffi.NULL, out), "vkCreateBuffer")
    dev.close()
    assert any("has not been destroyed" in m for m in dev.validation_messages)

