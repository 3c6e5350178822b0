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
  releases meanwhile is freed once no sequence holds it. A submission while another
  sequence may still run goes behind a barrier after all earlier work, so a later call
  never races one in flight (:mod:`vkcore.device.submit.submitter`). Submitting and
  waiting follow the one rule of :mod:`vkcore.device.submit.submission`.
* ``vkcore.sequence(timed=True)`` (or a ``Device(timed=True)``) writes two timestamps
  around the steps; ``seq.device_seconds`` is then the device time of its latest
  submission, and None otherwise.
* An exception inside the ``with`` block discards the recording: nothing is submitted,
  and the Tensors its calls returned hold undefined data (they were never computed).
* A barrier goes before a step only where it reads or writes what an earlier step wrote,
  or writes what one read (``commands.Hazards``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence as Steps
from enum import StrEnum
from typing import Any

from vkcore.device.context import ctrl_c_deferred
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.holds import Claim
from vkcore.device.submit import commands
from vkcore.device.submit.commands import Dispatch
from vkcore.device.submit.submission import Submission
from vkcore.device.submit.submitter import Batch


class State(StrEnum):
    """Where a sequence is in its life (compares equal to its value, ``"done"``...)."""

    NEW = "new"
    RECORDING = "recording"
    SUBMITTED = "submitted"  # its latest submission may still run
    DONE = "done"  # submitted and finished: replayable
    DISCARDED = "discarded"  # an exception ended the recording: nothing to replay
    RELEASED = "released"


def sequence(
    *, wait: bool = True, timed: bool | None = None, device: Device | None = None
) -> Sequence:
    """A :class:`Sequence` to use as ``with vkcore.sequence() as seq:``."""
    return Sequence(resolve(device), wait=wait, timed=timed)


def recording(device: Device) -> Sequence | None:
    """The sequence recording this thread's calls on ``device``, or None."""
    seq = device.submitter.recording()
    return seq if isinstance(seq, Sequence) else None


class Sequence:
    """Recorded steps, submitted at the end of a ``with`` block and replayable."""

    def __init__(self, device: Device, *, wait: bool = True, timed: bool | None = None) -> None:
        if not isinstance(wait, bool):
            raise TypeError(f"wait must be a bool, got {type(wait).__name__}")
        if timed is not None and not isinstance(timed, bool):
            raise TypeError(f"timed must be a bool or None, got {type(timed).__name__}")
        self.device = device
        self.wait_at_exit = wait
        self.timed = device.timed if timed is None else timed
        self.steps: list[Dispatch] = []
        self.state = State.NEW
        self._held: dict[int, Buffer] = {}  # id -> every buffer a step binds
        self._written: set[int] = set()  # ids of the buffers a step may write
        self._claim = Claim(self)  # on every held buffer; in flight while the work may run
        self._sets: list[Any] = []
        self._cb: Any = None
        self._fence: Any = None
        self._queries: Any = None  # two timestamps around the steps, when timed
        self._submission: Submission | None = None
        self._batch: Batch | None = None
        self._lock = threading.RLock()  # run: one replay at a time
        # How many submissions were seen finished: state that a call records (a KV
        # cache's length) becomes visible once this counts its work.
        self.completed = 0

    # ------------------------------------------------------------------ recording
    def __enter__(self) -> Sequence:
        if self.state != State.NEW:
            raise RuntimeError(f"this sequence was already used ({self.state}); make a new one")
        self.device.check()
        self.device.submitter.start_recording(self)
        self.state = State.RECORDING
        return self

    def add(self, dispatches: Steps[Dispatch]) -> None:
        """Take the steps of one call (the submitter hands them over while recording)."""
        if self.state != State.RECORDING:
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
        if self.state != State.RECORDING:  # released inside the block: nothing to submit
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
            self.state = State.DISCARDED

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
            with ctrl_c_deferred():
                self._cb = sub.allocate_command_buffer()
            if self.steps:
                sub.descriptor_sets(self.steps, self._sets)
            if self.timed and sub.timestamps:
                self._queries = sub.take("queries")
            commands.record_dispatches(
                dev, self._cb, self.steps, self._sets, query_pool=self._queries, one_time=False
            )
            self._batch = Batch(self._cb, sub.lead_command_buffer)
            self._submission = Submission(dev, self._fence, self._queries)

    def _submit_now(self) -> None:
        dev = self.device
        sub = dev.submitter
        with dev.lock:
            dev.check()
            submission, batch = self._submission, self._batch
            if submission is None or batch is None:
                raise RuntimeError(f"this sequence was {self.state}: there is nothing to replay")
            info = sub.submit_info(batch)  # behind a barrier if other work may still run
            # From here until the work is seen finished, whatever is raised (Ctrl-C, a
            # signal handler's exception, a trace hook's), it counts as in flight: the
            # claim defers every free of its buffers, the device keeps this sequence
            # alive, and finishing it waits for the queue (Submission.settle).
            before = self.state
            self._claim.in_flight = True
            sub.track(self)
            self.state = State.SUBMITTED
            try:
                submission.submit(info)
            except BaseException:
                if not submission.unsettled:  # it never reached the queue
                    self._finished(ran=False)
                    self.state = before
                raise

    def _finished(self, ran: bool = True) -> None:
        """The latest submission has finished (or, not ``ran``, never reached the queue)."""
        self.completed += ran
        self.state = State.DONE
        self._claim.in_flight = False
        self.device.submitter.untrack(self)

    def _require_device(self) -> None:
        """A submitted sequence is only usable on its open device (after ``os.fork()`` the
        child's copy says the device belongs to the parent)."""
        if self.device.closed and self.state in (State.SUBMITTED, State.DONE):
            raise RuntimeError(self.device.closed_reason())

    def done(self) -> bool:
        """True once the submitted work has finished (False while it runs)."""
        self._require_device()
        if self.state == State.SUBMITTED:
            with self.device.lock:
                submission = self._submission
                if self.state == State.SUBMITTED and submission is not None and submission.poll():
                    self._finished()
        return self.state == State.DONE

    def wait(self) -> None:
        """Wait until the submitted work has finished (nothing to wait for otherwise)."""
        if self.state in (State.RECORDING, State.NEW):
            raise RuntimeError("this sequence has not been submitted yet (end its with block)")
        self._require_device()
        submission = self._submission
        if self.state != State.SUBMITTED or submission is None:
            return
        # Outside the device lock: other threads keep submitting meanwhile. The fence
        # belongs to the device until it closes (never destroyed under this wait).
        dev = self.device
        submission.wait_unlocked(dev.lock)
        with dev.lock:
            if self.state == State.SUBMITTED and not submission.unsettled:
                self._finished()

    def _finish_locked(self) -> None:
        """With the device lock held: wait for work that may still run (before a free)."""
        if not self._claim.in_flight:
            return
        if self._submission is not None:
            self._submission.wait()
        self._finished()

    @property
    def device_seconds(self) -> float | None:
        """Device seconds of the latest submission (timestamps around its steps; waits
        for it); None unless the sequence is timed, before it ran, after release, or
        where the queue has no timestamps. The first timestamp may be written before
        the work of earlier submissions still running has finished, so a sequence
        submitted behind others counts their remaining time."""
        if self.state in (State.RECORDING, State.NEW):
            return None
        self.wait()
        with self.device.lock:
            submission = self._submission
            if self.state != State.DONE or submission is None:
                return None
            return submission.seconds()

    def run(self) -> None:
        """Replay the recorded work (on the buffers' current contents) and wait for it."""
        if self.state in (State.RECORDING, State.NEW):
            raise RuntimeError("run() replays a submitted sequence: end its with block first")
        if self.state in (State.DISCARDED, State.RELEASED):
            raise RuntimeError(f"this sequence was {self.state}: there is nothing to replay")
        self._require_device()
        with self._lock:  # a command buffer is resubmitted only once it has finished
            self.wait()
            self._submit_now()
            self.wait()

    # ------------------------------------------------------------------ buffers
    def before_host_access(self, buffer: Any, reading: bool) -> None:
        """Called by a held buffer before the host reads or writes it."""
        if self.state == State.RECORDING:
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
        if self.state == State.SUBMITTED:
            self.wait()
        elif self.state == State.DONE:
            self._require_device()

    def release(self) -> None:
        """Free the command buffer and descriptor sets and give the fence back (after
        waiting for the work), and let go of the buffers; idempotent. Collected sequences
        release themselves."""
        dev = self.device
        if self.state == State.SUBMITTED and not dev.closed:
            self.wait()  # outside the device lock, as any wait
        with dev.lock:
            self._free()
            if self.state != State.DISCARDED:
                self.state = State.RELEASED

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
                cb, self._cb, self._batch = self._cb, None, None
                if cb is not None:
                    sub.free_command_buffer(cb)
                fence, self._fence, self._submission = self._fence, None, None
                sub.give_back("fence", fence)
                queries, self._queries = self._queries, None
                sub.give_back("queries", queries)
            self._cb = self._fence = self._queries = None
            self._submission = self._batch = None
            self._sets = []
            self._claim.in_flight = False
            sub.disown(self)
            held, self._held = self._held, {}
        for buf in held.values():
            buf.unhold(self._claim)

    def __del__(self) -> None:
        try:
            if self.state in (State.SUBMITTED, State.DONE):
                self.release()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __repr__(self) -> str:
        return f"vkcore.Sequence({len(self.steps)} steps, {self.state})"
