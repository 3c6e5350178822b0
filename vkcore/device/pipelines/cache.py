"""The device's VkPipelineCache, persisted on disk: validated, merged, written atomically.

Every pipeline is created through this object (``creating()`` holds its lock, so a save
never runs during a creation). The file's key and format are
:mod:`vkcore.device.pipelines.cache_file`.

Load checks, in order, before a single byte reaches ``vkCreatePipelineCache``: the file is
a regular file below the size cap, then :func:`~vkcore.device.pipelines.cache_file.decode` and
:func:`~vkcore.device.pipelines.cache_file.check_for_device`. Anything else is a cold start with a
warning saying why. Save merges what another process wrote meanwhile (under a file lock),
then replaces the file atomically (:func:`vkcore.base.cachefs.write_atomic`), and skips the
write when the bytes would not change. A folder that cannot be read or written never
breaks a kernel call: vkcore warns once and runs without persistence.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vkcore import _vk
from vkcore.base import cachefs
from vkcore.device.context import DeviceContext
from vkcore.device.pipelines.cache_file import (
    DRIVER_HEADER,
    HEADER_SIZE,
    MAX_BYTES_ENV,
    CacheFile,
    CacheFileError,
    CacheKey,
    check_driver_header,
    check_for_device,
    decode,
    encode,
    max_bytes,
    pipeline_dir,
    read_file,
)
from vkcore.errors import VulkanError, result_code

log = logging.getLogger("vkcore")

_VK_INCOMPLETE = result_code("VK_INCOMPLETE")
_SAVE_ATTEMPTS = 4


def _warn_folder_once(folder: Path, exc: OSError) -> None:
    cachefs.warn_once_per_folder(
        folder,
        "unwritable",
        "pipeline cache in %s cannot be written (%s: %s); running without persistence",
        folder,
        exc.strerror or type(exc).__name__,
        exc.filename or folder,
    )


class PipelineCache:
    """Owns the VkPipelineCache of one device and its file.

    Attributes for measurement: ``path`` (the file, None when disabled), ``load_status``
    (``"loaded"``, ``"missing"``, ``"rejected: <why>"`` or ``"disabled"``),
    ``loaded_bytes`` (payload bytes handed to vkCreatePipelineCache, 0 on a cold start),
    ``loaded_header_only`` (the loaded blob held no pipelines), ``hits``/``creations``
    (from creation feedback), ``saved_header_only`` (the last blob the driver returned
    held no pipelines).
    """

    def __init__(
        self, device: DeviceContext, *, persist: bool = True, directory: str | None = None
    ) -> None:
        self.device = device
        self.persist = persist
        self.lock = threading.Lock()
        self.hits = 0
        self.creations = 0
        self.feedback_creations = 0
        self.handle: Any = None
        self.key = CacheKey.from_info(device.info)
        self.folder: Path | None = pipeline_dir(directory) if persist else None
        self.path: Path | None = (
            self.folder / self.key.file_name() if self.folder is not None else None
        )
        self.max_bytes = max_bytes()
        self.load_status = "disabled"
        self.loaded_bytes = 0
        self.loaded_header_only = False
        self.saved_header_only: bool | None = None
        self._written: bytes | None = None  # file bytes this object last read or wrote
        self._unwritable = False
        self._warned = False  # a load warning was given: a failing save then only logs
        self._create(self._load_payload())

    # ------------------------------------------------------------------ load
    def _load_payload(self) -> bytes | None:
        """The validated driver blob from disk, or None (a cold start) with the reason set."""
        if self.path is None:
            return None
        try:
            data = read_file(self.path, self.max_bytes)
        except FileNotFoundError:
            self.load_status = "missing"
            log.debug("no pipeline cache at %s: cold start", self.path)
            return None
        except cachefs.EntryError as exc:
            self._reject(exc)
            return None
        try:
            parsed = decode(data)
            check_for_device(parsed, self.key)
        except CacheFileError as exc:
            self._reject(exc)
            return None
        self._written = data
        self.loaded_header_only = parsed.header_only
        return parsed.payload

    def _reject(self, exc: cachefs.EntryError) -> None:
        self.load_status = f"rejected: {exc}"
        self._warned = True
        cachefs.report(exc, "pipeline cache %s ignored, cold start: %s", self.path, exc)

    def _create(self, data: bytes | None) -> None:
        """Create the VkPipelineCache from ``data`` (validated) or empty; never fails on data."""
        if data:
            try:
                self.handle = self._new_cache(data)
            except VulkanError as exc:
                self._reject(
                    CacheFileError(f"the driver refused data that passed every check ({exc})")
                )
                self.loaded_header_only = False
            else:
                self.load_status = "loaded"
                self.loaded_bytes = len(data)
                return
        self.handle = self._new_cache(None)

    def _new_cache(self, data: bytes | None) -> Any:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        keep = _vk.Keep()
        if data:
            blob = keep.new("char[]", data)
            info = keep.struct(
                "VkPipelineCacheCreateInfo", initialDataSize=len(data), pInitialData=blob
            )
        else:  # never a non-NULL pointer with size 0
            info = keep.struct(
                "VkPipelineCacheCreateInfo", initialDataSize=0, pInitialData=ffi.NULL
            )
        out = ffi.new("VkPipelineCache*")
        _vk.check(
            lib.vkCreatePipelineCache(dev.handle, info, ffi.NULL, out), "vkCreatePipelineCache"
        )
        return out[0]

    # ------------------------------------------------------------------ creation
    @contextlib.contextmanager
    def creating(self) -> Iterator[Any]:
        """Hold the cache while a pipeline is created on it; yields the VkPipelineCache."""
        with self.lock:
            yield self.handle

    def record_creation(self, cache_hit: bool | None) -> None:
        """Count one pipeline creation; ``cache_hit`` is None without creation feedback."""
        self.creations += 1
        if cache_hit is not None:
            self.feedback_creations += 1
        if cache_hit:
            self.hits += 1

    def stats(self) -> dict[str, Any]:
        """What the cold/warm measurement needs, JSON-ready."""
        return {
            "path": str(self.path) if self.path is not None else None,
            "load_status": self.load_status,
            "loaded_bytes": self.loaded_bytes,
            "loaded_header_only": self.loaded_header_only,
            "saved_header_only": self.saved_header_only,
            "creations": self.creations,
            "feedback_creations": self.feedback_creations,
            "hits": self.hits,
        }

    # ------------------------------------------------------------------ save
    def data(self) -> bytes:
        """The driver's current blob (vkGetPipelineCacheData, two calls, VK_INCOMPLETE retried)."""
        with self.lock:
            return self._driver_data()

    def _driver_data(self) -> bytes:
        dev = self.device
        ffi, lib = dev.ffi, dev.lib
        size = ffi.new("size_t*")
        for _ in range(_SAVE_ATTEMPTS):
            _vk.check(
                lib.vkGetPipelineCacheData(dev.handle, self.handle, size, ffi.NULL),
                "vkGetPipelineCacheData",
            )
            if size[0] == 0:
                return b""
            buf = ffi.new("char[]", size[0])
            result = _vk.check(
                lib.vkGetPipelineCacheData(dev.handle, self.handle, size, buf),
                "vkGetPipelineCacheData",
            )
            if result != _VK_INCOMPLETE:
                return bytes(ffi.buffer(buf, size[0]))
        raise VulkanError(
            "vkGetPipelineCacheData", _VK_INCOMPLETE, "the cache kept growing while being read"
        )

    def save(self, *, force: bool = False) -> bool:
        """Merge what is on disk into the live cache and write the file; True if written.

        Runs under the creation lock (no pipeline is being created meanwhile) and the
        folder's file lock (no other process is saving). An unchanged file is not
        rewritten unless ``force``. Folder errors are warned about once, never raised.
        """
        if self.path is None or self.folder is None or self.handle is None or self._unwritable:
            return False
        with self.lock:
            try:
                cachefs.make_private_dir(self.folder)
                with cachefs.folder_lock(self.folder):
                    return self._save_locked(force)
            except OSError as exc:
                self._unwritable = True
                if self._warned:  # e.g. a folder in place of the file: already warned
                    log.info("pipeline cache %s not saved: %s", self.path, exc)
                else:
                    _warn_folder_once(self.folder, exc)
                return False

    def _save_locked(self, force: bool) -> bool:
        assert self.path is not None and self.folder is not None
        cachefs.remove_stale_temps(self.folder)
        on_disk = self._read_for_merge()
        if on_disk is not None and on_disk != self._written:
            self._merge(decode(on_disk).payload)
        payload = self._driver_data()
        if len(payload) < DRIVER_HEADER.size:
            log.debug(
                "the driver returned %d bytes of pipeline-cache data; nothing to save", len(payload)
            )
            return False
        if len(payload) + HEADER_SIZE > self.max_bytes:
            (log.info if self._warned else log.warning)(  # the load warned already: once
                "pipeline cache not saved: %d bytes is above the cap of %d (%s)",
                len(payload) + HEADER_SIZE,
                self.max_bytes,
                MAX_BYTES_ENV,
            )
            return False
        try:
            check_driver_header(payload, self.key)
        except CacheFileError as exc:
            log.warning("pipeline cache not saved: the driver returned unexpected data: %s", exc)
            return False
        blob = encode(self.key, payload)
        self.saved_header_only = CacheFile(self.key, payload).header_only
        if blob == on_disk and not force:
            self._written = blob
            return False
        cachefs.write_atomic(self.path, blob)
        self._written = blob
        return True

    def _read_for_merge(self) -> bytes | None:
        """The current file's bytes if it is valid for this device, else None."""
        assert self.path is not None
        try:
            data = read_file(self.path, self.max_bytes)
            check_for_device(decode(data), self.key)
        except FileNotFoundError:
            return None
        except cachefs.EntryError as exc:
            log.info("pipeline cache %s will be replaced: %s", self.path, exc)
            return None
        return data

    def _merge(self, payload: bytes) -> None:
        """Merge another process's blob into the live cache; skipped if the driver refuses it."""
        dev = self.device
        try:
            other = self._new_cache(payload)
        except VulkanError as exc:
            log.info("pipeline cache on disk not merged: %s", exc)
            return
        try:
            sources = dev.ffi.new("VkPipelineCache[]", [other])
            _vk.check(
                dev.lib.vkMergePipelineCaches(dev.handle, self.handle, 1, sources),
                "vkMergePipelineCaches",
            )
        except VulkanError as exc:
            log.info("pipeline cache on disk not merged: %s", exc)
        finally:
            dev.lib.vkDestroyPipelineCache(dev.handle, other, dev.ffi.NULL)

    # ------------------------------------------------------------------ lifetime
    def _warn_if_ignored(self) -> None:
        """Warn when a loaded blob held pipelines but no creation hit: the driver dropped it."""
        if (
            self.loaded_bytes
            and not self.loaded_header_only
            and self.feedback_creations
            and not self.hits
        ):
            log.warning(
                "pipeline cache %s: %d bytes were loaded but none of %d pipeline creations "
                "hit them; the driver may have ignored the data",
                self.path,
                self.loaded_bytes,
                self.feedback_creations,
            )

    def close(self) -> None:
        """Save (when persistent), then destroy the VkPipelineCache."""
        dev = self.device
        if self.handle is None or dev.handle is None:
            return
        try:
            self._warn_if_ignored()
            self.save()
        finally:
            with self.lock:
                dev.lib.vkDestroyPipelineCache(dev.handle, self.handle, dev.ffi.NULL)
                self.handle = None
