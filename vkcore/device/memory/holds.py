"""Buffers that sequences hold: what :class:`~vkcore.device.memory.buffer.Buffer` does while a
recorded
sequence (:mod:`vkcore.sequence`) binds it.

While any sequence holds a buffer, host access first asks them (wait for a submission
in flight, or refuse a read before the sequence was submitted), and ``destroy()`` or a
pool's ``release()`` is deferred until the last one lets go.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class Holder(Protocol):
    """What binds a buffer across calls (:class:`vkcore.compute.sequence.Sequence`)."""

    def before_host_access(self, reading: bool) -> None: ...


class Held:
    """The holding half of a Buffer (its ``destroy`` defers while held)."""

    # weakly: a dropped sequence must be collectable (it releases itself then)
    _holders: tuple[weakref.ref[Any], ...] = ()
    _destroy_when_free = False
    _release_when_free: Any = None

    def destroy(self) -> None:  # Buffer's
        raise NotImplementedError

    def hold(self, holder: Holder) -> None:
        """``holder`` (a sequence) binds this buffer until it calls :meth:`unhold`."""
        self._holders = (*self._holders, weakref.ref(holder))

    def unhold(self, holder: Holder) -> None:
        self._holders = tuple(r for r in self._holders if r() is not holder and r() is not None)
        if self._holders:
            return
        if self._destroy_when_free:
            self._destroy_when_free = False
            self.destroy()
        elif self._release_when_free is not None:
            pool, self._release_when_free = self._release_when_free, None
            pool.release(self)

    def defer_release(self, pool: Any) -> bool:
        """True when a sequence holds the buffer: it goes back to ``pool`` once free."""
        if not any(r() is not None for r in self._holders):
            return False
        self._release_when_free = pool
        return True

    def _before_host(self, reading: bool) -> None:
        for ref in self._holders:
            holder = ref()
            if holder is not None:
                holder.before_host_access(reading)
