"""Single calls: the device's command and descriptor pools, its command buffer and
:class:`~vkcore.device.submit.submission.Submission`, and the recordings kept for
repeated calls.

Submission holds the device lock, so several threads may share one Device. A call's
submission is always waited for before the call returns or raises, so no buffer it uses
is freed while the device still reads it (the rules: :mod:`.submission`).

What a call's command buffer holds, and why no more: its steps, a barrier between two
steps only where one depends on the other (``commands.Hazards``), and one barrier to the
host at the end (required before the host reads results). Nothing leads it, unless a
sequence submitted without waiting may still run: a prerecorded command buffer holding
one barrier after all earlier work then goes first in the same batch. Timestamps only
when asked (``Device(timed=True)``, ``run(..., timed=True)``): on a CPU device a
bottom-of-pipe timestamp costs as much as a tiny kernel.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vkcore import _vk
from vkcore.device.context import DeviceContext, ctrl_c_deferred
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit import commands
from vkcore.device.submit.commands import Dispatch
from vkcore.device.submit.recording import SequenceHooks
from vkcore.device.submit.submission import Submission, create_fence

# Descriptor sets in the pool: sets are freed after each submission, so this bounds one call.
_MAX_SETS = 1024
# Recorded command buffers kept for repeated calls (see Submitter.run), and how many
# calls' keys are remembered to tell a repeat from a one-off.
_MAX_RECORDED = 32
_MAX_SEEN = 64


@dataclass
class Recorded:
    """A command buffer recorded once, with its descriptor sets, resubmitted on a repeat.
    A caller that keeps one (:meth:`Submitter.run_kept`) resubmits it with
    :meth:`Submitter.rerun`, which refuses once it is ``released``."""

    command_buffer: Any
    sets: list[Any]
    object_ids: frozenset[int]  # of the pipelines and buffers it binds
    key: tuple[Any, ...]
    timed: bool
    batch: Batch | None = None
    released: bool = False  # its command buffer and sets are freed: never submit it again


def _bound_ids(dispatches: Sequence[Dispatch]) -> frozenset[int]:
    ids = {id(d.pipeline) for d in dispatches}
    ids.update(id(b) for d in dispatches for b in d.buffers)
    return frozenset(ids)


class Batch:
    """The VkSubmitInfo of one command buffer, built once, alone and behind the leading
    barrier (:meth:`Submitter.submit_info`)."""

    def __init__(self, command_buffer: Any, lead: Any) -> None:
        self.keep = _vk.Keep()
        alone = self.keep.new("VkCommandBuffer[1]", [command_buffer])
        self.alone = self.keep.struct("VkSubmitInfo", commandBufferCount=1, pCommandBuffers=alone)
        self.behind: Any = None
        self._cb, self._lead = command_buffer, lead

    def led(self) -> Any:
        """The submit info with the leading barrier's command buffer first."""
        if self.behind is None:
            both = self.keep.new("VkCommandBuffer[2]", [self._lead, self._cb])
            self.behind = self.keep.struct(
                "VkSubmitInfo", commandBufferCount=2, pCommandBuffers=both
            )
        return self.behind


