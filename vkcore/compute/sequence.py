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
from collections.abc import Sequence as Steps
from typing import Any

from vkcore import _vk
from vkcore.device.context import ctrl_c_deferred
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.holds import Claim
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
        self._written: set[int] = set()  # ids of the buffers a step may write
        self._claim = Claim(self)  # on every held buffer; in flight while the work may run
        self._sets: list[Any] = []
        self._cb: Any = None
        self._fence: Any = None
        self._fences: Any = None
        self._queries: Any = None  # two timestamps around the steps, where the queue has them
        self._stamps: Any = None  # where the two timestamps are read into
        self._submit: Any = None
        self._keep: Any = None
        # vkQueueSubmit is called (or about to be) and its result is not known yet: the
        # work may or may not be on the queue, so finishing it waits for the queue.
        self._pending = False
        self._serial = 0  # submissions so far: a wait ends only the one it waited for
        self._ran = False  # a submission is known to have run (its timestamps are written)
        self._lock = threading.RLock()  # run: one replay at a time

    # ------------------------------------------------------------------ recording
    def __enter__(self) -> Sequence:
        if self.state != "new":
            raise RuntimeError(f"this sequence was already used ({self.state}); make a new one")
        self.device.check()
        self.device.submitter.start_recording(self)
        self.state = _RECORDING
        return self

    def add(self, dispatches: Steps[Dispatch]) -> None:
        """Take the steps of one call (the submitter hands them over while recording)."""
        if self.state != _RECORDING:
            raise RuntimeError(f"this sequence is {self.state}, not recording")
        commands.check_dispatches(dispatches)
        for d in dispatches:
            for buf, access in zip(d.buffers, d.pipeline.access, strict=True):
                if id(buf) not in self._held:
                    self._held[id(buf)] = buf
                    buf.hold(self._claim)
                if access == "write":
                    self._written.add(id(buf))
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
        """Let the work end if it was submitted (wherever the exception came from), then
        free everything."""
        with self.device.lock:
            self._free()
            self.state = _DISCARDED

    # ------------------------------------------------------------------ submission
    def _record(self) -> None:
        dev = self.device
        sub = dev.submitter
        with dev.lock:
            dev.check()
            # Adopted since start_recording: a failure's _free() finds what was made.
            # Each handle is stored as soon as it exists: a Ctrl-C between the creating
            # call and the store would lose it.
            self._fence = sub.take("fence")
            self._fences = dev.ffi.new("VkFence[1]", [self._fence])
            with ctrl_c_deferred():
                self._cb = sub.allocate_command_buffer()
            if self.steps:
                sub.descriptor_sets(self.steps, self._sets)
            if sub.timestamps:
                self._stamps = dev.ffi.new("uint64_t[2]")
                self._queries = sub.take("queries")
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
        sub = dev.submitter
        with dev.lock:
            dev.check()
            if self._submit is None or self.state in (_RELEASED, _DISCARDED):
                raise RuntimeError(f"this sequence was {self.state}: there is nothing to replay")
            sub.reap()
            _vk.check(dev.lib.vkResetFences(dev.handle, 1, self._fences), "vkResetFences")
            # From here until the result is known, whatever is raised (Ctrl-C, a signal
            # handler's exception, a trace hook's), the work counts as in flight: the
            # claim defers every free of its buffers, the device keeps this sequence
            # alive, and finishing it waits for the queue (_settle).
            before = self.state
            self._pending = True
            self._claim.in_flight = True
            sub.track(self)
            self._serial += 1
            self.state = _SUBMITTED
            result = dev.lib.vkQueueSubmit(dev.queue, 1, self._submit, self._fence)
            if result >= 0:
                self._pending = False  # the fence will signal: waits wait for it
            else:
                self._finished(ran=False)  # nothing was submitted
                self.state = before
        _vk.check(result, "vkQueueSubmit")

    def _finished(self, ran: bool) -> None:
        """The latest submission has finished (``ran``) or never reached the queue."""
        self._pending = False
        self._ran = self._ran or ran
        self.state = _DONE
        self._claim.in_flight = False
        self.device.submitter.untrack(self)

    def _settle(self) -> None:
        """Finish a submission whose result was lost: once the queue is idle nothing of it
        runs, and the fence (reset before the submission) says whether it ran at all."""
        dev = self.device
        with dev.lock:
            if self.state != _SUBMITTED:
                return
            _vk.check(dev.lib.vkQueueWaitIdle(dev.queue), "vkQueueWaitIdle")
            self._finished(ran=dev.lib.vkGetFenceStatus(dev.handle, self._fence) == 0)

    def _require_device(self) -> None:
        """A submitted sequence is only usable on its open device (after ``os.fork()`` the
        child's copy says the device belongs to the parent)."""
        if self.device.closed and self.state in (_SUBMITTED, _DONE):
            raise RuntimeError(self.device.closed_reason())

    def done(self) -> bool:
        """True once the submitted work has finished (False while it runs)."""
        self._require_device()
        if self.state == _SUBMITTED:
            dev = self.device
            with dev.lock:
                if self.state != _SUBMITTED:
                    pass
                elif self._pending:
                    self._settle()
                elif dev.lib.vkGetFenceStatus(dev.handle, self._fence) == 0:
                    self._finished(ran=True)
        return self.state == _DONE

    def wait(self) -> None:
        """Wait until the submitted work has finished (nothing to wait for otherwise)."""
        if self.state in (_RECORDING, "new"):
            raise RuntimeError("this sequence has not been submitted yet (end its with block)")
        self._require_device()
        dev = self.device
        with dev.lock:
            if self.state != _SUBMITTED:
                return
            if self._pending:
                self._settle()
                return
            handle, fences, serial = dev.handle, self._fences, self._serial
        # Outside the device lock: other threads keep submitting meanwhile. The fence
        # belongs to the device until it closes (never destroyed under this wait), and
        # the state changes only if no replay was submitted since.
        _vk.check(dev.lib.vkWaitForFences(handle, 1, fences, 1, 2**63 - 1), "vkWaitForFences")
        with dev.lock:
            if self.state == _SUBMITTED and self._serial == serial:
                self._finished(ran=True)

    def _finish_locked(self) -> None:
        """With the device lock held: wait for work that may still run (before a free)."""
        if not self._claim.in_flight:
            return
        dev = self.device
        if self._pending or self.state != _SUBMITTED:
            _vk.check(dev.lib.vkQueueWaitIdle(dev.queue), "vkQueueWaitIdle")
            self._finished(ran=dev.lib.vkGetFenceStatus(dev.handle, self._fence) == 0)
            return
        _vk.check(
            dev.lib.vkWaitForFences(dev.handle, 1, self._fences, 1, 2**63 - 1), "vkWaitForFences"
        )
        self._finished(ran=True)

    @property
    def device_seconds(self) -> float | None:
        """Device seconds of the latest submission (timestamps around its steps; waits
        for it); None before it ran, after release, or where the queue has no
        timestamps. The first timestamp precedes the wait for earlier submissions, so a
        sequence submitted behind others still running counts their remaining time."""
        if self.state in (_RECORDING, "new"):
            return None
        self.wait()
        dev = self.device
        with dev.lock:
            if self.state != _DONE or self._queries is None or not self._ran:
                return None
            return commands.elapsed_seconds(dev, self._queries, self._stamps)

    def run(self) -> None:
        """Replay the recorded work (on the buffers' current contents) and wait for it."""
        if self.state in (_RECORDING, "new"):
            raise RuntimeError("run() replays a submitted sequence: end its with block first")
        if self.state in (_DISCARDED, _RELEASED):
            raise RuntimeError(f"this sequence was {self.state}: there is nothing to replay")
        self._require_device()
        with self._lock:  # a command buffer is resubmitted only once it has finished
            self.wait()
            self._submit_now()
            self.wait()

    # ------------------------------------------------------------------ buffers
    def before_host_access(self, buffer: Any, reading: bool) -> None:
        """Called by a held buffer before the host reads or writes it."""
        if self.state == _RECORDING:
            written = id(buffer) in self._written
            if reading and not written:
                return  # an input the steps only read: nothing has changed it yet
            if reading:
                raise RuntimeError(
                    "this result is read before its sequence was submitted: read it after "
                    "the `with vkcore.sequence()` block"
                )
            raise RuntimeError(
                f"this buffer is {'written' if written else 'read'} by steps of the sequence "
                "being recorded, which run at submission, after this write: write it before "
                "the with block (or use another Tensor)"
            )
        if self.state == _SUBMITTED:
            self.wait()
        elif self.state == _DONE:
            self._require_device()

    def release(self) -> None:
        """Free the command buffer and descriptor sets and give the fence back (after
        waiting for the work), and let go of the buffers; idempotent. Collected sequences
        release themselves."""
        dev = self.device
        if self.state == _SUBMITTED and not dev.closed:
            self.wait()  # outside the device lock, as any wait
        with dev.lock:
            self._free()
            if self.state != _DISCARDED:
                self.state = _RELEASED

    def _free(self) -> None:
        """Each handle is taken off this object before it is freed or given back: an
        exception partway leaves it to the device's close, never freed twice."""
        dev = self.device
        sub = dev.submitter
        with dev.lock:
            if dev.handle is not None:
                self._finish_locked()  # nothing is freed while the device may use it
                sets, self._sets = self._sets, []
                sub.free_sets(sets)
                cb, self._cb, self._submit = self._cb, None, None
                if cb is not None:
                    sub.free_command_buffer(cb)
                fence, self._fence = self._fence, None
                sub.give_back("fence", fence)
                queries, self._queries = self._queries, None
                sub.give_back("queries", queries)
            self._cb = self._fence = self._submit = self._queries = None
            self._sets = []
            self._claim.in_flight = False
            sub.disown(self)
            held, self._held = self._held, {}
        for buf in held.values():
            buf.unhold(self._claim)

    def __del__(self) -> None:
        try:
            if self.state in (_SUBMITTED, _DONE):
                self.release()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        return f"vkcore.Sequence({len(self.steps)} steps, {self.state})"
