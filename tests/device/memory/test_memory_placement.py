"""Buffers take their memory from the placement policy: by purpose, with flush/invalidate
for non-coherent memory, fallback when a type runs out, no leak when a call is cut short,
and `vkcore info` reporting all of it."""

from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from mesa25 import mesa25_env
from repo_paths import REPO

import vkcore
from vkcore.device import placement
from vkcore.device.memory import buffer, host_buffer, mapping
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.host_buffer import HostBuffer
from vkcore.device.memory.mapping import VK_WHOLE_SIZE, atom_range
from vkcore.tools.cli import main as cli_main


class Lib:
    """The device's ``lib`` with some calls replaced (cffi's lib cannot be patched)."""

    def __init__(self, real, **override):
        self._real = real
        self.__dict__.update(override)

    def __getattr__(self, name):
        return getattr(self._real, name)


# ---------------------------------------------------------------------- atom ranges
@pytest.mark.parametrize("atom", [1, 4, 64, 256, 4096])
def test_atom_range_covers_the_bytes_with_whole_atoms(atom):
    alloc = 10 * 4096 + 100  # not a multiple of any atom above 1... but 4
    for offset, size in [(0, 1), (1, 1), (atom - 1, 2), (3, 5000), (atom, atom), (0, alloc - 7)]:
        if offset + size > alloc:
            continue
        start, n = atom_range(offset, size, atom, alloc)
        assert start % atom == 0 and start <= offset
        end = alloc if n == VK_WHOLE_SIZE else start + n
        assert end >= offset + size, "the range covers every byte written"
        assert n == VK_WHOLE_SIZE or n % atom == 0, "a partial size only as VK_WHOLE_SIZE"
        assert end <= alloc
        assert start > offset - atom and (n == VK_WHOLE_SIZE or end < offset + size + atom)


def test_atom_range_edges():
    assert atom_range(0, 0, 64, 1024) is None  # nothing to flush
    assert atom_range(5, 0, 64, 1024) is None
    assert atom_range(0, 1024, 64, 1024) == (0, VK_WHOLE_SIZE)  # the whole allocation
    assert atom_range(0, 64, 64, 1024) == (0, 64)
    assert atom_range(63, 2, 64, 1024) == (0, 128)  # straddles an atom boundary
    assert atom_range(1000, 24, 64, 1024) == (960, VK_WHOLE_SIZE)  # last, partial atom
    assert atom_range(1000, 10, 64, 1000 + 10) == (960, VK_WHOLE_SIZE)  # clamped to the end
    assert atom_range(100, 28, 64, 1 << 20) == (64, 64)
    assert atom_range(7, 9, 1, 100) == (7, 9)  # atom 1: as is
    assert atom_range(7, 9, 0, 100) == (7, 9)  # a device reporting 0: as atom 1
    with pytest.raises(ValueError, match="exceeds"):
        atom_range(1000, 100, 64, 1024)
    with pytest.raises(ValueError, match="offset"):
        atom_range(-1, 4, 64, 1024)
    with pytest.raises(ValueError, match="atom"):
        atom_range(0, 4, -64, 1024)


# ---------------------------------------------------------------------- placement by purpose
def test_one_policy_decides():
    assert not hasattr(buffer, "choose_memory_type"), "the old second policy is gone"


def test_buffers_take_the_placement_of_their_purpose(device):
    for purpose in placement.PURPOSES:
        buf = Buffer(device, 1000, purpose=purpose)
        try:
            assert buf.choice == device.placement(purpose).preferred
            assert buf.purpose == purpose
            assert (buf.mapped is not None) == buf.choice.mapped
        finally:
            buf.destroy()
    t = vkcore.asarray(np.arange(16, dtype=np.float32), device=device)
    assert t.buffer.purpose == "resident"
    with pytest.raises(ValueError, match="purpose"):
        Buffer(device, 16, purpose="weights")