class Submitter(SequenceHooks):
    """The device's command buffer, submission, timestamp queries and kept recordings."""

    command_pool: Any = None
    descriptor_pool: Any = None
    command_buffer: Any = None
    lead_command_buffer: Any = None  # one barrier after every earlier submission's writes
    fence: Any = None
    query_pool: Any = None
    call: Submission | None = None

    def __init__(self, device: DeviceContext, *, timed: bool = False) -> None:
        self.device = device
        self.timed = timed  # timestamps on calls that do not say (Device(timed=...))
        self.live_descriptor_sets = 0  # allocated and not yet freed (Device.live_objects)
        self._recorded: OrderedDict[tuple[Any, ...], Recorded] = OrderedDict()
        self._seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()
        self._keys = commands.ReuseKeys()
        self._init_recording()
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        self._seconds: float | None = None
        self._seconds_pending = False  # timestamps written by the latest run, not yet read
        self.reuse_hits = 0  # submissions of an already recorded command buffer
        self._observers: list[list[tuple[float, float | None]]] = []  # see observed()

    def _create(self) -> None:
        dev = self.device
        self.command_pool = commands.create_command_pool(dev)
        self.descriptor_pool = commands.create_descriptor_pool(dev, _MAX_SETS)
        self.command_buffer = self.allocate_command_buffer()
        self.lead_command_buffer = self.allocate_command_buffer()
        commands.record_lead_barrier(dev, self.lead_command_buffer)
        made: list[Any] = []
        try:
            with ctrl_c_deferred():
                create_fence(dev, made)
        finally:
            self.fence = made[0] if made else None  # destroy() frees it whatever follows
        self.timestamps = dev.timestamp_valid_bits > 0
        if self.timestamps:
            self.query_pool = commands.create_timestamp_pool(dev)
        self.call = Submission(dev, self.fence, self.query_pool)
        self._call_batch = Batch(self.command_buffer, self.lead_command_buffer)
        dev.call_submission = self.call

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

    def submit_info(self, batch: Batch) -> Any:
        """``batch``'s submit info, behind the leading barrier where a sequence submitted
        without waiting may still run (its writes come before this batch's accesses)."""
        if not self._submitted:  # (in_flight_elsewhere, inline: every call's path)
            return batch.alone
        self.reap()  # sequences dropped in flight that have finished since
        return batch.led() if self.in_flight_elsewhere() else batch.alone

    # ------------------------------------------------------------------ dispatch
    def run(
        self,
        dispatches: Sequence[Dispatch],
        *,
        timed: bool | None = None,
        read_seconds: bool = True,
    ) -> float | None:
        """Record, submit and wait for ``dispatches``; device seconds when timed
        (``timed=None``: as the device says, :attr:`timed`).

        With ``read_seconds=False`` the timestamps are still written but only read when
        :attr:`last_device_seconds` is asked for (it saves a driver call per kernel call);
        the return value is then None.

        A call whose pipelines, buffers, push constants and grid repeat those of a recent
        one keeps its recorded command buffer and descriptor sets (from its second time),
        and later repeats only resubmit it. Destroying one of its buffers drops what
        referenced it (:meth:`forget`), so a recording never outlives what it binds.
        """
        with self.device.lock:
            self.run_kept(dispatches, timed=timed)
            return self.last_device_seconds if read_seconds else None

    def run_kept(
        self, dispatches: Sequence[Dispatch], *, timed: bool | None = None
    ) -> Recorded | None:
        """:meth:`run` (the timestamps, if any, read on demand), returning the recording
        kept for the dispatches when there is one: a caller that repeats exactly this work
        may resubmit it with :meth:`rerun`, skipping everything that rebuilt the list."""
        recording = getattr(self._local, "sequence", None)
        if recording is not None:  # vkcore.sequence: the steps go there instead
            recording.add(dispatches)
            return None
        timed = (self.timed if timed is None else timed) and self.timestamps
        with self.device.lock:
            started = self._call_starts()
            key = self._keys.of(dispatches, timed)
            rec = None
            if key is not None and self._repeats(key):
                rec = self._recorded_for(key, dispatches, timed)
                assert rec.batch is not None
                self._submit_and_wait(rec.batch)
            else:
                self._run_once(dispatches, timed)
            self._call_ends(started, timed)
            return rec

    def rerun(self, rec: Recorded) -> bool:
        """Resubmit ``rec`` (from :meth:`run_kept`) and wait, as a repeat of its call
        would: False, having done nothing, once it is no longer kept (a buffer or pipeline
        it binds was destroyed, or it was evicted), when calls are now timed otherwise, or
        while a sequence records this thread's calls. The caller answers for the rest:
        that its call would have built exactly the same dispatches."""
        if getattr(self._local, "sequence", None) is not None:
            return False
        with self.device.lock:
            if rec.released or rec.timed != (self.timed and self.timestamps):
                return False
            started = self._call_starts()
            self._recorded.move_to_end(rec.key)
            self.reuse_hits += 1
            assert rec.batch is not None
            self._submit_and_wait(rec.batch)
            self._call_ends(started, rec.timed)
            return True

    # What every call's submission does around its work, under the device lock: the
    # device checked before and after, the latest timestamps forgotten and then owed
    # (``timed``), the observers told (:meth:`observed`); a call that raised has no
    # timings. Two plain methods, not a context manager: this is every call's path.
    def _call_starts(self) -> float:
        started = time.perf_counter() if self._observers else 0.0
        self.device.check()
        self._seconds, self._seconds_pending = None, False
        return started

    def _call_ends(self, started: float, timed: bool) -> None:
        self._seconds_pending = timed
        self.device.check()
        if self._observers:
            self._observe(started)

    @contextlib.contextmanager
    def observed(self, *, timed: bool = False) -> Iterator[list[tuple[float, float | None]]]:
        """Inside the block, every call's submission (:meth:`run`, :meth:`run_kept`,
        :meth:`rerun`, from any thread) appends ``(wall seconds, device seconds or
        None)`` to the yielded list; with ``timed``, calls write timestamps meanwhile (as
        ``Device(timed=True)``). What the tuner and the cold/warm tool time calls by."""
        seen: list[tuple[float, float | None]] = []
        with self.device.lock:
            saved = self.timed
            self._observers.append(seen)
            self.timed = saved or timed
        try:
            yield seen
        finally:
            with self.device.lock:
                self._observers = [o for o in self._observers if o is not seen]
                self.timed = saved

    def _observe(self, started: float) -> None:
        seen = (time.perf_counter() - started, self.last_device_seconds)
        for observer in self._observers:
            observer.append(seen)

    def _repeats(self, key: tuple[Any, ...]) -> bool:
        """Whether ``key`` was seen recently (a call worth keeping the recording of)."""
        if key in self._recorded:
            return True
        seen = self._seen
        if key in seen:
            del seen[key]
            return True
        seen[key] = None
        while len(seen) > _MAX_SEEN:
            seen.popitem(last=False)
        return False

    def _run_once(self, dispatches: Sequence[Dispatch], timed: bool) -> None:
        """Record into the device's one-time command buffer, submit, wait, free the sets."""
        sets: list[Any] = []
        try:
            self._descriptor_sets(dispatches, sets)
            pool = self.query_pool if timed else None
            commands.record_dispatches(
                self.device, self.command_buffer, dispatches, sets, query_pool=pool, one_time=True
            )
            self._submit_and_wait(self._call_batch)
        finally:
            self.free_sets(sets)

    @property
    def last_device_seconds(self) -> float | None:
        """Device seconds of the latest timed :meth:`run` (from timestamp queries)."""
        with self.device.lock:
            if self._seconds_pending and self.call is not None:
                self._seconds = self.call.seconds()
                self._seconds_pending = False
            return self._seconds

    def _recorded_for(
        self, key: tuple[Any, ...], dispatches: Sequence[Dispatch], timed: bool
    ) -> Recorded:
        kept = self._recorded.get(key)
        if kept is not None:
            self._recorded.move_to_end(key)
            self.reuse_hits += 1
            return kept
        # Kept only once fully recorded; on any failure what was made so far is freed.
        sets: list[Any] = []
        rec: Recorded | None = None
        try:
            self._descriptor_sets(dispatches, sets)
            rec = Recorded(self.allocate_command_buffer(), sets, _bound_ids(dispatches), key, timed)
            rec.batch = Batch(rec.command_buffer, self.lead_command_buffer)
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
        times, through the same submission and wait as a call. Raises RuntimeError when
        nothing is kept."""
        with self.device.lock:
            if not self._recorded:
                raise RuntimeError(
                    "no recorded command buffer is kept: repeat a call on the same buffers first"
                )
            rec = next(reversed(self._recorded.values()))
            assert rec.batch is not None
            return self._time_batch(rec.batch, repeats)

    @contextlib.contextmanager
    def raw_floor(self, dispatches: Sequence[Dispatch]) -> Iterator[Callable[[], None]]:
        """A command buffer holding ``dispatches`` and nothing else (no barrier, no
        timestamp), every struct built in advance; the block gets a function that
        resubmits it and waits, through the same submission as a call. The floor under
        any call of the same work (the bench's reference); the dispatches must not depend
        on each other (nothing orders them)."""
        sets: list[Any] = []
        cb = None
        try:
            with self.device.lock:
                self._descriptor_sets(dispatches, sets)
                cb = self.allocate_command_buffer()
                commands.record_dispatches(
                    self.device, cb, dispatches, sets, one_time=False, bare=True
                )
            batch = Batch(cb, self.lead_command_buffer)

            def resubmit() -> None:
                with self.device.lock:
                    self._submit_and_wait(batch)

            yield resubmit
        finally:
            with self.device.lock:
                if cb is not None:
                    self.free_command_buffer(cb)
                self.free_sets(sets)

    def _time_batch(self, batch: Batch, repeats: int) -> list[float]:
        out = []
        for _ in range(repeats):
            start = time.perf_counter()
            self._submit_and_wait(batch)
            out.append(time.perf_counter() - start)
        return out

    def _release_recorded(self, rec: Recorded) -> None:
        rec.released = True
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

    def _submit_and_wait(self, batch: Batch) -> None:
        """Submit ``batch`` and wait for it (:class:`Submission`: whatever is raised, the
        work is finished before this returns or raises)."""
        call = self.call
        assert call is not None
        if call.unsettled:
            call.settle()  # an earlier call cut short before it was settled
        info = self.submit_info(batch)
        try:
            call.submit(info)
            call.wait()
        except BaseException:  # cut short between the two: finished before it goes up
            call.settle()
            raise

    def settle_cut_short(self) -> None:
        """Finish a call an exception cut short (before what it uses is freed)."""
        call = self.call
        if call is not None and call.unsettled:
            with self.device.lock:
                call.settle()

    # ------------------------------------------------------------------ copies
    def copy(self, src: Buffer, src_offset: int, dst: Buffer, dst_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` between two buffers on the device and wait for it."""
        with self.device.lock:
            commands.record_copy(
                self.device, self.command_buffer, src, src_offset, dst, dst_offset, nbytes
            )
            self._submit_and_wait(self._call_batch)

    # ------------------------------------------------------------------ lifetime
    def forget(self, thing: object) -> None:
        """Drop kept recordings that bind ``thing``, a buffer or a pipeline (called before
        it is destroyed, or its Vulkan objects handed to another object)."""
        self.forget_id(id(thing))

    def forget_id(self, gone: int) -> None:
        """:meth:`forget` by ``id()``: for an object being collected."""
        if not self._recorded:
            return
        for key in [k for k, rec in self._recorded.items() if gone in rec.object_ids]:
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
        if dev.call_submission is self.call:
            dev.call_submission = None
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
            self.lead_command_buffer = None
