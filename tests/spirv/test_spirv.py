import logging
import shutil
import struct

import pytest

import vkcore
from vkcore import spirv
from vkcore.base import cachefs
from vkcore.spirv import entries, shaders


def test_cached_spirv_is_used_without_the_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    spirv.clear_memory_cache()
    first = spirv.get("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0})
    assert first.origin in ("compiled", "shipped")
    if first.origin == "compiled":
        assert list((tmp_path / "spirv").glob("*.spv"))
    spirv.clear_memory_cache()
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no compiler on PATH now
    second = spirv.get("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0})
    assert second.origin in ("cache", "shipped")
    assert second.code == first.code
    spirv.clear_memory_cache()


def test_key_covers_defines_and_source():
    a = spirv.source_key("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0})
    b = spirv.source_key("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 0, "LOG": 0})
    c = spirv.source_key("softmax_safe.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0})
    assert len({a, b, c}) == 3


def test_damaged_cache_file_is_recompiled(monkeypatch, tmp_path):
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    spirv.clear_memory_cache()
    first = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0})
    if first.origin == "shipped":
        pytest.skip("shipped SPIR-V takes precedence")
    for f in (tmp_path / "spirv").glob("*.spv"):
        f.write_bytes(b"garbage")
    spirv.clear_memory_cache()
    again = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0})
    assert again.origin == "compiled" and again.code == first.code
    spirv.clear_memory_cache()


def test_compile_error_is_reported(tmp_path, monkeypatch):
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    (tmp_path / "broken.comp").write_text("#version 450\nvoid main() { undefined_thing(); }\n")
    monkeypatch.setenv("VKCORE_SHADER_DIR", str(tmp_path))
    monkeypatch.setenv("VKCORE_SPIRV_CACHE", "0")
    with pytest.raises(vkcore.ShaderCompileError, match="broken.comp") as info:
        spirv.get("broken.comp", {})
    assert any("broken.comp:2:" in m and "undefined_thing" in m for m in info.value.messages)


# ---------------------------------------------------------------------------- entries
DEFINES = {"STAGE": 0, "TEXEL": 1, "VEC4": 1, "LOG": 0}


@pytest.fixture(scope="module")
def code():
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    return spirv.compile_glsl("softmax_online.comp", DEFINES)


KEY = "0123456789abcdef0123456789abcdef"


def test_entry_round_trip_and_every_damage_is_detected(code):
    entry = entries.encode_entry(KEY, code)
    assert entries.decode_entry(entry, KEY) == code
    for at in range(0, len(entry), max(1, len(entry) // 300)):  # flipped bytes everywhere
        damaged = entry[:at] + bytes([entry[at] ^ 0x01]) + entry[at + 1 :]
        with pytest.raises(cachefs.EntryError):
            entries.decode_entry(damaged, KEY)
    for size in range(0, len(entry), max(1, len(entry) // 100)):  # every truncation
        with pytest.raises(cachefs.EntryError):
            entries.decode_entry(entry[:size], KEY)
    with pytest.raises(cachefs.EntryError, match="key"):
        entries.decode_entry(entry, KEY[::-1])
    with pytest.raises(cachefs.EntryError, match="magic"):
        entries.decode_entry(code, KEY)  # bare SPIR-V (the old cache format) is not an entry


def _word(code: bytes, index: int, value: int) -> bytes:
    return code[: 4 * index] + struct.pack("<I", value) + code[4 * index + 4 :]


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda c: _word(c, 0, 0x03022307), "magic"),
        (lambda c: _word(c, 1, 0x00020000), "version"),
        (lambda c: _word(c, 1, 0x00010700), "version"),
        (lambda c: _word(c, 3, 0), "bound"),
        (lambda c: _word(c, 3, 1 << 23), "bound"),
        (lambda c: _word(c, 4, 1), "schema"),
        (lambda c: _word(c, 5, 0), "runs past"),  # an instruction of zero words
        (lambda c: _word(c, 5, 0xFFFF0011), "runs past"),
        (lambda c: c[:-4], "OpFunctionEnd"),
        (lambda c: c[:18], "whole words"),
        (lambda c: c[: 5 * 4], "memory model"),
        (lambda c: _word(c, 5, (2 << 16) | 14), "OpCapability"),
    ],
)
def test_structural_checks(code, change, reason):
    entries.check_spirv(code)
    with pytest.raises(cachefs.EntryError, match=reason):
        entries.check_spirv(change(code))


def test_every_registered_variant_passes_the_structural_check():
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    for name, defines in spirv.variants()[::7]:  # a spread of them: compiling all is slow
        entries.check_spirv(spirv.get(name, defines).code)


def test_cache_entry_is_checked_before_use(monkeypatch, tmp_path, caplog):
    """A constant changed inside a cached entry (its digest now wrong) is never used."""
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shaders, "_shipped", lambda skey: None)
    spirv.clear_memory_cache()
    first = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0})
    (path,) = (tmp_path / "spirv").glob("*.spv")
    data = bytearray(path.read_bytes())
    data[-8] ^= 0x40  # inside the last instructions, still valid structure
    path.write_bytes(bytes(data))
    spirv.clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        again = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0})
    assert again.origin == "compiled" and again.code == first.code
    assert caplog.text.count("WARNING") == 1 and "SHA-256 mismatch" in caplog.text
    spirv.clear_memory_cache()
    assert (
        spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0, "LOG": 0}).origin
        == "cache"
    )
    spirv.clear_memory_cache()
