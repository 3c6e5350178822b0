"""A call repeated exactly: what a small call leaves behind so that the next one with
the same kinds of arguments goes straight to the driver (docs/performance.md#repeated-calls).

A :class:`Repeat` holds the command buffer the device kept for the call (``Device.run``
returns it from a call's second time), the staging buffers its numpy arrays were copied
into and its results out of, and the buffers of the Tensors it bound, weakly. The caller
(``vkcore.Program``, a kernel) decides that a new call is a repeat: the same shapes,
dtypes and layouts of its arrays, the same Tensors, the same push constants and grid,
compared exactly, so that every check the full call made holds again. The repeat then only
copies arrays in, resubmits, and copies results out; whatever may have gone stale (a
buffer destroyed, the recording evicted, a sequence recording this thread's calls, calls
now timed) makes :meth:`Repeat.run` refuse before anything is submitted, and the caller
runs the full call.

:class:`KeptCalls` keeps a few (:class:`Repeats`: per kernel and device); the staging
buffers a dropped one held go back to the device's buffer pool.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from vkcore.base.per_device import PerDeviceMap
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.device.submit.submitter import Recorded


class Repeat:
    """One kept call over a tuple of arrays (the caller's: a Program's arguments, or a
    kernel's input and result): ``inputs`` pairs a position in it with the staging buffer
    that array is copied into before the submission, ``outputs`` with the one copied out
    of into it after; ``tensors`` are the buffers the call bound for Tensors (a repeat must
    bind the very same objects, see :meth:`binds`)."""

    __slots__ = ("device", "kept", "inputs", "outputs", "_tensors", "owned", "live", "context")

    def __init__(
        self,
        device: Device,
        kept: Recorded,
        inputs: Sequence[tuple[int, Buffer]],
        outputs: Sequence[tuple[int, Buffer]],
        tensors: Sequence[Buffer] = (),
        *,
        owned: Sequence[Buffer] = (),
    ) -> None:
        self.device = device
        self.context: Hashable = None  # what else it depended on (a kernel stamps it)
        self.kept = kept
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self._tensors = tuple(weakref.ref(b) for b in tensors)
        self.owned = tuple(owned)  # borrowed from the pool for this repeat: given back with it
        # False once released (under the device lock): a thread that found this repeat
        # before another dropped it must not copy into buffers the pool has lent since.
        self.live = True

    def binds(self, buffers: Sequence[Buffer | None]) -> bool:
        """Whether ``buffers`` are the very buffers the call bound for its Tensors."""
        refs = self._tensors
        if len(buffers) != len(refs):
            return False
        for buf, ref in zip(buffers, refs, strict=True):
            if buf is None or buf is not ref():
                return False
        return True

    def run(self, arrays: Sequence[np.ndarray]) -> bool:
        """Copy the input ``arrays`` in, resubmit, copy the results into the output ones
        (arrays the caller has checked: C-contiguous, of each staging buffer's size and
        the call's dtypes, writable where written); False, with nothing submitted, where
        the kept recording no longer holds (the caller then makes the full call)."""
        dev = self.device
        with dev.lock:
            if not self.live or self.kept.released:
                return False
            # Closed, or a forked child's (whose mappings may be shared with the parent's
            # device): raised as the full call raises it, before anything is copied.
            dev.check()
            # Written before rerun may refuse (inside a sequence): the staging buffers are
            # the repeat's own, which no sequence binds.
            for i, buf in self.inputs:
                buf.write(arrays[i])
            if not dev.rerun(self.kept):
                return False
            for i, buf in self.outputs:
                buf.read(arrays[i])
        return True

    def release(self) -> None:
        """Retire this repeat and give back the staging buffers it borrowed."""
        with self.device.lock:
            self.live = False
            owned, self.owned = self.owned, ()
            if owned:
                pool = buffer_pool(self.device)
                for buf in owned:
                    pool.release(buf)


# How many kept calls one kernel keeps per device (a decode loop repeats a handful).
KEPT_PER_KERNEL = 8
# A numpy array up to this size keeps its staging buffer between calls (a Program's held
# buffers, a kernel's kept call): a repeat then skips the pool. Larger ones borrow per call.
SMALL_CALL_BYTES = 1 << 16


class KeptCalls:
    """A few kept calls by the caller's signature of a call (everything that decides its
    dispatches: shapes, dtypes, options); the oldest kept go first, and a dropped one is
    released."""

    def __init__(self, device: Device, limit: int = KEPT_PER_KERNEL) -> None:
        self.device = device
        self.limit = limit
        self._calls: OrderedDict[Hashable, Repeat] = OrderedDict()

    def get(self, signature: Hashable) -> Repeat | None:
        return self._calls.get(signature)

    def put(self, signature: Hashable, repeat: Repeat) -> None:
        """Keep ``repeat`` under ``signature`` (replacing, and releasing, what was there)."""
        with self.device.lock:
            self.drop(signature)
            calls = self._calls
            calls[signature] = repeat
            while len(calls) > self.limit:
                calls.popitem(last=False)[1].release()

    def drop(self, signature: Hashable) -> None:
        """Forget (and release) the call kept under ``signature``, if any."""
        with self.device.lock:
            old = self._calls.pop(signature, None)
            if old is not None:
                old.release()


class Repeats:
    """The kept calls of one kernel, a :class:`KeptCalls` per device."""

    def __init__(self, limit: int = KEPT_PER_KERNEL) -> None:
        self.limit = limit
        self._tables: PerDeviceMap[KeptCalls] = PerDeviceMap()

    def get(self, device: Device, signature: Hashable) -> Repeat | None:
        table = self._tables.get(device)
        return None if table is None else table.get(signature)

    def put(self, device: Device, signature: Hashable, repeat: Repeat) -> None:
        with device.lock:
            table = self._tables.get(device)
            if table is None:
                table = KeptCalls(device, self.limit)
                self._tables[device] = table
            table.put(signature, repeat)

    def drop(self, device: Device, signature: Hashable) -> None:
        table = self._tables.get(device)
        if table is not None:
            table.drop(signature)


def exact_values(values: dict[str, Any]) -> tuple[tuple[str, type], ...] | None:
    """The push-constant values' types when each is a plain int or float (compared
    exactly, value and type, by a repeat), else None (the call is not kept)."""
    types = []
    for name, v in values.items():
        t = type(v)
        if t is not int and t is not float:
            return None
        types.append((name, t))
    return tuple(types)
