"""Which sequence (:mod:`vkcore.sequence`) records this thread's submissions to a device,
and which recorded sequences are still alive: the Submitter's part in sequences."""

from __future__ import annotations

import threading
import weakref
from typing import Any


class SequenceHooks:
    """Mixed into :class:`vkcore.device.submit.submitter.Submitter`."""

    def _init_recording(self) -> None:
        self._local = threading.local()  # .sequence: the one recording on this thread
        self._sequences: weakref.WeakSet[Any] = weakref.WeakSet()  # recorded, not released

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
