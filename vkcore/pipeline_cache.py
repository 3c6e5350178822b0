"""The device's VkPipelineCache, persisted on disk: keyed, validated, atomic, shared safely.

Every pipeline is created through this object (``creating()`` holds its lock, so a save
never runs during a creation).

On disk (layout in ``cache/README.md``): one file per device identity in
``<cache root>/pipeline/``, vkcore's own header (magic, format version, sizes, SHA-256 of
the payload and of the header, every key field) in front of the driver's blob.

Load checks, in order, before a single byte reaches ``vkCreatePipelineCache``: the file is
a regular file below the size cap, the header is complete and intact, the payload has the
announced size and hash, every key field equals this device's, and the driver's own
32-byte header inside the payload names this device. Anything else is a cold start with a
warning saying why. Save merges what another process wrote meanwhile (under a file lock),
then replaces the file atomically (temp file, fsync, ``os.replace``), and skips the write
when the bytes would not change. A folder that cannot be read or written never breaks a
kernel call: vkcore warns once and runs without persistence.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import cachefs, config, vkapi
from .errors import VulkanError

if TYPE_CHECKING:
    from .device import Device
    from .instance import DeviceInfo

log = logging.getLogger("vkcore")

FORMAT_VERSION = 1
MAGIC = b"VKCOREPC"
SUFFIX = ".vkpc"
LOCK_NAME = cachefs.LOCK_NAME
TEMP_PREFIX = cachefs.TEMP_PREFIX
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MAX_BYTES_ENV = "VKCORE_PIPELINE_CACHE_MAX_BYTES"

# vkcore's header: everything before the driver's blob (little-endian, see cache/README.md).
_NAME_FIELD = 256  # VK_MAX_DRIVER_NAME_SIZE and VK_MAX_DRIVER_INFO_SIZE
_FIXED = struct.Struct("<8sIIQ32sIIIIII16s16s256s256s")
_HEADER_HASH_SIZE = 32
HEADER_SIZE = _FIXED.size + _HEADER_HASH_SIZE

# The driver's own header (VkPipelineCacheHeaderVersionOne).
DRIVER_HEADER = struct.Struct("<IIII16s")
DRIVER_HEADER_VERSION_ONE = 1

_VK_INCOMPLETE = 5
_SAVE_ATTEMPTS = 4

_warned_folders: set[str] = set()
_warned_lock = threading.Lock()


class CacheFileError(cachefs.EntryError):
    """A pipeline-cache file is damaged or does not belong to the expected device."""


@dataclass(frozen=True)
class CacheKey:
    """Everything that decides whether a driver blob may be handed to a device.

    The first four fields are what a driver checks itself; the rest tell apart builds
    that share a pipelineCacheUUID (Mesa 22.3.x) and vkcore's own file format.
    """

    vendor_id: int
    device_id: int
    driver_version: int
    pipeline_cache_uuid: bytes
    driver_id: int
    driver_name: str
    driver_info: str
    device_uuid: bytes
    api_version: int
    pointer_size: int
    format_version: int = FORMAT_VERSION

    @classmethod
    def from_info(cls, info: DeviceInfo) -> CacheKey:
        return cls(
            vendor_id=info.vendor_id,
            device_id=info.device_id,
            driver_version=info.driver_version,
            pipeline_cache_uuid=bytes(info.pipeline_cache_uuid),
            driver_id=info.driver_id,
            driver_name=info.driver_name,
            driver_info=info.driver_info,
            device_uuid=bytes(info.device_uuid),
            api_version=info.api_version,
            pointer_size=struct.calcsize("P"),
        )

    def digest(self) -> str:
        """Short hash of every field, so two keys never share a file name."""
        h = hashlib.sha256()
        for f in dataclasses.fields(self):
            h.update(f"{f.name}={getattr(self, f.name)!r};".encode())
        return h.hexdigest()[:12]

    def file_name(self) -> str:
        """Readable name: vendor and device in hex, driverVersion, pipelineCacheUUID, digest."""
        return (
            f"{self.vendor_id:04x}-{self.device_id:04x}-{self.driver_version}-"
            f"{self.pipeline_cache_uuid.hex()}-{self.digest()}{SUFFIX}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pipeline_cache_uuid"] = self.pipeline_cache_uuid.hex()
        d["device_uuid"] = self.device_uuid.hex()
        d["vendor_id_hex"] = f"0x{self.vendor_id:04x}"
        d["device_id_hex"] = f"0x{self.device_id:04x}"
        return d

    def differences(self, other: CacheKey) -> list[str]:
        """Names of the fields where ``other`` differs, with both values."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(f"{f.name} (file {_show(theirs)}, device {_show(mine)})")
        return out