def test_staging_buffers_one_for_uploads_one_for_readbacks(monkeypatch, rng):
    monkeypatch.setenv("VKCORE_FORCE_STAGING", "1")
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        a = rng.standard_normal(5000).astype(np.float32)
        t = vkcore.asarray(a, device=dev)
        assert t.buffer.mapped is None and t.buffer.choice.mapped is False
        np.testing.assert_array_equal(t.numpy(), a)
        staging = dev.transfers.staging
        assert set(staging) == {"upload", "readback"}
        for purpose, buf in staging.items():
            assert buf.purpose == purpose and buf.choice == dev.placement(purpose).preferred
        cached = [t for t in dev.memory_types if t.flags & placement.HOST_CACHED]
        if any(t.flags & placement.HOST_VISIBLE for t in cached):
            kind = dev.memory_types[staging["readback"].choice.type_index]
            assert kind.flags & placement.HOST_CACHED, "readbacks from cached memory"
        assert dev.validation_messages == []


@pytest.mark.parametrize("limit", [0, 64])
def test_large_reads_of_uncached_mapped_memory_go_through_cached_staging(monkeypatch, rng, limit):
    """Where a resident type is mapped but uncached (a discrete GPU's full BAR, an APU's
    carve-out: placement.read_in_place_max is small there), writes stay in place but a
    read of more than the limit is copied into the readback staging buffer first; results
    are the same bytes either way. lavapipe's one type is cached, so the limit is faked."""
    monkeypatch.setattr(
        vkcore.device.context.DeviceContext, "read_in_place_max", lambda self, type_index: limit
    )
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        calls = {"download": 0, "upload": 0}
        for name in calls:
            real = getattr(dev.transfers, name)

            def counted(*args, _real=real, _name=name):
                calls[_name] += 1
                return _real(*args)

            monkeypatch.setattr(dev.transfers, name, counted)
        small = np.arange(16, dtype=np.uint8)  # 16 bytes
        a = rng.standard_normal((7, 1000)).astype(np.float32)
        ts, ta = vkcore.asarray(small, device=dev), vkcore.asarray(a, device=dev)
        assert ts.buffer.mapped is not None and ta.buffer.mapped is not None
        assert calls == {"download": 0, "upload": 0}, "writes to mapped memory stay in place"
        np.testing.assert_array_equal(ts.numpy(), small)
        assert calls["download"] == (1 if limit < small.nbytes else 0)
        before = calls["download"]
        np.testing.assert_array_equal(ta.numpy(), a)
        assert calls["download"] == before + 1, "a large read is staged"
        part = np.empty(300, np.float32)
        ta.buffer.read(part, offset=4 * 1234)  # at an offset, not the whole buffer
        np.testing.assert_array_equal(part, a.reshape(-1)[1234:1534])
        strided = np.empty((7, 2000), np.float32)[:, ::2]  # non-contiguous out
        ta.buffer.read(strided)
        np.testing.assert_array_equal(strided, a)
        out = vkcore.softmax(ta)  # a kernel's output, read after the kernel wrote it
        np.testing.assert_allclose(out.numpy(), vkcore.reference.softmax(a), atol=1e-6)
        del out
        gc.collect()  # the leased output's memory goes back to the pool (a new Buffer)
        out = vkcore.softmax(ta)  # ... and is leased again
        before = calls["download"]
        np.testing.assert_allclose(out.numpy(), vkcore.reference.softmax(a), atol=1e-6)
        assert calls["download"] == before + 1, "a pooled buffer keeps its read limit"
        before = calls["download"]
        got = vkcore.softmax(a, device=dev)  # numpy in, numpy out: the call's own buffers
        np.testing.assert_allclose(got, vkcore.reference.softmax(a), atol=1e-6)
        q = vkcore.quantize(a, device=dev)
        np.testing.assert_array_equal(q.q, vkcore.reference.quantize(a)[0])
        assert calls["download"] > before
        tokens = vkcore.sample(ta, temperature=0)  # greedy: the argmax of each row
        np.testing.assert_array_equal(np.asarray(tokens), np.argmax(a, axis=1))
        assert dev.validation_messages == []


# ---------------------------------------------------------------------- non-coherent memory
def _syncing_lib(dev, calls):
    real = dev.lib

    def recorder(name):
        fn = getattr(real, name)

        def call(handle, count, ranges):
            for i in range(count):
                calls.append((name, int(ranges[i].offset), int(ranges[i].size)))
            return fn(handle, count, ranges)

        return call

    return Lib(
        real,
        vkFlushMappedMemoryRanges=recorder("vkFlushMappedMemoryRanges"),
        vkInvalidateMappedMemoryRanges=recorder("vkInvalidateMappedMemoryRanges"),
    )


