"""The device's VkPipelineCache.

Every pipeline is created through this object (``creating()`` holds its lock, so a save
never runs during a creation). Persistence to disk is added on top of this interface.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import vkapi

if TYPE_CHECKING:
    from .device import Device

log = logging.getLogger("vkcore")


class PipelineCache:
    """Owns the VkPipelineCache of one device."""

    def __init__(self, device: Device, *, persist: bool = True, directory: str | None = None) -> None:
        self.device = device
        self.persist = persist
        self.lock = threading.Lock()
        self.hits = 0
        self.creations = 0
        self.handle: Any = None
        self._create(None)

    def _create(self, data: bytes | None) -> None:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = vkapi.Keep()
        if data:
            blob = keep.new("char[]", data)
            info = keep.struct("VkPipelineCacheCreateInfo", initialDataSize=len(data), pInitialData=blob)
        else:
            info = keep.struct("VkPipelineCacheCreateInfo", initialDataSize=0, pInitialData=ffi.NULL)
        out = ffi.new("VkPipelineCache*")
        vkapi.check(lib.vkCreatePipelineCache(dev.handle, info, ffi.NULL, out), "vkCreatePipelineCache")
        self.handle = out[0]

    @contextlib.contextmanager
    def creating(self) -> Iterator[Any]:
        """Hold the cache while a pipeline is created on it; yields the VkPipelineCache."""
        with self.lock:
            yield self.handle

    def record_creation(self, cache_hit: bool | None) -> None:
        self.creations += 1
        if cache_hit:
            self.hits += 1

    def save(self) -> bool:
        return False

    def close(self) -> None:
        dev = self.device
        if self.handle is not None and dev.handle is not None:
            with self.lock:
                dev.lib.vkDestroyPipelineCache(dev.handle, self.handle, dev.ffi.NULL)
                self.handle = None
