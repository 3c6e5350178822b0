"""The pipeline-cache file: its key (which device and driver a blob belongs to), its
format, and where the files live. No Vulkan here: :mod:`vkcore.device.pipelines.cache` holds the
live cache that reads and writes these files.

On disk (layout in docs/caches.md): one file per device identity in
``<cache root>/pipeline/``, vkcore's own header (magic, format version, sizes, SHA-256 of
the payload and of the header, every key field) in front of the driver's blob.
:func:`decode` and :func:`check_for_device` are the load checks, in order: the header is
complete and intact, the payload has the announced size and hash, every key field equals
the device's, and the driver's own 32-byte header inside the payload names the device.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vkcore.base import cachefs, config

if TYPE_CHECKING:
    from vkcore.device.info import DeviceInfo

FORMAT_VERSION = 1
MAGIC = b"VKCOREPC"
SUFFIX = ".vkpc"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MAX_BYTES_ENV = "VKCORE_PIPELINE_CACHE_MAX_BYTES"

# vkcore's header: everything before the driver's blob (little-endian, see docs/caches.md).
_NAME_FIELD = 256  # VK_MAX_DRIVER_NAME_SIZE and VK_MAX_DRIVER_INFO_SIZE
_FIXED = struct.Struct("<8sIIQ32sIIIIII16s16s256s256s")
_HEADER_HASH_SIZE = 32
HEADER_SIZE = _FIXED.size + _HEADER_HASH_SIZE

# The driver's own header (VkPipelineCacheHeaderVersionOne).
DRIVER_HEADER = struct.Struct("<IIII16s")
DRIVER_HEADER_VERSION_ONE = 1


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
    :mod:`vkcore.base.cachefs`); ``FileNotFoundError`` if absent."""
    try:
        return cachefs.read_entry(path, cap, cap_name=MAX_BYTES_ENV)
    except (FileNotFoundError, cachefs.FolderUntrusted):
        raise
    except cachefs.EntryError as exc:
        raise CacheFileError(str(exc)) from None


# A temp file left by a write that died (the folder's files are written by cachefs).
is_temp_file = cachefs.is_temp


def cache_files(folder: Path) -> list[Path]:
    """Cache files (and leftover temp files) in ``folder``, sorted by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))
