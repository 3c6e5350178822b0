"""``.npy`` and ``.npz`` files read without trusting them: the zip's central directory and
each array's ``.npy`` header are checked before any array data is read, so a file costs
no more memory than its caller accepted from the headers.

For an ``.npz`` (:class:`Npz`): member names unique (``x`` and ``x.npy`` are the same
array), no encryption, stored or deflated members only (what numpy writes), every
member's bytes inside the file and no two members sharing bytes (a stored member then
cannot claim more than the file holds), and each member's declared size exactly its
``.npy`` header plus the data that header declares (zipfile stops a deflated member at
its declared size, so decompression cannot outgrow it). For every array: ``.npy``
format 1.0 or 2.0, a header of at most :data:`HEADER_MAX` bytes, no object dtype (never
unpickled), non-negative dimensions. Data is read in chunks into the array itself.

Failures to read (not a zip, a damaged entry, a bad CRC, a bad header) raise
:class:`Unreadable`; the caller checks names, dtypes and shapes against what it expects
before calling :meth:`Npz.read`.
"""

from __future__ import annotations

import io
import math
import os
import struct
import zipfile
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

MAGIC = b"\x93NUMPY"
HEADER_MAX = 1 << 16  # bytes of one .npy header at most (numpy writes under 1 KiB)
_CHUNK = 1 << 20  # bytes read at a time


class Unreadable(ValueError):
    """The file is not a readable .npy/.npz (its message says why)."""


