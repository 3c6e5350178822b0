"""GLSL to SPIR-V: the shader variants, their compiler, the on-disk entry format, the
content-addressed cache and reflection. No device here (docs/caches.md, docs/programs.md).

The lookup and the variant registry (:mod:`~vkcore.spirv.shaders`) are this package's
public names; the formats and the compiler are its modules.
"""

from vkcore.spirv.shaders import (
    Defines,
    Spirv,
    cache_key,
    clear_memory_cache,
    compile_glsl,
    compile_source,
    define_grid,
    get,
    register_variants,
    requested,
    shader_dir,
    shipped_dir,
    source_key,
    variants,
)

__all__ = [
    "Defines",
    "Spirv",
    "cache_key",
    "clear_memory_cache",
    "compile_glsl",
    "compile_source",
    "define_grid",
    "get",
    "register_variants",
    "requested",
    "shader_dir",
    "shipped_dir",
    "source_key",
    "variants",
]
