"""Buffers that sequences hold: what :class:`~vkcore.device.memory.buffer.Buffer` does while a
recorded
sequence (:mod:`vkcore.sequence`) binds it.

While any sequence holds a buffer, host access first asks them (wait for a submission
in flight, or refuse to read a result before the sequence was submitted), and
``destroy()`` or a pool's ``release()`` is deferred until the last one lets go.

A holder puts one :class:`Claim` on every buffer it binds. The claim refers to the holder
weakly (a dropped sequence must stay collectable) and says whether work the holder
submitted may still run. The collector clears weak references before it runs any
finalizer, so a buffer collected together with its sequence (a reference cycle, a device
dropped with everything on it) finds the holder gone; the flag, which the holder clears
only once its work has finished, still defers the free until the holder's own finalizer
(or the device's close) has waited for that work.
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol


class Holder(Protocol):
    """What binds a buffer across calls (:class:`vkcore.compute.sequence.Sequence`)."""

    def before_host_access(self, buffer: Any, reading: bool) -> None: ...


class Claim:
    """One holder's claim on the buffers it binds (see the module docstring)."""

    __slots__ = ("_holder", "in_flight")

    def __init__(self, holder: Holder) -> None:
        self._holder = weakref.ref(holder)
        self.in_flight = False  # set by the holder from before a submission until it finished

    def holder(self) -> Holder | None:
        return self._holder()

    @property
    def active(self) -> bool:
        """The buffer must not be freed or reused: its holder lives or its work may run."""
        return self.in_flight or self._holder() is not None


class Held:
    """The holding half of a Buffer (its ``destroy`` defers while held)."""

    _holders: tuple[Claim, ...] = ()
    _destroy_when_free = False
    _release_when_free: Any = None

    def destroy(self) -> None:  # Buffer's
        raise NotImplementedError

    def hold(self, claim: Claim) -> None:
        """``claim``'s holder (a sequence) binds this buffer until it calls :meth:`unhold`."""
        self._holders = (*self._holders, claim)

    def unhold(self, claim: Claim) -> None:
        self._holders = tuple(c for c in self._holders if c is not claim and c.active)
        if self._holders:
            return
        if self._destroy_when_free:
            self._destroy_when_free = False
            self.destroy()
        elif self._release_when_free is not None:
            pool, self._release_when_free = self._release_when_free, None
            pool.release(self)

    @property
    def held(self) -> bool:
        """True while a holder lives or work it submitted may still use this buffer."""
        return any(c.active for c in self._holders)

    def defer_release(self, pool: Any) -> bool:
        """True when a sequence holds the buffer: it goes back to ``pool`` once free."""
        if not self.held:
            return False
        self._release_when_free = pool
        return True

    def _before_host(self, reading: bool) -> None:
        for claim in self._holders:
            holder = claim.holder()
            if holder is not None:
                holder.before_host_access(self, reading)
