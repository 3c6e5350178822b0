"""One fence's trips to the queue: submit a batch, know whether it has finished, wait for
it, and finish one that an exception cut short. Single calls (the device's
:class:`~vkcore.device.submit.submitter.Submitter`) and sequences
(:class:`vkcore.Sequence`) submit through it alike, so the rules below are written here
only.

* **In flight from before ``vkQueueSubmit``.** The state is ``PENDING`` from before the
  call until its result is known, then ``IN_FLIGHT`` until a wait or a poll sees the fence
  signalled. An exception anywhere in between (Ctrl-C, a signal handler's, a trace hook's)
  leaves it ``PENDING`` or ``IN_FLIGHT``, never ``IDLE``: whoever frees what the work uses
  calls :meth:`settle` first, which waits for the queue to be idle.
* **Waiting** (:meth:`wait`): the fence is polled for a short while (a tiny kernel
  finishes within it, and the thread is not put to sleep and woken again, which costs more
  than the kernel on a CPU device), then waited for in slices of 100 ms so that Python can
  handle signals. A Ctrl-C during a wait is held back until the work has finished, then
  raised: the caller's state is never left halfway.
* **Timestamps** only where a query pool was given (``timed`` calls and sequences): two
  of them around the batch, read by :meth:`seconds`.
"""

from __future__ import annotations

import time
from typing import Any

from vkcore import _vk
from vkcore.device.context import DeviceContext
from vkcore.errors import result_code

IDLE, PENDING, IN_FLIGHT = "idle", "pending", "in flight"

_VK_TIMEOUT = result_code("VK_TIMEOUT")
_VK_NOT_READY = result_code("VK_NOT_READY")
# How long a wait polls before it sleeps. Long enough for a tiny kernel on a CPU device
# (lavapipe's dispatch of a few workgroups takes 20-60 us), short enough that a long kernel
# loses next to nothing to the polling thread on a machine with two cores.
POLL_SECONDS = 200e-6
_WAIT_SLICE_NS = 100_000_000  # a blocking wait wakes up this often to let Python see signals
_SETTLE_TRIES = 16  # exceptions held back while settling before one is let through


def raise_deferred(interrupted: list[BaseException]) -> None:
    """Raise the last exception a wait held back, if any. It leaves the list as it is
    raised and is never bound to a name, so no frame keeps the exception its own traceback
    refers to: that cycle would keep every buffer on the stack (and its device memory)
    alive until the collector runs."""
    if interrupted:
        del interrupted[:-1]
        raise interrupted.pop()


