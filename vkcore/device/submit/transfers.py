"""Staging copies: host bytes to and from buffers the host cannot map (device-local memory
on a discrete GPU, or every resident buffer under ``VKCORE_FORCE_STAGING=1``).

Two staging buffers per device, made on first use and grown as needed: ``upload`` (host
writes, device reads) and ``readback`` (device writes, host reads: host-cached memory
where the device has it). A transfer larger than STAGING_MAX_BYTES goes in several copies.
"""

from __future__ import annotations

import numpy as np

from vkcore.device.context import DeviceContext
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.submitter import Submitter

# The smallest staging buffer made (a first small transfer still gets room for later
# ones) and the most one copy moves (a larger transfer is split, staging stays bounded).
STAGING_MIN_BYTES = 1 << 20
STAGING_MAX_BYTES = 64 << 20


class Transfers:
    """The device's staging buffers and the copies through them."""

    def __init__(self, device: DeviceContext, submitter: Submitter) -> None:
        self.device = device
        self.submitter = submitter
        self.staging: dict[str, Buffer] = {}  # by purpose: "upload", "readback"

    def _staging(self, purpose: str, nbytes: int) -> Buffer:
        """The ``purpose`` ("upload" or "readback") staging buffer, of at least ``nbytes``."""
        buf = self.staging.get(purpose)
        if buf is None or buf.nbytes < nbytes:
            self.staging.pop(purpose, None)  # never a destroyed one, if the next fails
            if buf is not None:
                buf.destroy()
            buf = Buffer(self.device, max(nbytes, STAGING_MIN_BYTES), purpose=purpose)
            if buf.mapped is None:  # the placement maps every staging choice
                buf.destroy()
                raise RuntimeError(f"the {purpose} staging buffer is not host-visible")
            self.staging[purpose] = buf
        return buf

    def upload(self, dst: Buffer, raw: np.ndarray, offset: int) -> None:
        """Copy host bytes into a device-local buffer through the staging buffer."""
        with self.device.lock:
            step = min(raw.size, STAGING_MAX_BYTES)
            staging = self._staging("upload", step)
            for start in range(0, raw.size, step):
                part = raw[start : start + step]
                staging.write(part)  # mapped: flushed where not coherent
                self.submitter.copy(staging, 0, dst, offset + start, part.size)

    def download(self, src: Buffer, raw: np.ndarray, offset: int) -> None:
        """Copy a device-local buffer's bytes to the host through the staging buffer."""
        with self.device.lock:
            step = min(raw.size, STAGING_MAX_BYTES)
            staging = self._staging("readback", step)
            for start in range(0, raw.size, step):
                n = min(step, raw.size - start)
                self.submitter.copy(src, offset + start, staging, 0, n)
                staging.read(raw[start : start + n])  # mapped: invalidated where not coherent

    def destroy(self) -> None:
        """Destroy the staging buffers (made again on the next transfer)."""
        while self.staging:
            self.staging.popitem()[1].destroy()