@pytest.mark.parametrize("staging", [False, True], ids=["mapped", "staging"])
def test_non_coherent_memory_is_flushed_and_invalidated(monkeypatch, rng, staging):
    """Coherent memory treated as non-coherent (legal to flush and invalidate): every host
    write is flushed and every host read invalidated, with atom-aligned ranges (the
    validation layer checks them), and results stay right."""
    monkeypatch.setattr(mapping, "ASSUME_NON_COHERENT", True)
    if staging:
        monkeypatch.setenv("VKCORE_FORCE_STAGING", "1")
    calls: list[tuple[str, int, int]] = []
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        monkeypatch.setattr(dev, "lib", _syncing_lib(dev, calls))
        atom = max(dev.info.non_coherent_atom_size, 1)
        buf = Buffer(dev, 3 * atom + 5)
        data = np.arange(7, dtype=np.uint8) + 1
        buf.write(data, offset=atom - 3)  # straddles an atom boundary
        out = np.zeros(7, np.uint8)
        buf.read(out, offset=atom - 3)
        np.testing.assert_array_equal(out, data)
        a = rng.standard_normal((9, 333)).astype(np.float32)
        t = vkcore.asarray(a, device=dev)
        np.testing.assert_array_equal(t.numpy(), a)
        np.testing.assert_allclose(
            vkcore.softmax(t).numpy(), vkcore.reference.softmax(a), atol=1e-6
        )
        np.testing.assert_allclose(
            vkcore.softmax(a, device=dev), vkcore.reference.softmax(a), atol=1e-6
        )
        if buf.mapped is not None:  # the copying byte access syncs too
            buf.mapped[2:4] = 9
            assert list(buf.mapped[2:4]) == [9, 9]
        buf.destroy()
        assert dev.validation_messages == []
    names = {name for name, _, _ in calls}
    assert names == {"vkFlushMappedMemoryRanges", "vkInvalidateMappedMemoryRanges"}
    for _, offset, size in calls:
        assert offset % atom == 0
        assert size == VK_WHOLE_SIZE or size % atom == 0


def test_coherent_memory_is_not_flushed(device):
    calls: list[tuple[str, int, int]] = []
    buf = Buffer(device, 4096)
    try:
        if buf.choice is None or not buf.choice.coherent or buf.mapped is None:
            pytest.skip("needs a coherent mapped type")
        lib = device.lib
        try:
            device.lib = _syncing_lib(device, calls)
            buf.write(np.ones(16, np.uint8))
            buf.read(np.empty(16, np.uint8))
        finally:
            device.lib = lib
    finally:
        buf.destroy()
    assert calls == []


# ---------------------------------------------------------------------- fallback
def _failing_first_resident_choice(dev, monkeypatch, result=-2, call="vkAllocateMemory"):
    """Fail ``call`` with ``result`` for the first choice of every resident buffer."""
    state = {"fail": False, "failed": 0}
    real_place = dev.placement

    def place(purpose, type_bits=0xFFFFFFFF):
        state["fail"] = purpose == "resident"
        return real_place(purpose, type_bits)

    real_call = getattr(dev.lib, call)

    def failing(*args):
        if state["fail"]:
            state["fail"] = False
            state["failed"] += 1
            return result
        return real_call(*args)

    monkeypatch.setattr(dev, "placement", place)
    monkeypatch.setattr(dev, "lib", Lib(dev.lib, **{call: failing}))
    return state