class Submission:
    """A fence (and optionally a two-timestamp query pool) and the state of the latest
    batch submitted with it. The handles belong to the caller, who destroys them."""

    def __init__(self, device: DeviceContext, fence: Any, queries: Any = None) -> None:
        self.device = device
        self.fence = fence
        self.queries = queries
        self.state = IDLE
        self.serial = 0  # batches submitted so far: a wait finishes only the one it waited for
        self.ran = False  # the latest batch is known to have run (its timestamps are written)
        # Built once: every struct made through the binding costs microseconds per call.
        self._fences = device.ffi.new("VkFence[1]", [fence])
        self._stamps = device.ffi.new("uint64_t[2]") if queries is not None else None
        # The fence may be signalled (a spare one a released sequence gave back): reset
        # before the first submission, then after each one that signalled it.
        self._signalled = True

    @property
    def state(self) -> str:
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value
        # Submitted (or about to be) and not yet seen finished: a plain attribute, so that
        # the device context reads it before every free without calling up a layer.
        self.unsettled = value != IDLE

    def submit(self, submit_info: Any) -> None:
        """vkQueueSubmit of one VkSubmitInfo, signalling the fence. The caller holds the
        device lock, and has settled any earlier batch."""
        dev = self.device
        lib = dev.lib
        if self._signalled:
            _vk.check(lib.vkResetFences(dev.handle, 1, self._fences), "vkResetFences")
            self._signalled = False
        # (The state's two attributes set directly: this is every call's path.)
        self._state, self.unsettled = PENDING, True
        self.serial += 1
        result = lib.vkQueueSubmit(dev.queue, 1, submit_info, self.fence)
        if result < 0:
            self.state = IDLE  # nothing was submitted; the fence is untouched
        _vk.check(result, "vkQueueSubmit")
        self.ran = False
        self._state = IN_FLIGHT

    def poll(self) -> bool:
        """True once the latest batch has finished (it is then IDLE); a PENDING one is
        settled first."""
        if self.state == PENDING:
            self.settle()
        elif self.state == IN_FLIGHT:
            dev = self.device
            result = dev.lib.vkWaitForFences(dev.handle, 1, self._fences, 1, 0)
            if result not in (_VK_TIMEOUT, _VK_NOT_READY):
                _vk.check(result, "vkWaitForFences")
                self._finished(ran=True)
        return self.state == IDLE

    def wait(self) -> None:
        """Wait until the latest batch has finished (see the module's rules); nothing to do
        when IDLE. A Ctrl-C or other exception raised meanwhile is raised once the work
        is done; if waiting itself fails, the batch is settled before the error goes up."""
        state = self._state
        if state != IN_FLIGHT:
            if state == PENDING:
                self.settle()
            return
        interrupted: list[BaseException] = []
        try:
            self._wait_fence(self._fences, interrupted)
        except BaseException:
            self.settle()
            raise
        self._finished(ran=True)
        if interrupted:
            raise_deferred(interrupted)

    def wait_unlocked(self, lock: Any) -> None:
        """:meth:`wait` for a caller that must not hold ``lock`` (the device lock) while it
        sleeps: other threads keep submitting meanwhile. The batch counts as finished only
        if no later one was submitted in between."""
        with lock:
            if self.state != IN_FLIGHT:
                self.wait()  # IDLE: nothing; PENDING: settled under the lock
                return
            serial = self.serial
        interrupted: list[BaseException] = []
        self._wait_fence(self._fences, interrupted)
        with lock:
            if self.state == IN_FLIGHT and self.serial == serial:
                self._finished(ran=True)
        raise_deferred(interrupted)

    def _wait_fence(self, fences: Any, interrupted: list[BaseException]) -> None:
        """Poll, then block in slices, until the fence signals; a KeyboardInterrupt
        meanwhile is appended to ``interrupted`` and the wait goes on."""
        dev = self.device
        wait = dev.lib.vkWaitForFences
        handle = dev.handle
        deadline = None  # the clock is read only once the first poll finds it running
        timeout = 0
        while True:
            try:
                result = wait(handle, 1, fences, 1, timeout)
                if result == 0:
                    return
                if result == _VK_TIMEOUT:
                    if timeout == 0:
                        now = time.perf_counter()
                        if deadline is None:
                            deadline = now + POLL_SECONDS
                        elif now >= deadline:
                            timeout = _WAIT_SLICE_NS
                    continue
                _vk.check(result, "vkWaitForFences")
                return
            except KeyboardInterrupt as exc:  # finish the wait, then raise it
                interrupted.append(exc)

    def settle(self) -> None:
        """Finish a batch whatever became of it: once the queue is idle nothing of it
        runs, and the fence (reset before the submission) says whether it ran at all. An
        exception meanwhile (Ctrl-C, a signal handler's) is raised once both are known."""
        if self.state == IDLE:
            return
        dev = self.device
        interrupted: list[BaseException] = []
        for _ in range(_SETTLE_TRIES):
            try:
                _vk.check(dev.lib.vkQueueWaitIdle(dev.queue), "vkQueueWaitIdle")
                ran = dev.lib.vkGetFenceStatus(dev.handle, self.fence) == 0
                self._finished(ran=ran)
                break
            except BaseException as exc:  # noqa: BLE001 - raised below, once settled
                interrupted.append(exc)
        raise_deferred(interrupted)

    def _finished(self, ran: bool) -> None:
        self.ran = self.ran or ran
        self._signalled = self._signalled or ran
        self._state, self.unsettled = IDLE, False  # (the setter's two, directly: every call)

    def seconds(self) -> float | None:
        """Device seconds between the two timestamps of the latest batch that ran; None
        without a query pool or before one ran. The caller has waited for it."""
        if self.queries is None or not self.ran or self.state != IDLE:
            return None
        return elapsed_seconds(self.device, self.queries, self._stamps)


def elapsed_seconds(dev: DeviceContext, pool: Any, out: Any) -> float:
    """Seconds between the two timestamps of ``pool`` (``out``: a cffi uint64_t[2]),
    waiting for them; the tick difference wraps at the queue's valid bits."""
    flags = 0x1 | 0x2  # VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT
    _vk.check(
        dev.lib.vkGetQueryPoolResults(dev.handle, pool, 0, 2, 16, out, 8, flags),
        "vkGetQueryPoolResults",
    )
    bits = dev.timestamp_valid_bits
    mask = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
    ticks = (int(out[1]) - int(out[0])) & mask
    return ticks * dev.info.timestamp_period * 1e-9


def create_fence(dev: DeviceContext, store: list[Any]) -> None:
    """An unsignalled fence, appended to ``store`` as soon as it exists, before its result
    is checked: whatever is raised from then on, its owner finds it and destroys it."""
    keep = _vk.Keep()
    out = dev.ffi.new("VkFence*")
    info = keep.struct("VkFenceCreateInfo")
    result = dev.lib.vkCreateFence(dev.handle, info, dev.ffi.NULL, out)
    if result == 0:
        store.append(out[0])
    _vk.check(result, "vkCreateFence")