def _show(value: Any) -> str:
    return value.hex() if isinstance(value, bytes) else repr(value)


@dataclass(frozen=True)
class CacheFile:
    """A parsed, intact cache file: its key and the driver's blob."""

    key: CacheKey
    payload: bytes

    @property
    def driver_header_size(self) -> int:
        return (
            DRIVER_HEADER.unpack_from(self.payload)[0]
            if len(self.payload) >= DRIVER_HEADER.size
            else 0
        )

    @property
    def header_only(self) -> bool:
        """True when the driver stored nothing but its own header (no pipelines)."""
        return len(self.payload) <= max(self.driver_header_size, DRIVER_HEADER.size)


def _pad(text: str, what: str) -> bytes:
    raw = text.encode()
    if len(raw) >= _NAME_FIELD:
        raise ValueError(f"{what} must be shorter than {_NAME_FIELD} bytes, got {len(raw)}")
    return raw


def encode(key: CacheKey, payload: bytes) -> bytes:
    """The file bytes for ``payload`` (the driver's blob) under ``key``."""
    fixed = _FIXED.pack(
        MAGIC,
        key.format_version,
        HEADER_SIZE,
        len(payload),
        hashlib.sha256(payload).digest(),
        key.vendor_id,
        key.device_id,
        key.driver_version,
        key.api_version,
        key.driver_id,
        key.pointer_size,
        key.pipeline_cache_uuid,
        key.device_uuid,
        _pad(key.driver_name, "driver_name"),
        _pad(key.driver_info, "driver_info"),
    )
    return fixed + hashlib.sha256(fixed).digest() + payload


