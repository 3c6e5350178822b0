"""Submission: the device's command and descriptor pools, its command buffer, one fence,
timestamp queries, and the recordings kept for repeated calls.

Submission holds the device lock, so several threads may share one Device. A submission
is always waited for before the call returns or raises, so no buffer it uses is freed
while the device still reads it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkcore import _vk
from vkcore.device.context import DeviceContext
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit import commands
from vkcore.device.submit.commands import Dispatch
from vkcore.device.submit.recording import SequenceHooks
from vkcore.errors import result_code

_VK_TIMEOUT = result_code("VK_TIMEOUT")
_WAIT_SLICE_NS = 100_000_000  # wake up to let Python handle Ctrl-C
_SETTLE_TRIES = 16  # exceptions held back while settling before one is let through
# Descriptor sets in the pool: sets are freed after each submission, so this bounds one call.
_MAX_SETS = 1024
# Recorded command buffers kept for repeated calls on long-lived buffers (see Submitter.run).
_MAX_RECORDED = 32


def _raise_deferred(interrupted: list[BaseException]) -> None:
    """Raise the last Ctrl-C a wait held back, if any. It leaves the list as it is raised
    and is never bound to a name, so no frame keeps the exception its own traceback refers
    to: that cycle would keep every buffer on the stack (and its device memory) alive
    until the collector runs."""
    if interrupted:
        del interrupted[:-1]
        raise interrupted.pop()


@dataclass
class _Recorded:
    """A command buffer recorded once, with its descriptor sets, resubmitted on a repeat."""

    command_buffer: Any
    sets: list[Any]
    buffer_ids: frozenset[int]
    submit: Any = None  # a VkSubmitInfo built once (with the array it points to)
    keep: Any = None


class Submitter(SequenceHooks):
    """The device's command buffer, fence, timestamp queries and kept recordings."""

    command_pool: Any = None
    descriptor_pool: Any = None
    command_buffer: Any = None
    fence: Any = None
    query_pool: Any = None

    def __init__(self, device: DeviceContext) -> None:
        self.device = device
        self.live_descriptor_sets = 0  # allocated and not yet freed (Device.live_objects)
        self._recorded: OrderedDict[tuple[Any, ...], _Recorded] = OrderedDict()
        self._keys = commands.ReuseKeys()
        self._init_recording()
        self._in_flight = False
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        self._seconds: float | None = None
        self._seconds_pending = False  # timestamps written by the latest run, not yet read
        self.reuse_hits = 0  # submissions of an already recorded command buffer
        # Built once: every struct made through the binding costs microseconds per call.
        self._fences = device.ffi.new("VkFence[1]", [self.fence])
        self._timestamps_out = device.ffi.new("uint64_t[2]")

    def _create(self) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        self.command_pool = commands.create_command_pool(dev)
        self.descriptor_pool = commands.create_descriptor_pool(dev, _MAX_SETS)
        self.command_buffer = self.allocate_command_buffer()
        fence = ffi.new("VkFence*")
        _vk.check(
            lib.vkCreateFence(dev.handle, keep.struct("VkFenceCreateInfo"), ffi.NULL, fence),
            "vkCreateFence",
        )
        self.fence = fence[0]
        self.timestamps = dev.timestamp_valid_bits > 0
        if self.timestamps:
            self.query_pool = commands.create_timestamp_pool(dev)

    def allocate_command_buffer(self) -> Any:
        """One primary command buffer from the (resettable) command pool."""
        dev = self.device
        keep = _vk.Keep()
        alloc = keep.struct(
            "VkCommandBufferAllocateInfo",
            commandPool=self.command_pool,
            level=0,
            commandBufferCount=1,
        )
        out = dev.ffi.new("VkCommandBuffer[1]")
        try:
            _vk.check(
                dev.lib.vkAllocateCommandBuffers(dev.handle, alloc, out), "vkAllocateCommandBuffers"
            )
        except BaseException:  # an interrupt as the call returned: free what it allocated
            if out[0] != dev.ffi.NULL:
                dev.lib.vkFreeCommandBuffers(dev.handle, self.command_pool, 1, out)
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
        recording = getattr(self._local, "sequence", None)
        if recording is not None:  # vkcore.sequence: the steps go there instead
            recording.add(dispatches)
            return None
        dev = self.device
        timed = timed and self.timestamps
        with dev.lock:
            dev.check()
            self.reap()  # sequences dropped in flight that have finished since
            key = self._keys.of(dispatches, timed)
            self._seconds, self._seconds_pending = None, False
            if key is not None:
                rec = self._recorded_for(key, dispatches, timed)
                self._submit_and_wait(rec.command_buffer, rec.submit)
            else:
                sets: list[Any] = []
                try:
                    self._descriptor_sets(dispatches, sets)
                    pool = self.query_pool if timed else None
                    cb = self.command_buffer
                    commands.record_dispatches(
                        dev, cb, dispatches, sets, query_pool=pool, one_time=True
                    )
                    self._submit_and_wait(self.command_buffer)
                finally:
                    self.free_sets(sets)
            self._seconds_pending = timed
            dev.check()
            return self.last_device_seconds if read_seconds else None

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of the latest timed :meth:`run` (from timestamp queries)."""
        with self.device.lock:
            if self._seconds_pending:
                out = self._timestamps_out
                self._seconds = commands.elapsed_seconds(self.device, self.query_pool, out)
                self._seconds_pending = False
            return self._seconds

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
                self.allocate_command_buffer(),
                sets,
                frozenset(id(b) for d in dispatches for b in d.buffers),
            )
            rec.keep = _vk.Keep()
            cbs = rec.keep.new("VkCommandBuffer[1]", [rec.command_buffer])
            rec.submit = rec.keep.struct("VkSubmitInfo", commandBufferCount=1, pCommandBuffers=cbs)
            pool = self.query_pool if timed else None
            commands.record_dispatches(
                self.device, rec.command_buffer, dispatches, sets, query_pool=pool, one_time=False
            )
        except BaseException:
            if rec is not None:
                self._release_recorded(rec)
            else:
                self.free_sets(sets)
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
                _vk.check(lib.vkQueueSubmit(dev.queue, 1, rec.submit, self.fence), "vkQueueSubmit")
                _vk.check(
                    lib.vkWaitForFences(dev.handle, 1, self._fences, 1, 10**10), "vkWaitForFences"
                )
                _vk.check(lib.vkResetFences(dev.handle, 1, self._fences), "vkResetFences")
                self._in_flight = False
                out.append(time.perf_counter() - start)
            return out

    def _release_recorded(self, rec: _Recorded) -> None:
        if self.device.handle is not None:
            self.free_sets(rec.sets)
            self.free_command_buffer(rec.command_buffer)

    def drop_recorded(self) -> None:
        """Free every kept command buffer and its descriptor sets."""
        with self.device.lock:
            while self._recorded:
                self._release_recorded(self._recorded.popitem()[1])

    def free_command_buffer(self, cb: Any) -> None:
        self.settle_cut_short()
        dev = self.device
        arr = dev.ffi.new("VkCommandBuffer[1]", [cb])
        dev.lib.vkFreeCommandBuffers(dev.handle, self.command_pool, 1, arr)

    def descriptor_sets(self, dispatches: Sequence[Dispatch], into: list[Any]) -> list[Any]:
        return self._descriptor_sets(dispatches, into)

    def _descriptor_sets(self, dispatches: Sequence[Dispatch], into: list[Any]) -> list[Any]:
        """One written descriptor set per dispatch, appended to ``into`` as soon as they
        are allocated: the caller frees them whatever fails (or is interrupted) later."""
        if not dispatches:
            return into
        commands.check_dispatches(dispatches)  # before allocating, so no set leaks
        dev = self.device
        result, out = commands.allocate_sets(dev, self.descriptor_pool, dispatches)
        if result != 0 and self._recorded:  # the pool is shared with kept recordings
            self.drop_recorded()
            result, out = commands.allocate_sets(dev, self.descriptor_pool, dispatches)
        _vk.check(result, "vkAllocateDescriptorSets")
        sets = [out[i] for i in range(len(dispatches))]
        into.extend(sets)
        self.live_descriptor_sets += len(sets)
        commands.write_sets(dev, sets, dispatches)
        return into

    def free_sets(self, sets: list[Any]) -> None:
        if sets:
            self.settle_cut_short()
            commands.free_sets(self.device, self.descriptor_pool, sets)
            self.live_descriptor_sets -= len(sets)

    def _submit_and_wait(self, cb: Any = None, submit: Any = None) -> None:
        """Submit and wait for the fence. Whatever fails or is raised (Ctrl-C, a signal
        handler's or a trace hook's exception), the submission is finished (no buffer it
        uses is freed in flight) and the fence reset before this returns or raises; a
        Ctrl-C during the wait is re-raised once the work is done."""
        dev = self.device
        lib = dev.lib
        if self._in_flight:  # an earlier submission was cut short before it was settled
            self._settle()
        if submit is None:
            keep = _vk.Keep()
            cbs = keep.new("VkCommandBuffer[1]", [self.command_buffer if cb is None else cb])
            submit = keep.struct("VkSubmitInfo", commandBufferCount=1, pCommandBuffers=cbs)
        # In flight from before the call until the fence is reset: an exception anywhere
        # in between settles it here, or (if even that is cut short) before anything is
        # freed or reused (settle_cut_short) and before the next submission.
        self._in_flight = True
        interrupted: list[BaseException] = []
        try:
            result = lib.vkQueueSubmit(dev.queue, 1, submit, self.fence)
            if result < 0:
                self._in_flight = False  # nothing was submitted; the fence is untouched
                _vk.check(result, "vkQueueSubmit")
            fences = self._fences
            while True:
                try:
                    result = lib.vkWaitForFences(dev.handle, 1, fences, 1, _WAIT_SLICE_NS)
                    if result == _VK_TIMEOUT:
                        continue
                    _vk.check(result, "vkWaitForFences")
                    break
                except KeyboardInterrupt as exc:  # finish the wait, then raise it
                    interrupted.append(exc)
            _vk.check(lib.vkResetFences(dev.handle, 1, fences), "vkResetFences")
            self._in_flight = False
        except BaseException:
            if self._in_flight:
                self._settle()
            raise
        _raise_deferred(interrupted)

    def _settle(self) -> None:
        """After a submission cut short: wait until the queue is idle, then reset the fence.
        An exception meanwhile (Ctrl-C, a signal handler's) is raised once both are done."""
        dev = self.device
        interrupted: list[BaseException] = []
        for _ in range(_SETTLE_TRIES):
            try:
                dev.lib.vkQueueWaitIdle(dev.queue)
                dev.lib.vkResetFences(dev.handle, 1, self._fences)
                self._in_flight = False
                break
            except BaseException as exc:  # noqa: BLE001 - raised below, once settled
                interrupted.append(exc)
        _raise_deferred(interrupted)

    @property
    def _in_flight(self) -> bool:
        """Submitted, fence not yet waited for and reset (kept on the device context, so
        that freeing memory checks it without a call: DeviceContext.before_free)."""
        return self.device.submission_unsettled

    @_in_flight.setter
    def _in_flight(self, value: bool) -> None:
        self.device.submission_unsettled = value

    def settle_cut_short(self) -> None:
        """Finish a submission an exception cut short (before what it uses is freed)."""
        if self._in_flight:
            with self.device.lock:
                if self._in_flight:
                    self._settle()

    # ------------------------------------------------------------------ copies
    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` between two buffers on the device and wait for it."""
        with self.device.lock:
            commands.record_copy(
                self.device, self.command_buffer, src, src_offset, dst, dst_offset, nbytes
            )
            self._submit_and_wait()

    _copy = copy  # the name kernels.softmax calls it by

    # ------------------------------------------------------------------ lifetime
    def forget_buffer(self, buffer: object) -> None:
        """Drop kept recordings that reference ``buffer`` (called before it is destroyed)."""
        if not self._recorded:
            return
        gone = id(buffer)
        for key in [k for k, rec in self._recorded.items() if gone in rec.buffer_ids]:
            self._release_recorded(self._recorded.pop(key))

    def destroy(self) -> None:
        """Free the recordings, the queries, the fence and both pools; idempotent."""
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        if dev.handle is None:
            return
        for sequence in self.sequences():  # their sets and command buffers, before the pools
            sequence.release()
        self.destroy_sequence_objects()
        if self.command_pool is not None:
            self.drop_recorded()
        if self.query_pool is not None:
            lib.vkDestroyQueryPool(dev.handle, self.query_pool, ffi.NULL)
            self.query_pool = None
        if self.fence is not None:
            lib.vkDestroyFence(dev.handle, self.fence, ffi.NULL)
            self.fence = None
        if self.descriptor_pool is not None:  # frees every set still allocated from it
            lib.vkDestroyDescriptorPool(dev.handle, self.descriptor_pool, ffi.NULL)
            self.descriptor_pool = None
        if self.command_pool is not None:  # frees every command buffer allocated from it
            lib.vkDestroyCommandPool(dev.handle, self.command_pool, ffi.NULL)
            self.command_pool = None
            self.command_buffer = None