@pytest.mark.parametrize(
    "result, call",
    [(-2, "vkAllocateMemory"), (-1, "vkAllocateMemory"), (-5, "vkMapMemory")],
    ids=["out-of-device-memory", "out-of-host-memory", "map-failed"],
)
def test_a_full_memory_type_falls_back_to_the_next_choice_once_said(
    monkeypatch, rng, caplog, result, call
):
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        preferred = dev.placement("resident").preferred
        state = _failing_first_resident_choice(dev, monkeypatch, result, call)
        caplog.set_level(logging.WARNING, logger="vkcore")
        a = rng.standard_normal((6, 777)).astype(np.float32)
        tensors = [vkcore.asarray(a + i, device=dev) for i in range(3)]
        assert state["failed"] >= 3
        for i, t in enumerate(tensors):
            assert (
                t.buffer.choice != preferred
                and t.buffer.choice in dev.placement("resident").choices
            )
            np.testing.assert_array_equal(t.numpy(), a + i)
        np.testing.assert_allclose(
            vkcore.softmax(tensors[1]).numpy(), vkcore.reference.softmax(a + 1), atol=1e-6
        )
        warnings = [r for r in caplog.records if r.name == "vkcore" and "did not fit" in r.message]
        assert len(warnings) == 1, [r.message for r in caplog.records]
        assert "resident" in warnings[0].message
        assert dev.validation_messages == []


def test_other_errors_and_the_last_choice_failing_raise_without_leaks(monkeypatch):
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        before = dev.live_objects()["buffers"]
        real = dev.lib
        monkeypatch.setattr(dev, "lib", Lib(real, vkAllocateMemory=lambda *a: -2))
        with pytest.raises(vkcore.VulkanError, match="OUT_OF_DEVICE_MEMORY"):
            Buffer(dev, 4096)  # every choice fails: the error, after trying them all
        monkeypatch.setattr(dev, "lib", Lib(real, vkAllocateMemory=lambda *a: -3))
        with pytest.raises(vkcore.VulkanError, match="vkAllocateMemory"):
            Buffer(dev, 4096)  # not a lack of memory: no fallback
        monkeypatch.setattr(dev, "lib", real)
        assert dev.live_objects()["buffers"] == before
    assert dev.validation_messages == []


# ---------------------------------------------------------------------- interrupted creation
class _Tracker:
    """Counts live VkBuffers and VkDeviceMemory through a Lib; interrupts one call."""

    def __init__(self, dev, interrupt):
        real = dev.lib
        self.buffers, self.memories = set(), set()

        def wrap(name, after):
            fn = getattr(real, name)

            def call(*args):
                result = fn(*args)
                after(*args)
                if name == interrupt:
                    raise KeyboardInterrupt
                return result

            return call

        over = {
            "vkCreateBuffer": wrap("vkCreateBuffer", lambda d, i, a, out: self.buffers.add(out[0])),
            "vkDestroyBuffer": wrap("vkDestroyBuffer", lambda d, h, a: self.buffers.discard(h)),
            "vkAllocateMemory": wrap(
                "vkAllocateMemory", lambda d, i, a, out: self.memories.add(out[0])
            ),
            "vkFreeMemory": wrap("vkFreeMemory", lambda d, m, a: self.memories.discard(m)),
            "vkBindBufferMemory": wrap("vkBindBufferMemory", lambda *a: None),
            "vkMapMemory": wrap("vkMapMemory", lambda *a: None),
        }
        self.lib = Lib(real, **over)


_CREATION_CALLS = ["vkCreateBuffer", "vkAllocateMemory", "vkBindBufferMemory", "vkMapMemory"]


# Imported host memory is never mapped: the host already owns it.
@pytest.mark.parametrize(
    "kind, call",
    [("buffer", c) for c in _CREATION_CALLS] + [("host", c) for c in _CREATION_CALLS[:3]],
)
def test_ctrl_c_as_a_creation_call_returns_leaves_nothing_alive(monkeypatch, call, kind):
    """A KeyboardInterrupt raised just as vkCreateBuffer, vkAllocateMemory,
    vkBindBufferMemory or vkMapMemory returns: whatever the call made is freed, and the
    validation layer sees nothing alive at vkDestroyDevice."""
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        if kind == "host" and not host_buffer.can_import_host(dev):
            pytest.skip("this device does not import host memory")
        if (
            kind == "buffer"
            and call == "vkMapMemory"
            and not dev.placement("resident").preferred.mapped
        ):
            pytest.skip("resident buffers are not mapped here")
        before = dev.live_objects()
        tracker = _Tracker(dev, call)
        monkeypatch.setattr(dev, "lib", tracker.lib)
        array = host_buffer.page_aligned_empty((4096,), np.uint8)
        with pytest.raises(KeyboardInterrupt):
            Buffer(dev, 4096) if kind == "buffer" else HostBuffer(dev, array)
        assert tracker.buffers == set() and tracker.memories == set()
        monkeypatch.setattr(dev, "lib", tracker.lib._real)
        assert dev.live_objects() == before
        buf = Buffer(dev, 4096)  # the device still works
        buf.write(np.ones(4096, np.uint8))
        buf.destroy()
    assert dev.validation_messages == []  # includes what vkDestroyDevice would report


