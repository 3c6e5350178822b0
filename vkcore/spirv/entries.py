"""SPIR-V cache entries: the 80-byte header in front of the words (magic ``VKCORESV``,
format, code size, the key, SHA-256 of key and code), their checks, and the structural
check of a SPIR-V module (see :mod:`vkcore.spirv` for where entries live)."""

from __future__ import annotations

import struct
from pathlib import Path

from vkcore.base import cachefs

ENTRY_MAGIC = b"VKCORESV"
ENTRY_FORMAT = 1
# magic, format, code bytes, key (32 ASCII hex digits), SHA-256 of key + code
_ENTRY = struct.Struct("<8sII32s32s")
MAX_ENTRY_BYTES = 16 * 1024 * 1024
_SPIRV_MAGIC = 0x07230203
_SPIRV_MAX_BOUND = 1 << 22  # the Vulkan minimum for the id bound limit is 4,194,303
_OP_MEMORY_MODEL, _OP_ENTRY_POINT, _OP_CAPABILITY, _OP_FUNCTION_END = 14, 15, 17, 56
_GL_COMPUTE = 5


def encode_entry(key: str, code: bytes) -> bytes:
    """An entry's bytes: the header (with the digest of key and code), then ``code``."""
    raw_key = key.encode("ascii")
    if len(raw_key) != 32:
        raise ValueError(f"key must be 32 hex digits, got {key!r}")
    return _ENTRY.pack(ENTRY_MAGIC, ENTRY_FORMAT, len(code), raw_key, _digest(raw_key, code)) + code


def _digest(raw_key: bytes, code: bytes) -> bytes:
    return cachefs.sha256(ENTRY_MAGIC, raw_key, code)


def decode_entry(data: bytes, key: str) -> bytes:
    """The SPIR-V words of an entry stored under ``key``; :class:`cachefs.EntryError`
    saying what is wrong (header, key, digest or SPIR-V structure)."""
    if len(data) < _ENTRY.size:
        raise cachefs.EntryError(f"truncated: {len(data)} bytes, the header alone is {_ENTRY.size}")
    magic, version, size, raw_key, digest = _ENTRY.unpack_from(data)
    if magic != ENTRY_MAGIC:
        raise cachefs.EntryError(f"not a vkcore SPIR-V entry (magic {magic[:8]!r})")
    if version != ENTRY_FORMAT:
        raise cachefs.EntryError(f"entry format {version}, this vkcore reads {ENTRY_FORMAT}")
    code = data[_ENTRY.size :]
    if size != len(code):
        raise cachefs.EntryError(f"code size field {size}, the entry holds {len(code)} bytes")
    if raw_key != key.encode("ascii"):
        raise cachefs.EntryError(f"written under key {raw_key[:32]!r}, looked up as {key}")
    if _digest(raw_key, code) != digest:
        raise cachefs.EntryError("SHA-256 mismatch (damaged entry)")
    check_spirv(code)
    return code


def read_entry(path: Path, key: str, *, trust: bool = True) -> bytes:
    """Read and check the entry at ``path`` for ``key`` (see the module docstring)."""
    return decode_entry(cachefs.read_entry(path, MAX_ENTRY_BYTES, trust=trust), key)


def check_spirv(code: bytes) -> None:
    """Structural checks of a SPIR-V module (cheap: one walk over the instructions)."""
    if len(code) < 20 or len(code) % 4:
        raise cachefs.EntryError(f"SPIR-V of {len(code)} bytes: not whole words or no header")
    words = struct.unpack(f"<{len(code) // 4}I", code)
    magic, version, _generator, bound, schema = words[:5]
    if magic != _SPIRV_MAGIC:
        raise cachefs.EntryError(f"SPIR-V magic 0x{magic:08x}")
    if version & 0xFF0000FF or (version >> 16) & 0xFF != 1 or (version >> 8) & 0xFF > 6:
        raise cachefs.EntryError(f"SPIR-V version word 0x{version:08x}")
    if not 0 < bound <= _SPIRV_MAX_BOUND or schema != 0:
        raise cachefs.EntryError(f"SPIR-V id bound {bound} or schema {schema}")
    at, seen, compute, op = 5, set(), False, 0
    while at < len(words):
        count, op = words[at] >> 16, words[at] & 0xFFFF
        if count == 0 or at + count > len(words):
            raise cachefs.EntryError(f"SPIR-V instruction at word {at} runs past the end")
        if at == 5 and op != _OP_CAPABILITY:
            raise cachefs.EntryError("SPIR-V does not start with OpCapability")
        if op == _OP_ENTRY_POINT and count > 1 and words[at + 1] == _GL_COMPUTE:
            compute = True
        seen.add(op)
        at += count
    if _OP_MEMORY_MODEL not in seen or not compute:
        raise cachefs.EntryError("SPIR-V has no memory model or no GLCompute entry point")
    if op != _OP_FUNCTION_END:
        raise cachefs.EntryError("SPIR-V does not end with OpFunctionEnd (cut short)")


def entry_files(folder: Path) -> list[Path]:
    """Entries (and leftover temp files) in a SPIR-V cache folder, sorted by name."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(".spv"))


def entry_state(path: Path) -> str:
    """``"intact"`` or why the cache entry at ``path`` would be refused (for the CLI)."""
    if cachefs.is_temp(path):
        return "leftover temp file (an interrupted write)"
    try:
        read_entry(path, path.name[: -len(".spv")])
    except cachefs.EntryError as exc:
        return f"damaged: {exc}"
    except (FileNotFoundError, UnicodeEncodeError) as exc:
        return f"damaged: {exc}"
    return "intact"
