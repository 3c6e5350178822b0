"""Command recording and submission: dispatches, barriers, one fence, timestamps.

A kernel call is a list of :class:`Dispatch` steps run in order in one command buffer,
separated by compute-to-compute barriers and closed by a compute-to-host barrier, so
mapped memory reads the results once the fence has signalled. Submission holds the
device lock, so several threads may share one Device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import vkapi

if TYPE_CHECKING:
    from .device import Device
    from .memory import Buffer
    from .pipeline import Pipeline

_VK_TIMEOUT = 2
_WAIT_SLICE_NS = 100_000_000  # wake up to let Python handle Ctrl-C
_STAGING_MAX = 64 << 20
# Recorded command buffers kept for repeated calls on long-lived buffers (see Submitter.run).
_MAX_RECORDED = 32

_COMPUTE = 0x800  # VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
_TRANSFER = 0x1000
_HOST = 0x4000
_TOP = 0x1
_BOTTOM = 0x2000
_SHADER_READ, _SHADER_WRITE = 0x20, 0x40
_TRANSFER_READ, _TRANSFER_WRITE = 0x800, 0x1000
_HOST_READ, _HOST_WRITE = 0x2000, 0x4000


def _raise_deferred(interrupted: list[BaseException]) -> None:
    """Raise the last Ctrl-C a wait held back, if any. It leaves the list as it is raised
    and is never bound to a name, so no frame keeps the exception its own traceback refers
    to: that cycle would keep every buffer on the stack (and its device memory) alive
    until the collector runs."""
    if interrupted:
        del interrupted[:-1]
        raise interrupted.pop()


@dataclass(frozen=True)
class Dispatch:
    """One vkCmdDispatch: a pipeline, its buffers (bindings 0..n-1), push constants, grid."""

    pipeline: Pipeline
    buffers: tuple[Buffer, ...]
    push: bytes
    groups: tuple[int, int, int]


@dataclass
class _Recorded:
    """A command buffer recorded once, with its descriptor sets, resubmitted on a repeat."""

    command_buffer: Any
    sets: list[Any]
    buffer_ids: frozenset[int]
    submit: Any = None  # a VkSubmitInfo built once (with the array it points to)
    keep: Any = None


class Submitter:
    """The device's command buffer, fence, timestamp queries and staging buffers."""

    def __init__(self, device: Device) -> None:
        self.device = device
        ffi, lib = device.ffi, device.lib
        keep = vkapi.Keep()
        self.command_buffer: Any = None
        self.fence: Any = None
        self.query_pool: Any = None
        # Staging buffers by purpose: "upload" (host writes, device reads) and "readback"
        # (device writes, host reads: host-cached memory where the device has it).
        self.staging: dict[str, Buffer] = {}
        self.command_buffer = self._allocate_command_buffer()
        fence = ffi.new("VkFence*")
        vkapi.check(
            lib.vkCreateFence(device.handle, keep.struct("VkFenceCreateInfo"), ffi.NULL, fence),
            "vkCreateFence",
        )
        self.fence = fence[0]
        self.timestamps = device.timestamp_valid_bits > 0
        if self.timestamps:
            qinfo = keep.struct(
                "VkQueryPoolCreateInfo",
                queryType=vkapi.flag("VK_QUERY_TYPE_TIMESTAMP"),
                queryCount=2,
            )
            pool = ffi.new("VkQueryPool*")
            vkapi.check(
                lib.vkCreateQueryPool(device.handle, qinfo, ffi.NULL, pool), "vkCreateQueryPool"
            )
            self.query_pool = pool[0]
        self._seconds: float | None = None
        self._seconds_pending = False  # timestamps written by the latest run, not yet read
        self.live_descriptor_sets = 0  # allocated and not yet freed (Device.live_objects)
        self._in_flight = False  # submitted, fence not yet waited for and reset
        self._recorded: OrderedDict[tuple[Any, ...], _Recorded] = OrderedDict()
        self.reuse_hits = 0  # submissions of an already recorded command buffer
        # Built once: every struct made through the binding costs microseconds per call.
        self._fences = ffi.new("VkFence[1]", [self.fence])
        self._timestamps_out = ffi.new("uint64_t[2]")

    def _allocate_command_buffer(self) -> Any:
        """One primary command buffer from the device's (resettable) command pool."""
        dev = self.device
        keep = vkapi.Keep()
        alloc = keep.struct(
            "VkCommandBufferAllocateInfo",
            commandPool=dev.command_pool,
            level=0,
            commandBufferCount=1,
        )
        out = dev.ffi.new("VkCommandBuffer[1]")
        try:
            vkapi.check(
                dev.lib.vkAllocateCommandBuffers(dev.handle, alloc, out), "vkAllocateCommandBuffers"
            )
        except BaseException:  # an interrupt as the call returned: free what it allocated
            if out[0] != dev.ffi.NULL:
                dev.lib.vkFreeCommandBuffers(dev.handle, dev.command_pool, 1, out)
            raise
        return out[0]

    # ------------------------------------------------------------------ dispatch
    def run(
        self, dispatches: Sequence[Dispatch], *, timed: bool = True, read_seconds: bool = True
    ) -> float | None:
        """Record, submit and wait for ``dispatches``; device seconds when timed.

        With ``read_seconds=False`` the timestamps are still written but only read when
        :attr:`last_device_seconds` is asked for (it saves a driver call per kernel call);
        the return value is then None.

        When every buffer is long-lived (``Buffer.reusable``: pooled buffers, placeholders)
        the recorded command buffer and its descriptor sets are kept, keyed by pipelines,
        buffers, push constants and grid, and a repeat of the same call only resubmits it.
        Destroying one of those buffers drops what referenced it (:meth:`forget_buffer`).
        """
        dev = self.device
        timed = timed and self.timestamps
        with dev.lock:
            dev.check()
            key = self._reuse_key(dispatches, timed)
            self._seconds, self._seconds_pending = None, False
            if key is not None:
                rec = self._recorded_for(key, dispatches, timed)
                self._submit_and_wait(rec.command_buffer, rec.submit)
            else:
                sets: list[Any] = []
                try:
                    self._descriptor_sets(dispatches, sets)
                    self._record(self.command_buffer, dispatches, sets, timed, one_time=True)
                    self._submit_and_wait(self.command_buffer)
                finally:
                    self._free_sets(sets)
            self._seconds_pending = timed
            dev.check()
            return self.last_device_seconds if read_seconds else None

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of the latest timed :meth:`run` (from timestamp queries)."""
        with self.device.lock:
            if self._seconds_pending:
                self._seconds = self._elapsed()
                self._seconds_pending = False
            return self._seconds

    @staticmethod
    def _reuse_key(dispatches: Sequence[Dispatch], timed: bool) -> tuple[Any, ...] | None:
        """The cache key of a dispatch list on long-lived buffers only, else None."""
        if not dispatches:
            return None
        parts: list[Any] = [timed]
        for d in dispatches:
            for buf in d.buffers:
                if not buf.reusable or not buf.alive:
                    return None
            parts.append((id(d.pipeline), tuple(id(b) for b in d.buffers), d.push, d.groups))
        return tuple(parts)

    def _recorded_for(
        self, key: tuple[Any, ...], dispatches: Sequence[Dispatch], timed: bool
    ) -> _Recorded:
        kept = self._recorded.get(key)
        if kept is not None:
            self._recorded.move_to_end(key)
            self.reuse_hits += 1
            return kept
        # Kept only once fully recorded; on any failure what was made so far is freed.
        sets: list[Any] = []
        rec: _Recorded | None = None
        try:
            self._descriptor_sets(dispatches, sets)
            rec = _Recorded(
                self._allocate_command_buffer(),
                sets,
                frozenset(id(b) for d in dispatches for b in d.buffers),
            )
            rec.keep = vkapi.Keep()
            cbs = rec.keep.new("VkCommandBuffer[1]", [rec.command_buffer])
            rec.submit = rec.keep.struct("VkSubmitInfo", commandBufferCount=1, pCommandBuffers=cbs)
            self._record(rec.command_buffer, dispatches, sets, timed, one_time=False)
        except BaseException:
            if rec is not None:
                self._release_recorded(rec)
            else:
                self._free_sets(sets)
            raise
        self._recorded[key] = rec
        while len(self._recorded) > _MAX_RECORDED:
            self._release_recorded(self._recorded.popitem(last=False)[1])
        return rec

    def resubmit_seconds(self, repeats: int) -> list[float]:
        """Wall seconds of resubmitting the most recently used kept recording, ``repeats``
        times: queue submit, fence wait and fence reset with every struct prebuilt. This is
        the floor under any call that has to run the same commands (the bench's reference
        for per-call overhead). Raises RuntimeError when nothing is kept."""
        import time

        dev = self.device
        lib = dev.lib
        with dev.lock:
            if not self._recorded:
                raise RuntimeError(
                    "no recorded command buffer is kept: run a call on pooled buffers first"
                )
            rec = next(reversed(self._recorded.values()))
            out = []
            if self._in_flight:
                self._settle()
            for _ in range(repeats):
                start = time.perf_counter()
                self._in_flight = True  # until reset: a later submission settles it first
                vkapi.check(
                    lib.vkQueueSubmit(dev.queue, 1, rec.submit, self.fence), "vkQueueSubmit"
                )
                vkapi.check(
                    lib.vkWaitForFences(dev.handle, 1, self._fences, 1, 10**10), "vkWaitForFences"
                )
                vkapi.check(lib.vkResetFences(dev.handle, 1, self._fences), "vkResetFences")
                self._in_flight = False
                out.append(time.perf_counter() - start)
            return out

    def _release_recorded(self, rec: _Recorded) -> None:
        dev = self.device
        if dev.handle is None:
            return
        self._free_sets(rec.sets)
        arr = dev.ffi.new("VkCommandBuffer[1]", [rec.command_buffer])
        dev.lib.vkFreeCommandBuffers(dev.handle, dev.command_pool, 1, arr)

    def drop_recorded(self) -> None:
        """Free every kept command buffer and its descriptor sets."""
        with self.device.lock:
            while self._recorded:
                self._release_recorded(self._recorded.popitem()[1])

    def _descriptor_sets(self, dispatches: Sequence[Dispatch], into: list[Any]) -> list[Any]:
        """One written descriptor set per dispatch, appended to ``into`` as soon as they
        are allocated: the caller frees them whatever fails (or is interrupted) later."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        if not dispatches:
            return into
        for d in dispatches:  # refuse a bad dispatch before allocating, so no set leaks
            if len(d.buffers) != d.pipeline.buffers:
                want, got = d.pipeline.buffers, len(d.buffers)
                raise ValueError(f"{d.pipeline.name} takes {want} buffers, got {got}")
            for buf in d.buffers:
                buf._require_alive()
        keep = vkapi.Keep()
        layouts = keep.new("VkDescriptorSetLayout[]", [d.pipeline.set_layout for d in dispatches])
        info = keep.struct(
            "VkDescriptorSetAllocateInfo",
            descriptorPool=dev.descriptor_pool,
            descriptorSetCount=len(dispatches),
            pSetLayouts=layouts,
        )
        out = ffi.new("VkDescriptorSet[]", len(dispatches))  # NULL handles until allocated
        try:
            result = lib.vkAllocateDescriptorSets(dev.handle, info, out)
            if result != 0 and self._recorded:  # the pool is shared with kept recordings
                self.drop_recorded()
                result = lib.vkAllocateDescriptorSets(dev.handle, info, out)
            vkapi.check(result, "vkAllocateDescriptorSets")
        except BaseException:  # an interrupt as the call returned: free what it allocated
            made = [out[i] for i in range(len(dispatches)) if out[i] != ffi.NULL]
            if made:
                arr = ffi.new("VkDescriptorSet[]", made)
                lib.vkFreeDescriptorSets(dev.handle, dev.descriptor_pool, len(made), arr)
            raise
        sets = [out[i] for i in range(len(dispatches))]
        into.extend(sets)
        self.live_descriptor_sets += len(sets)
        writes = []
        for dset, d in zip(sets, dispatches, strict=True):
            for binding, buf in zip(d.pipeline.binding_numbers, d.buffers, strict=True):
                write = {
                    "sType": vkapi.structure_type("VkWriteDescriptorSet"),
                    "dstSet": dset,
                    "dstBinding": binding,
                    "descriptorCount": 1,
                    "descriptorType": d.pipeline.descriptor_type(binding),
                }
                fmt = d.pipeline.texel.get(binding)
                if fmt is None:
                    write["pBufferInfo"] = keep.new(
                        "VkDescriptorBufferInfo*",
                        {"buffer": buf.handle, "offset": 0, "range": buf.nbytes},
                    )
                else:
                    write["pTexelBufferView"] = keep.new("VkBufferView[1]", [buf.view(fmt)])
                writes.append(write)
        if writes:
            arr = keep.new("VkWriteDescriptorSet[]", writes)
            lib.vkUpdateDescriptorSets(dev.handle, len(writes), arr, 0, ffi.NULL)
        return into

    def _free_sets(self, sets: list[Any]) -> None:
        if sets:
            dev = self.device
            arr = dev.ffi.new("VkDescriptorSet[]", sets)
            dev.lib.vkFreeDescriptorSets(dev.handle, dev.descriptor_pool, len(sets), arr)
            self.live_descriptor_sets -= len(sets)

    def _begin(self, cb: Any = None, *, one_time: bool = True) -> None:
        dev = self.device
        cb = self.command_buffer if cb is None else cb
        keep = vkapi.Keep()
        vkapi.check(dev.lib.vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer")
        flags = vkapi.flag("VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT") if one_time else 0
        begin = keep.struct("VkCommandBufferBeginInfo", flags=flags)
        vkapi.check(dev.lib.vkBeginCommandBuffer(cb, begin), "vkBeginCommandBuffer")

    def _barrier(self, src_stage: int, src: int, dst_stage: int, dst: int, cb: Any = None) -> None:
        dev = self.device
        barrier = dev.ffi.new(
            "VkMemoryBarrier*",
            {
                "sType": vkapi.structure_type("VkMemoryBarrier"),
                "srcAccessMask": src,
                "dstAccessMask": dst,
            },
        )
        dev.lib.vkCmdPipelineBarrier(
            self.command_buffer if cb is None else cb,
            src_stage,
            dst_stage,
            0,
            1,
            barrier,
            0,
            dev.ffi.NULL,
            0,
            dev.ffi.NULL,
        )

    def _record(
        self,
        cb: Any,
        dispatches: Sequence[Dispatch],
        sets: list[Any],
        timed: bool,
        *,
        one_time: bool,
    ) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        self._begin(cb, one_time=one_time)
        if timed:
            lib.vkCmdResetQueryPool(cb, self.query_pool, 0, 2)
            lib.vkCmdWriteTimestamp(cb, _TOP, self.query_pool, 0)
        bind_point = 1  # VK_PIPELINE_BIND_POINT_COMPUTE
        set_arr = ffi.new("VkDescriptorSet[1]")
        for i, (d, dset) in enumerate(zip(dispatches, sets, strict=True)):
            if i:
                self._barrier(_COMPUTE, _SHADER_WRITE, _COMPUTE, _SHADER_READ | _SHADER_WRITE, cb)
            lib.vkCmdBindPipeline(cb, bind_point, d.pipeline.handle)
            set_arr[0] = dset
            lib.vkCmdBindDescriptorSets(
                cb, bind_point, d.pipeline.layout, 0, 1, set_arr, 0, ffi.NULL
            )
            if d.push:
                push = ffi.new("char[]", d.push)
                lib.vkCmdPushConstants(cb, d.pipeline.layout, 0x20, 0, len(d.push), push)
            lib.vkCmdDispatch(cb, *d.groups)
        self._barrier(_COMPUTE, _SHADER_WRITE, _HOST, _HOST_READ, cb)
        if timed:
            lib.vkCmdWriteTimestamp(cb, _BOTTOM, self.query_pool, 1)
        vkapi.check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer")

    def _submit_and_wait(self, cb: Any = None, submit: Any = None) -> None:
        """Submit and wait for the fence. Whatever fails or is interrupted, the submission
        is finished (no buffer it uses is freed in flight) and the fence reset before this
        returns or raises; a Ctrl-C during the wait is re-raised once the work is done."""
        dev = self.device
        lib = dev.lib
        if self._in_flight:  # an earlier submission was cut short before it was settled
            self._settle()
        if submit is None:
            keep = vkapi.Keep()
            cbs = keep.new("VkCommandBuffer[1]", [self.command_buffer if cb is None else cb])
            submit = keep.struct("VkSubmitInfo", commandBufferCount=1, pCommandBuffers=cbs)
        self._in_flight = True
        try:
            result = lib.vkQueueSubmit(dev.queue, 1, submit, self.fence)
        except BaseException:  # raised as the call returned (Ctrl-C): its result is lost
            self._settle()
            raise
        if result < 0:
            self._in_flight = False  # nothing was submitted; the fence is untouched
            vkapi.check(result, "vkQueueSubmit")
        interrupted: list[BaseException] = []
        fences = self._fences
        try:
            while True:
                try:
                    result = lib.vkWaitForFences(dev.handle, 1, fences, 1, _WAIT_SLICE_NS)
                    if result == _VK_TIMEOUT:
                        continue
                    vkapi.check(result, "vkWaitForFences")
                    break
                except KeyboardInterrupt as exc:  # finish the wait, then raise it
                    interrupted.append(exc)
            vkapi.check(lib.vkResetFences(dev.handle, 1, fences), "vkResetFences")
        except BaseException:
            self._settle()
            raise
        self._in_flight = False
        _raise_deferred(interrupted)

    def _settle(self) -> None:
        """After a submission cut short: wait until the queue is idle, then reset the fence
        (a Ctrl-C meanwhile is raised once both are done)."""
        dev = self.device
        interrupted: list[BaseException] = []
        while True:
            try:
                dev.lib.vkQueueWaitIdle(dev.queue)
                dev.lib.vkResetFences(dev.handle, 1, self._fences)
                break
            except KeyboardInterrupt as exc:
                interrupted.append(exc)
        self._in_flight = False
        _raise_deferred(interrupted)

    def _elapsed(self) -> float:
        dev = self.device
        lib = dev.lib
        data = self._timestamps_out
        flags = 0x1 | 0x2  # VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT
        vkapi.check(
            lib.vkGetQueryPoolResults(dev.handle, self.query_pool, 0, 2, 16, data, 8, flags),
            "vkGetQueryPoolResults",
        )
        mask = (
            (1 << dev.timestamp_valid_bits) - 1 if dev.timestamp_valid_bits < 64 else (1 << 64) - 1
        )
        ticks = (int(data[1]) - int(data[0])) & mask
        return ticks * dev.info.timestamp_period * 1e-9

    # ------------------------------------------------------------------ transfers
    def _staging(self, purpose: str, nbytes: int) -> Buffer:
        """The ``purpose`` ("upload" or "readback") staging buffer, of at least ``nbytes``."""
        from .memory import Buffer

        buf = self.staging.get(purpose)
        if buf is None or buf.nbytes < nbytes:
            self.staging.pop(purpose, None)  # never a destroyed one, if the next fails
            if buf is not None:
                buf.destroy()
            buf = Buffer(self.device, max(nbytes, 1 << 20), purpose=purpose)
            if buf.mapped is None:  # the placement maps every staging choice
                buf.destroy()
                raise RuntimeError(f"the {purpose} staging buffer is not host-visible")
            self.staging[purpose] = buf
        return buf

    def _copy(
        self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int
    ) -> None:
        dev = self.device
        self._begin()
        region = dev.ffi.new(
            "VkBufferCopy*", {"srcOffset": src_offset, "dstOffset": dst_offset, "size": nbytes}
        )
        self._barrier(
            _COMPUTE | _HOST,
            _SHADER_WRITE | _HOST_WRITE,
            _TRANSFER,
            _TRANSFER_READ | _TRANSFER_WRITE,
        )
        dev.lib.vkCmdCopyBuffer(self.command_buffer, src.handle, dst.handle, 1, region)
        self._barrier(_TRANSFER, _TRANSFER_WRITE, _COMPUTE | _HOST, _SHADER_READ | _HOST_READ)
        vkapi.check(dev.lib.vkEndCommandBuffer(self.command_buffer), "vkEndCommandBuffer")
        self._submit_and_wait()

    def upload(self, dst: Buffer, raw: np.ndarray, offset: int) -> None:
        """Copy host bytes into a device-local buffer through the staging buffer."""
        with self.device.lock:
            step = min(raw.size, _STAGING_MAX)
            staging = self._staging("upload", step)
            for start in range(0, raw.size, step):
                part = raw[start : start + step]
                staging.write(part)  # mapped: flushed where not coherent
                self._copy(staging, 0, dst, offset + start, part.size)

    def download(self, src: Buffer, raw: np.ndarray, offset: int) -> None:
        """Copy a device-local buffer's bytes to the host through the staging buffer."""
        with self.device.lock:
            step = min(raw.size, _STAGING_MAX)
            staging = self._staging("readback", step)
            for start in range(0, raw.size, step):
                n = min(step, raw.size - start)
                self._copy(src, offset + start, staging, 0, n)
                staging.read(raw[start : start + n])  # mapped: invalidated where not coherent

    # ------------------------------------------------------------------ lifetime
    def forget_buffer(self, buffer: Buffer) -> None:
        """Drop kept recordings that reference ``buffer`` (called before it is destroyed)."""
        if not self._recorded:
            return
        gone = id(buffer)
        for key in [k for k, rec in self._recorded.items() if gone in rec.buffer_ids]:
            self._release_recorded(self._recorded.pop(key))

    def destroy(self) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        if dev.handle is None:
            return
        self.drop_recorded()
        while self.staging:
            self.staging.popitem()[1].destroy()
        if self.query_pool is not None:
            lib.vkDestroyQueryPool(dev.handle, self.query_pool, ffi.NULL)
            self.query_pool = None
        if self.fence is not None:
            lib.vkDestroyFence(dev.handle, self.fence, ffi.NULL)
            self.fence = None
        if self.command_buffer is not None:
            arr = ffi.new("VkCommandBuffer[1]", [self.command_buffer])
            lib.vkFreeCommandBuffers(dev.handle, dev.command_pool, 1, arr)
            self.command_buffer = None