def decode(data: bytes) -> CacheFile:
    """Parse and check a file's bytes (sizes, magic, version, both hashes).

    Raises :class:`CacheFileError` saying what is wrong. Says nothing about which device
    the file is for; see :func:`check_for_device`.
    """
    if len(data) < HEADER_SIZE:
        raise CacheFileError(
            f"truncated header: {len(data)} bytes, the header alone is {HEADER_SIZE}"
        )
    fields = _FIXED.unpack_from(data)
    magic, version, header_size, payload_size, payload_hash = fields[:5]
    if magic != MAGIC:
        raise CacheFileError(f"not a vkcore pipeline cache (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise CacheFileError(f"format version {version}, this vkcore reads {FORMAT_VERSION}")
    if header_size != HEADER_SIZE:
        raise CacheFileError(f"header size field {header_size}, expected {HEADER_SIZE}")
    if hashlib.sha256(data[: _FIXED.size]).digest() != data[_FIXED.size : HEADER_SIZE]:
        raise CacheFileError("header checksum mismatch (damaged header)")
    actual = len(data) - HEADER_SIZE
    if payload_size != actual:
        raise CacheFileError(
            f"payload size field {payload_size}, file holds {actual} payload bytes"
        )
    payload = data[HEADER_SIZE:]
    if hashlib.sha256(payload).digest() != payload_hash:
        raise CacheFileError("payload checksum mismatch (damaged payload)")
    vendor, device, driver_version, api, driver_id, pointer, uuid, dev_uuid, name, info = fields[5:]
    try:
        key = CacheKey(
            vendor_id=vendor,
            device_id=device,
            driver_version=driver_version,
            pipeline_cache_uuid=uuid,
            driver_id=driver_id,
            driver_name=name.rstrip(b"\0").decode(),
            driver_info=info.rstrip(b"\0").decode(),
            device_uuid=dev_uuid,
            api_version=api,
            pointer_size=pointer,
            format_version=version,
        )
    except UnicodeDecodeError as exc:
        raise CacheFileError(f"driver name or info is not UTF-8 ({exc})") from None
    check_driver_header(payload, key)
    return CacheFile(key, payload)


def check_driver_header(payload: bytes, key: CacheKey) -> None:
    """The driver's own header at the start of ``payload`` must name the device of ``key``."""
    if len(payload) < DRIVER_HEADER.size:
        raise CacheFileError(
            f"driver header truncated: payload is {len(payload)} bytes, need {DRIVER_HEADER.size}"
        )
    size, version, vendor, device, uuid = DRIVER_HEADER.unpack_from(payload)
    problems = []
    if size < DRIVER_HEADER.size or size > len(payload):
        problems.append(f"headerSize {size} (payload {len(payload)} bytes)")
    if version != DRIVER_HEADER_VERSION_ONE:
        problems.append(f"headerVersion {version}")
    if vendor != key.vendor_id:
        problems.append(f"vendorID 0x{vendor:x} != 0x{key.vendor_id:x}")
    if device != key.device_id:
        problems.append(f"deviceID 0x{device:x} != 0x{key.device_id:x}")
    if uuid != key.pipeline_cache_uuid:
        problems.append(f"pipelineCacheUUID {uuid.hex()} != {key.pipeline_cache_uuid.hex()}")
    if problems:
        raise CacheFileError("driver header: " + ", ".join(problems))


def check_for_device(cache_file: CacheFile, key: CacheKey) -> None:
    """Raise :class:`CacheFileError` unless the file was written for exactly ``key``."""
    diffs = key.differences(cache_file.key)
    if diffs:
        raise CacheFileError("written for another device or driver: " + "; ".join(diffs))


def max_bytes() -> int:
    """The size cap for a cache file (``$VKCORE_PIPELINE_CACHE_MAX_BYTES``, default 256 MiB;
    an unusable value warns once and is the default)."""
    return config.env_int(MAX_BYTES_ENV, DEFAULT_MAX_BYTES, lo=1, hi=2**48)


def pipeline_dir(root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of pipeline-cache files: ``<root or cache root>/pipeline``."""
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(
            f"cache_dir must be a path (str or os.PathLike) or None, got {type(root).__name__}"
        )
    return (Path(root).expanduser() if root is not None else config.cache_dir()) / "pipeline"


def read_file(path: Path, cap: int) -> bytes:
    """The bytes of a cache file; ``CacheFileError`` if it is not a regular file, exceeds
    ``cap`` (refused unread), cannot be read or is not trusted (owner, folder mode: see
    :mod:`vkcore.cachefs`); ``FileNotFoundError`` if absent."""
    try:
        return cachefs.read_entry(path, cap, cap_name=MAX_BYTES_ENV)
    except (FileNotFoundError, cachefs.FolderUntrusted):
        raise
    except cachefs.EntryError as exc:
        raise CacheFileError(str(exc)) from None


folder_lock = cachefs.folder_lock
write_atomic = cachefs.write_atomic


def remove_stale_temp_files(folder: Path) -> int:
    """Remove temp files left by a save that died; call only while holding ``folder_lock``."""
    return cachefs.remove_stale_temps(folder)


def _warn_folder_once(folder: Path, exc: OSError) -> None:
    with _warned_lock:
        if str(folder) in _warned_folders:
            return
        _warned_folders.add(str(folder))
    log.warning(
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
        self, device: Device, *, persist: bool = True, directory: str | None = None
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
        keep = vkapi.Keep()
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
        vkapi.check(
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
            vkapi.check(
                lib.vkGetPipelineCacheData(dev.handle, self.handle, size, ffi.NULL),
                "vkGetPipelineCacheData",
            )
            if size[0] == 0:
                return b""
            buf = ffi.new("char[]", size[0])
            result = vkapi.check(
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
                with folder_lock(self.folder):
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
        remove_stale_temp_files(self.folder)
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
        write_atomic(self.path, blob)
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
            vkapi.check(
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


def is_temp_file(path: Path) -> bool:
    return path.name.startswith(TEMP_PREFIX)


def cache_files(folder: Path) -> list[Path]:
    """Cache files (and leftover temp files) in ``folder``, sorted by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))


__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "CacheFile",
    "CacheFileError",
    "CacheKey",
    "PipelineCache",
    "cache_files",
    "check_for_device",
    "decode",
    "encode",
    "folder_lock",
    "pipeline_dir",
    "read_file",
    "write_atomic",
]