@dataclass(frozen=True)
class Header:
    """An array's ``.npy`` header: what it declares, and where its data starts."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    offset: int  # bytes from the start of the .npy to the first data byte

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        return f"{self.dtype} of shape {self.shape}"


def _exactly(fh: IO[bytes], n: int, what: str) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise Unreadable(f"{what} ends after {len(data)} of {n} bytes (truncated)")
    return data


def read_header(fh: IO[bytes], limit: int | None = None) -> Header:
    """The ``.npy`` header at ``fh``'s position; reads the header only (at most ``limit``
    bytes of it, default :data:`HEADER_MAX`)."""
    limit = HEADER_MAX if limit is None else min(limit, HEADER_MAX)
    magic = _exactly(fh, 8, "the .npy header")
    if magic[:6] != MAGIC:
        raise Unreadable("not a .npy array (no NUMPY magic)")
    version = (magic[6], magic[7])
    if version == (1, 0):
        size_field = _exactly(fh, 2, "the .npy header")
        (length,) = struct.unpack("<H", size_field)
    elif version == (2, 0):
        size_field = _exactly(fh, 4, "the .npy header")
        (length,) = struct.unpack("<I", size_field)
    else:
        raise Unreadable(f".npy format version {version[0]}.{version[1]} (1.0 and 2.0 read)")
    offset = 8 + len(size_field) + length
    if offset > limit:
        raise Unreadable(f"a .npy header of {offset} bytes (at most {limit})")
    raw = io.BytesIO(size_field + _exactly(fh, length, "the .npy header"))
    try:
        parse = np.lib.format.read_array_header_1_0
        if version == (2, 0):
            parse = np.lib.format.read_array_header_2_0
        shape, fortran, dtype = parse(raw, max_header_size=HEADER_MAX)
    except Exception as exc:  # numpy's own header checks: a bad header is unreadable
        raise Unreadable(f"a bad .npy header: {type(exc).__name__}: {exc}") from None
    if dtype.hasobject:
        raise Unreadable(f"an object array ({dtype}): never unpickled")
    if any(d < 0 for d in shape):
        raise Unreadable(f"a .npy header with a negative dimension: {shape}")
    return Header(dtype, tuple(int(d) for d in shape), bool(fortran), offset)


def read_data(fh: IO[bytes], header: Header) -> np.ndarray:
    """The array ``header`` declares, from ``fh`` positioned at its first data byte."""
    out = np.empty(math.prod(header.shape), header.dtype)
    raw = out.view(np.uint8) if header.nbytes else out  # (an itemsize of 0 has no view)
    done = 0
    while done < header.nbytes:
        chunk = fh.read(min(_CHUNK, header.nbytes - done))
        if not chunk:
            raise Unreadable(f"the array data ends after {done} of {header.nbytes} bytes")
        raw[done : done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)
    if header.fortran_order:
        return out.reshape(header.shape[::-1]).transpose()
    return out.reshape(header.shape)


def is_npy(fh: IO[bytes]) -> bool:
    """Whether the file at ``fh`` starts as a ``.npy`` (``fh`` is left at its start)."""
    start = fh.tell()
    head = fh.read(len(MAGIC))
    fh.seek(start)
    return head == MAGIC


def file_size(fh: IO[bytes]) -> int:
    try:
        return os.fstat(fh.fileno()).st_size
    except (AttributeError, OSError, io.UnsupportedOperation):
        here = fh.tell()
        end = fh.seek(0, io.SEEK_END)
        fh.seek(here)
        return end


class Npz:
    """The members of an open ``.npz``, checked from its central directory (module
    docstring); nothing of the members is read until :meth:`header` / :meth:`read`."""

    def __init__(self, fh: IO[bytes]) -> None:
        size = file_size(fh)
        try:
            self._zip = zipfile.ZipFile(fh)
            infos = self._zip.infolist()
        except Exception as exc:  # zipfile's own errors: not a readable zip
            raise Unreadable(f"{type(exc).__name__}: {exc}") from None
        self.members: dict[str, zipfile.ZipInfo] = {}
        spans = []
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if name in self.members:
                raise Unreadable(f"it holds the array {name!r} twice")
            if info.flag_bits & 0x1:
                raise Unreadable(f"member {info.filename!r} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                raise Unreadable(
                    f"member {info.filename!r} uses compression method {info.compress_type} "
                    "(stored and deflated members are read)"
                )
            if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
                raise Unreadable(
                    f"member {info.filename!r} is stored with {info.compress_size} bytes but "
                    f"declares {info.file_size}"
                )
            # The local header (30 bytes and the name, at least) precedes the data.
            end = info.header_offset + 30 + len(info.orig_filename.encode()) + info.compress_size
            if info.header_offset < 0 or end > size:
                raise Unreadable(
                    f"member {info.filename!r} declares {info.compress_size} bytes at offset "
                    f"{info.header_offset}, past the end of the {size}-byte file (truncated?)"
                )
            spans.append((info.header_offset, end, info.filename))
            self.members[name] = info
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:], strict=False):
            if start < end:
                raise Unreadable(f"members {first!r} and {second!r} share bytes")

    @property
    def names(self) -> list[str]:
        """The array names (``.npy`` removed), in the order of the central directory."""
        return list(self.members)

    def _open(self, name: str) -> IO[bytes]:
        try:
            return self._zip.open(self.members[name])
        except Exception as exc:
            raise Unreadable(f"member {name!r}: {type(exc).__name__}: {exc}") from None

    def declared_size(self, name: str) -> int:
        """The uncompressed bytes the zip entry of ``name`` declares (header + data)."""
        return self.members[name].file_size

    def header(self, name: str) -> Header:
        """The ``.npy`` header of ``name`` (only the header is read); a header whose data
        does not fill the member's declared size exactly is :class:`Unreadable`."""
        declared = self.declared_size(name)
        with self._open(name) as fh:
            try:
                header = read_header(fh, declared)
            except Unreadable as exc:
                raise Unreadable(f"member {name!r}: {exc}") from None
            except Exception as exc:
                raise Unreadable(f"member {name!r}: {type(exc).__name__}: {exc}") from None
        if header.offset + header.nbytes != declared:
            raise Unreadable(
                f"member {name!r} declares {declared} bytes, its .npy header "
                f"{header.offset + header.nbytes} ({header.describe()})"
            )
        return header

    def read(self, name: str, header: Header) -> np.ndarray:
        """The array of ``name`` whose header :meth:`header` returned (the caller has
        accepted its dtype, shape and size); the zip's CRC is checked at its end."""
        with self._open(name) as fh:
            try:
                fh.read(header.offset)
                array = read_data(fh, header)
                if fh.read(1):
                    raise Unreadable("more data than its header declares")
            except Unreadable as exc:
                raise Unreadable(f"member {name!r}: {exc}") from None
            except Exception as exc:  # a bad CRC, a damaged deflate stream
                raise Unreadable(f"member {name!r}: {type(exc).__name__}: {exc}") from None
        return array

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> Npz:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
