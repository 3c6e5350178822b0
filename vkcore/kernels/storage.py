"""Matrix rows on the device: the binding-size rule, row chunks and per-call buffers.

One rule decides how much one storage binding may cover (:func:`binding_limit`, which
tests lower); every kernel looks it up here when called, so one patch reaches them all.
Weights longer than one binding are split by rows into :class:`Chunk`\\ s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from vkcore.compute.repeat import KeptCalls
from vkcore.compute.tensor import Tensor
from vkcore.device.device import Device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.memory.pools import buffer_pool
from vkcore.kernels import common as c


def binding_limit(device: Device) -> int:
    """Largest buffer one storage binding may cover on ``device`` (tests lower it)."""
    return int(device.info.max_storage_buffer_range)


def check_binding_size(device: Device, nbytes: int, name: str) -> None:
    """Refuse arrays larger than one storage-buffer binding allows on this device."""
    limit = binding_limit(device)
    if nbytes > limit:
        raise ValueError(
            f"{name} needs {nbytes} bytes in one storage buffer, more than this device's "
            f"maxStorageBufferRange ({limit} bytes); split it into smaller arrays"
        )


def vectors_fit(device: Device, m: int) -> bool:
    """Whether one binding holds ``m`` 4-byte values (y, bias, scales, zero points, row
    sums); where it does not, each row chunk binds its own slice."""
    return 4 * m <= binding_limit(device)


def rows_per_buffer(device: Device, row_bytes: int, what: str) -> int:
    """Rows of ``row_bytes`` one binding holds; a row longer than a binding (rows are
    never split by columns) is a ValueError naming ``what`` (the argument's row)."""
    limit = binding_limit(device)
    rows = limit // row_bytes
    if rows == 0:
        raise ValueError(
            f"{what} needs {row_bytes} bytes, more than this device's storage-buffer "
            f"binding limit (maxStorageBufferRange: {limit} bytes); split the matrix by columns"
        )
    return rows


def row_slices(total: int, step: int) -> Iterator[tuple[int, int]]:
    """``(start, count)`` of consecutive slices of at most ``step`` of ``total`` rows."""
    for start in range(0, total, step):
        yield start, min(step, total - start)


@dataclass(frozen=True)
class Chunk:
    """Rows ``[row0, row0 + rows)`` of a matrix on the device, stored in ``buffer``."""

    row0: int
    rows: int
    buffer: Buffer


class ScratchOwner:
    """Row chunks of a matrix on the device, plus per-call buffers (vectors in and out)
    kept for reuse by later calls."""

    device: Device
    chunks: list[Chunk]
    scratch: dict[str, Buffer]
    released = False
    _remake = "create it again"  # what to do after release(), for the error message

    def release(self) -> None:
        """Free the device memory now (also happens when the object is collected)."""
        self.released = True  # first: whatever fails below, nothing uses it again
        for ch in self.chunks:
            ch.buffer.destroy()
        for buf in self.scratch.values():
            buf.destroy()
        self.scratch.clear()

    def check_usable(self) -> None:
        """Raise if the device is closed or :meth:`release` was called, saying which."""
        self.device.check()
        if self.released:
            kind = type(self).__name__
            raise c.ReleasedError(
                f"this vkcore.{kind} was released (release() freed its device memory; "
                f"its device is still open); {self._remake}"
            )

    @property
    def kept_calls(self) -> KeptCalls:
        """The calls on these weights kept for an exact repeat (vkcore.compute.repeat):
        on the weights, not per device, so a model's layers each keep theirs."""
        calls = self.__dict__.get("_kept_calls")
        if calls is None:
            calls = self.__dict__.setdefault("_kept_calls", KeptCalls(self.device))
        return calls

    def scratch_buffer(self, name: str, nbytes: int) -> Buffer:
        """A buffer of at least ``nbytes`` kept for reuse across calls."""
        buf = self.scratch.get(name)
        if buf is None or not buf.alive or buf.nbytes < nbytes:
            if buf is not None:
                buf.destroy()
            buf = Buffer(self.device, nbytes)
            self.scratch[name] = buf
        return buf


class Loans:
    """Buffers borrowed from the device's pool for one call (reused pages: no fresh ones to
    fault in), all given back on leaving the ``with`` block."""

    def __init__(self, dev: Device) -> None:
        self.pool = buffer_pool(dev)
        self.taken: list[Buffer] = []

    def take(self, nbytes: int) -> Buffer:
        """A pooled buffer of at least ``nbytes`` (and 16: one texel)."""
        self.taken.append(self.pool.acquire(max(16, nbytes)))
        return self.taken[-1]

    def holding(self, arr: np.ndarray) -> Buffer:
        """A pooled buffer holding ``arr``."""
        buf = self.take(arr.nbytes)
        buf.write(np.ascontiguousarray(arr))
        return buf

    def __enter__(self) -> Loans:
        return self

    def __exit__(self, *exc: object) -> None:
        for buf in self.taken:
            self.pool.release(buf)
        self.taken.clear()


def upload(arr: np.ndarray, dev: Device, made: list[Tensor]) -> Tensor:
    """A device Tensor holding ``arr`` (at least 4 bytes of buffer), appended to ``made``
    so the caller frees it if a later step fails."""
    t = Tensor(Buffer(dev, max(4, arr.nbytes)), arr.shape, arr.dtype, dev)
    made.append(t)
    assert t.buffer is not None
    t.buffer.write(np.ascontiguousarray(arr))
    return t


def lease_chunks(dev: Device, m: int, row_bytes: int, chunks: list[Chunk], what: str) -> None:
    """Append to ``chunks`` leased buffers for ``m`` rows of ``row_bytes``, split so that
    each fits one binding. Leased: a released tensor's memory (pages already touched)
    serves the next one of that size. A row longer than one binding is a ValueError
    naming ``what``."""
    pool = buffer_pool(dev)
    q_rows = rows_per_buffer(dev, row_bytes, what)
    for row0, rows in row_slices(m, q_rows):
        chunks.append(Chunk(row0, rows, pool.lease(rows * row_bytes)))


def free_partial(chunks: list[Chunk], made: list[Tensor]) -> None:
    """Free what a failed construction made (chunks and parameter tensors)."""
    for ch in chunks:
        ch.buffer.destroy()
    for t in made:
        if t.buffer is not None:
            t.buffer.destroy()
