import shutil

import pytest

from vkcore import spirv


def test_cached_spirv_is_used_without_the_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    spirv.clear_memory_cache()
    first = spirv.get("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1})
    assert first.origin in ("compiled", "shipped")
    if first.origin == "compiled":
        assert list((tmp_path / "spirv").glob("*.spv"))
    spirv.clear_memory_cache()
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no compiler on PATH now
    second = spirv.get("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1})
    assert second.origin in ("cache", "shipped")
    assert second.code == first.code
    spirv.clear_memory_cache()


def test_key_covers_defines_and_source():
    a = spirv.source_key("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1})
    b = spirv.source_key("softmax_online.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 0})
    c = spirv.source_key("softmax_safe.comp", {"STAGE": 0, "TEXEL": 1, "VEC4": 1})
    assert len({a, b, c}) == 3


def test_damaged_cache_file_is_recompiled(monkeypatch, tmp_path):
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    monkeypatch.setenv("VKCORE_CACHE_DIR", str(tmp_path))
    spirv.clear_memory_cache()
    first = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0})
    if first.origin == "shipped":
        pytest.skip("shipped SPIR-V takes precedence")
    for f in (tmp_path / "spirv").glob("*.spv"):
        f.write_bytes(b"garbage")
    spirv.clear_memory_cache()
    again = spirv.get("softmax_safe.comp", {"STAGE": 1, "TEXEL": 0, "VEC4": 0})
    assert again.origin == "compiled" and again.code == first.code
    spirv.clear_memory_cache()


def test_compile_error_is_reported(tmp_path, monkeypatch):
    if shutil.which("glslangValidator") is None:
        pytest.skip("needs the compiler")
    (tmp_path / "broken.comp").write_text("#version 450\nvoid main() { undefined_thing(); }\n")
    monkeypatch.setenv("VKCORE_SHADER_DIR", str(tmp_path))
    monkeypatch.setenv("VKCORE_SPIRV_CACHE", "0")
    with pytest.raises(RuntimeError, match="glslangValidator failed"):
        spirv.get("broken.comp", {})
