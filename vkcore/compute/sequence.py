"""Work that stays on the device: several kernel and Program calls in one submission.

::

    with vkcore.sequence() as seq:          # records; at exit: one submission, then wait
        logits = vkcore.matvec(qt, h)         # built-in kernels and Program calls record here
        probs = vkcore.softmax(logits)
    probs.numpy()

    with vkcore.sequence(wait=False) as seq:  # submit at exit, do not wait
        ...
    seq.done(); seq.wait()
    t.write(new_values)                        # new data in an input Tensor, then
    seq.run()                                  # replay the same recorded work

Rules:

* While a sequence records (on this thread, for its device), every submission a call
  would make is appended to it instead; kernels called on numpy arrays upload them as
  Tensors when recorded and return Tensors. A result read before its sequence was
  submitted is a RuntimeError that says so; after a non-waiting submission, reading a
  result (or writing an input) first waits for it.
* One command buffer and fence per sequence. Every buffer its steps bind stays alive
  (and out of the buffer pool) until the sequence is released (:meth:`Sequence.release`,
  or when it is collected): several sequences may be in flight, and a buffer a user
  releases meanwhile is freed once no sequence holds it. Each submission starts after
  every earlier one on the queue (a leading barrier), so a later call never races one
  in flight. ``seq.device_seconds`` is the device time of its latest submission.
* An exception inside the ``with`` block discards the recording: nothing is submitted,
  and the Tensors its calls returned hold undefined data (they were never computed).
* A barrier goes before a step only where it reads or writes what an earlier step wrote,
  or writes what one read (``commands.Hazards``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence as Steps
from typing import Any

from vkcore import _vk
from vkcore.device.context import ctrl_c_deferred
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit import commands
from vkcore.device.submit.commands import Dispatch

_RECORDING, _SUBMITTED, _DONE, _DISCARDED, _RELEASED = (
    "recording",
    "submitted",
    "done",
    "discarded",
    "released",
)


def sequence(*, wait: bool = True, device: Device | None = None) -> Sequence:
    """A :class:`Sequence` to use as ``with vkcore.sequence() as seq:``."""
    return Sequence(resolve(device), wait=wait)


class Sequence:
    """Recorded steps, submitted at the end of a ``with`` block and replayable."""

    def __init__(self, device: Device, *, wait: bool = True) -> None:
        if not isinstance(wait, bool):
            raise TypeError(f"wait must be a bool, got {type(wait).__name__}")
        self.device = device
        self.wait_at_exit = wait
        self.steps: list[Dispatch] = []
        self.state = "new"
        self._held: dict[int, Buffer] = {}  # id -> every buffer a step binds
        self._sets: list[Any] = []
        self._cb: Any = None
        self._fence: Any = None
        self._fences: Any = None
        self._queries: Any = None  # two timestamps around the steps, where the queue has them
        self._stamps: Any = None  # where the two timestamps are read into
        self._submit: Any = None
        self._keep: Any = None
        self._lock = threading.RLock()  # wait and run: one thread at a time

    # ------------------------------------------------------------------ recording
    def __enter__(self) -> Sequence:
        if self.state != "new":
            raise RuntimeError(f"this sequence was already used ({self.state}); make a new one")
        self.device.submitter.start_recording(self)
        self.state = _RECORDING
        return self

    def add(self, dispatches: Steps[Dispatch]) -> None:
        """Take the steps of one call (the submitter hands them over while recording)."""
        if self.state != _RECORDING:
            raise RuntimeError(f"this sequence is {self.state}, not recording")
        commands.check_dispatches(dispatches)
        for d in dispatches:
            for buf in d.buffers:
                if id(buf) not in self._held:
                    self._held[id(buf)] = buf
                    buf.hold(self)
        self.steps.extend(dispatches)

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.device.submitter.stop_recording(self)
        if self.state != _RECORDING:  # released inside the block: nothing to submit
            return
        if exc_type is not None:
            self._discard()
            return
        try:
            self._record()
            self._submit_now()
        except BaseException:
            self._discard()
            raise
        if self.wait_at_exit:
            self.wait()

    def _discard(self) -> None:
        if self.state == _SUBMITTED:  # interrupted after the submission: let the work end
            with ctrl_c_deferred():
                self.wait()
        self.state = _DISCARDED
        self._free()

    # ------------------------------------------------------------------ submission
    def _record(self) -> None:
        dev = self.device
        sub = dev.submitter
        with dev.lock:
            dev.check()
            keep = _vk.Keep()
            fence = dev.ffi.new("VkFence*")
            # Adopted since start_recording: a failure's _free() finds what was made.
            # Each handle is stored as soon as it exists: a Ctrl-C between the creating
            # call and the store would lose it.
            with ctrl_c_deferred():
                info = keep.struct("VkFenceCreateInfo")
                result = dev.lib.vkCreateFence(dev.handle, info, dev.ffi.NULL, fence)
                self._fence = fence[0]  # NULL (destroying it is a no-op) if it failed
            _vk.check(result, "vkCreateFence")
            self._fences = dev.ffi.new("VkFence[1]", [self._fence])
            with ctrl_c_deferred():
                self._cb = sub.allocate_command_buffer()
            if self.steps:
                sub.descriptor_sets(self.steps, self._sets)
            if sub.timestamps:
                self._stamps = dev.ffi.new("uint64_t[2]")
                with ctrl_c_deferred():
                    self._queries = commands.create_timestamp_pool(dev)
            commands.record_dispatches(
                dev, self._cb, self.steps, self._sets, query_pool=self._queries, one_time=False
            )
            self._keep = _vk.Keep()
            cbs = self._keep.new("VkCommandBuffer[1]", [self._cb])
            self._submit = self._keep.struct(
                "VkSubmitInfo", commandBufferCount=1, pCommandBuffers=cbs
            )

    def _submit_now(self) -> None:
        dev = self.device
        with dev.lock:
            dev.check()
            _vk.check(dev.lib.vkResetFences(dev.handle, 1, self._fences), "vkResetFences")
            # Submitted is recorded before anything else can raise (a Ctrl-C included):
            # whatever fails from here on, nothing the work uses is freed while it runs.
            with ctrl_c_deferred():
                result = dev.lib.vkQueueSubmit(dev.queue, 1, self._submit, self._fence)
                if result >= 0:
                    self.state = _SUBMITTED
            _vk.check(result, "vkQueueSubmit")

    def done(self) -> bool:
        """True once the submitted work has finished (False while it runs)."""
        if self.state == _SUBMITTED:
            dev = self.device
            with dev.lock:
                if (
                    self.state == _SUBMITTED
                    and dev.lib.vkGetFenceStatus(dev.handle, self._fence) == 0
                ):
                    self.state = _DONE
        return self.state == _DONE

    def wait(self) -> None:
        """Wait until the submitted work has finished (nothing to wait for otherwise)."""
        if self.state != _SUBMITTED:
            if self.state in (_RECORDING, "new"):
                raise RuntimeError("this sequence has not been submitted yet (end its with block)")
            return
        dev = self.device
        with self._lock:  # one waiter at a time; others find it done
            if self.state != _SUBMITTED:
                return
            _vk.check(
                dev.lib.vkWaitForFences(dev.handle, 1, self._fences, 1, 2**63 - 1),
                "vkWaitForFences",
            )
            self.state = _DONE

    @property
    def device_seconds(self) -> float | None:
        """Device seconds of the latest submission (timestamps around its steps; waits
        for it); None before it ran, after release, or where the queue has no
        timestamps. The first timestamp precedes the wait for earlier submissions, so a
        sequence submitted behind others still running counts their remaining time."""
        if self.state == _SUBMITTED:
            self.wait()
        if self.state != _DONE or self._queries is None:
            return None
        dev = self.device
        with dev.lock:
            return commands.elapsed_seconds(dev, self._queries, self._stamps)

    def run(self) -> None:
        """Replay the recorded work (on the buffers' current contents) and wait for it."""
        if self.state in (_RECORDING, "new"):
            raise RuntimeError("run() replays a submitted sequence: end its with block first")
        if self.state in (_DISCARDED, _RELEASED):
            raise RuntimeError(f"this sequence was {self.state}: there is nothing to replay")
        with self._lock:  # a command buffer is resubmitted only once it has finished
            self.wait()
            self._submit_now()
            self.wait()

    # ------------------------------------------------------------------ buffers
    def before_host_access(self, reading: bool) -> None:
        """Called by a held buffer before the host reads or writes it."""
        if self.state == _RECORDING and reading:
            raise RuntimeError(
                "this result is read before its sequence was submitted: read it after the "
                "`with vkcore.sequence()` block"
            )
        if self.state == _RECORDING:
            raise RuntimeError(
                "this buffer is used by steps of the sequence being recorded, which would "
                "read the new data at submission: write it before the with block (or use "
                "another Tensor)"
            )
        if self.state == _SUBMITTED:
            self.wait()

    def release(self) -> None:
        """Free the command buffer, fence and descriptor sets (after waiting for the work)
        and let go of the buffers; idempotent. Collected sequences release themselves."""
        if self.state == _SUBMITTED:
            self.wait()
        if self.state != _DISCARDED:
            self.state = _RELEASED
        self._free()

    def _free(self) -> None:
        dev = self.device
        with dev.lock:
            if dev.handle is not None:
                if self._sets:
                    dev.submitter.free_sets(self._sets)
                    self._sets = []
                if self._cb is not None:
                    dev.submitter.free_command_buffer(self._cb)
                if self._fence is not None:
                    dev.lib.vkDestroyFence(dev.handle, self._fence, dev.ffi.NULL)
                if self._queries is not None:
                    dev.lib.vkDestroyQueryPool(dev.handle, self._queries, dev.ffi.NULL)
            self._cb = self._fence = self._submit = self._queries = None
            dev.submitter.disown(self)
            held, self._held = self._held, {}
        for buf in held.values():
            buf.unhold(self)

    def __del__(self) -> None:
        try:
            if self.state in (_SUBMITTED, _DONE):
                self.release()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        return f"vkcore.Sequence({len(self.steps)} steps, {self.state})"


def _weak(seq: Sequence) -> weakref.ref[Sequence]:
    return weakref.ref(seq)
