"""Which sequence (:mod:`vkcore.sequence`) records this thread's submissions to a device,
which recorded sequences are still alive, and which may still run: the Submitter's part
in sequences.

Everything the device may still be using is reachable from the device: a submitted
sequence is kept here (strongly) from before its ``vkQueueSubmit`` until its work is seen
to have finished, so the collector cannot free it, or the buffers, descriptor sets and
pipelines it holds, while the device runs it, whatever the order it would run
finalizers in. A sequence dropped while in flight is let go by the next submission (or
``Device.live_objects``) that finds it finished, and then collected as usual.

The fences and timestamp query pools of sequences are the device's too: a released
sequence gives them back for the next one, and the device destroys them all when it
closes. So a thread still waiting on a released sequence's fence never waits on a
destroyed one, and a release cut short by an exception leaves nothing behind at close.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from vkcore.device.context import DeviceContext, ctrl_c_deferred
from vkcore.device.submit import commands
from vkcore.device.submit.submission import create_fence


class SequenceHooks:
    """Mixed into :class:`vkcore.device.submit.submitter.Submitter`."""

    device: DeviceContext

    def _init_recording(self) -> None:
        self._local = threading.local()  # .sequence: the one recording on this thread
        self._sequences: weakref.WeakSet[Any] = weakref.WeakSet()  # recorded, not released
        self._submitted: dict[int, Any] = {}  # id -> a sequence whose work may still run
        # Per kind ("fence", "queries"): every handle made for sequences, and those free.
        self._owned: dict[str, list[Any]] = {"fence": [], "queries": []}
        self._spare: dict[str, list[Any]] = {"fence": [], "queries": []}

    def start_recording(self, sequence: Any) -> None:
        """Send this thread's submissions to ``sequence`` (its ``add``) until stopped."""
        if getattr(self._local, "sequence", None) is not None:
            raise RuntimeError("a sequence is already recording on this thread for this device")
        self._local.sequence = sequence
        self.adopt(sequence)  # a device closed meanwhile releases what it holds

    def stop_recording(self, sequence: Any) -> None:
        if getattr(self._local, "sequence", None) is sequence:
            self._local.sequence = None

    def recording(self) -> Any:
        """The sequence recording on this thread, or None."""
        return getattr(self._local, "sequence", None)

    def adopt(self, sequence: Any) -> None:
        """A recording or recorded sequence, released (if still alive) before the pools go."""
        self._sequences.add(sequence)

    def disown(self, sequence: Any) -> None:
        self._sequences.discard(sequence)
        self._submitted.pop(id(sequence), None)

    # ------------------------------------------------------------------ in flight
    def track(self, sequence: Any) -> None:
        """``sequence`` is about to be submitted: keep it alive until :meth:`untrack`."""
        self._submitted[id(sequence)] = sequence

    def untrack(self, sequence: Any) -> None:
        """``sequence``'s work has finished (or was never submitted)."""
        self._submitted.pop(id(sequence), None)

    def in_flight_elsewhere(self) -> bool:
        """Whether a sequence's work may still run (call :meth:`reap` first)."""
        return bool(self._submitted)

    def reap(self) -> None:
        """Let go of the tracked sequences whose work has finished (each one's ``done()``
        untracks it); a dropped one is collected then."""
        if self._submitted:
            with self.device.lock:
                for sequence in list(self._submitted.values()):
                    sequence.done()

    def sequences(self) -> list[Any]:
        """Every sequence not yet released: those recorded and those in flight."""
        found = {id(s): s for s in self._sequences}
        found.update(self._submitted)
        return list(found.values())

    def abandon_sequences(self) -> None:
        """In a forked child: forget the parent's sequences and their objects (no Vulkan
        call; each sequence says its device belongs to the parent when used)."""
        self._sequences = weakref.WeakSet()
        self._submitted = {}
        self._owned = {"fence": [], "queries": []}
        self._spare = {"fence": [], "queries": []}

    # ------------------------------------------------------------------ objects
    def take(self, kind: str) -> Any:
        """A ``kind`` ("fence", unsignalled or not; "queries": two timestamps) for a
        sequence: a spare one, else a new one the device owns from now on."""
        spare = self._spare[kind]
        if spare:
            return spare.pop()
        dev = self.device
        if kind == "queries":
            with ctrl_c_deferred():
                handle = commands.create_timestamp_pool(dev)
                self._owned[kind].append(handle)
            return handle
        owned = self._owned[kind]
        with ctrl_c_deferred():
            create_fence(dev, owned)
        return owned[-1]

    def give_back(self, kind: str, handle: Any) -> None:
        """A handle from :meth:`take` that its sequence no longer uses."""
        if handle is not None and any(h == handle for h in self._owned[kind]):
            self._spare[kind].append(handle)

    def destroy_sequence_objects(self) -> None:
        """Destroy every fence and query pool made for sequences (the device is closing)."""
        dev = self.device
        for kind, destroy in (
            ("fence", dev.lib.vkDestroyFence),
            ("queries", dev.lib.vkDestroyQueryPool),
        ):
            owned = self._owned[kind]
            self._spare[kind] = []
            while owned:
                destroy(dev.handle, owned.pop(), dev.ffi.NULL)