# ---------------------------------------------------------------------- vkcore info
def _info_json(capsys, *extra):
    assert cli_main([*extra, "info", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_info_json_reports_extensions_memory_and_placement(device, capsys):
    data = _info_json(capsys)
    inst = data["instance"]
    assert inst["enabled_extensions"] == device.instance.enabled_extensions  # both validated
    assert inst["create_flags"] == device.instance.create_flags
    assert inst["create_flags"] & 1 == int(inst["portability_enumeration"])
    assert inst["portability_enumeration"] == (
        "VK_KHR_portability_enumeration" in inst["enabled_extensions"]
    )
    assert data["device_extensions"] == device.enabled_extensions
    mem = data["memory"]
    assert [h["size"] for h in mem["heaps"]] == [s for s, _ in device.info.memory_heaps]
    for h, (_, flags) in zip(mem["heaps"], device.info.memory_heaps, strict=True):
        assert ("DEVICE_LOCAL" in h["flags"]) == bool(flags & 1)
    for t, (flags, heap) in zip(mem["types"], device.info.memory_types, strict=True):
        assert t["heap"] == heap and placement.flags_of(t["flags"]) == flags
    assert set(mem["placement"]) == set(placement.PURPOSES)
    for purpose, p in mem["placement"].items():
        want = device.placement(purpose).preferred
        assert (p["type_index"], p["mapped"], p["coherent"]) == (
            want.type_index,
            want.mapped,
            want.coherent,
        )
        assert p["heap"] == device.info.memory_types[p["type_index"]][1]
        assert p["heap_size"] == device.info.memory_heaps[p["heap"]][0]
        assert p["staged"] is (not p["mapped"])
        # Mapped cached memory (lavapipe's one type) is read in place whatever the size.
        kind = device.info.memory_types[p["type_index"]][0]
        if p["mapped"] and kind & placement.HOST_CACHED:
            assert p["reads_in_place_up_to"] is None
    if device.info.device_type == "cpu":  # lavapipe: one heap, mapped directly
        assert mem["placement"]["resident"]["mapped"] is True
    if "VK_EXT_memory_budget" in device.info.extensions:
        assert [b["heap"] for b in mem["budget"]] == list(range(len(mem["heaps"])))
    else:
        assert mem["budget"] == "not available"
    assert ("VK_EXT_memory_budget" in device.enabled_extensions) == (
        "VK_EXT_memory_budget" in device.info.extensions
    )


def test_info_text_names_placement_and_budget(capsys):
    assert cli_main(["info"]) == 0
    text = capsys.readouterr().out
    for needle in (
        "portability enumeration",
        "placement resident",
        "placement readback",
        "memory type 0",
        "heap 0",
        "device extensions",
    ):
        assert needle in text


def _run_info(env_extra):
    env = dict(os.environ, **env_extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-m", "vkcore", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_info_json_with_forced_staging_reports_resident_staged():
    mem = _run_info({"VKCORE_FORCE_STAGING": "1"})["memory"]
    assert mem["force_staging"] is True
    assert mem["placement"]["resident"]["mapped"] is False
    assert mem["placement"]["resident"]["staged"] is True
    assert mem["placement"]["resident"]["reads_in_place_up_to"] == 0  # every read staged
    assert mem["placement"]["readback"]["mapped"] is True


def test_info_reports_the_memory_budget_where_offered():
    """Mesa 25's lavapipe offers VK_EXT_memory_budget (Mesa 22's does not)."""
    data = _run_info(mesa25_env())
    assert "VK_EXT_memory_budget" in data["device_extensions"]
    budget = data["memory"]["budget"]
    assert isinstance(budget, list) and len(budget) == len(data["memory"]["heaps"])
    for b, h in zip(budget, data["memory"]["heaps"], strict=True):
        assert b["size"] == h["size"] and 0 < b["budget"] <= h["size"] and b["usage"] >= 0
