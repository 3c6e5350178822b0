"""Environment variables read by vkcore, in one place.

==========================  ==============================================================
``VKCORE_DEVICE``           device index or a substring of its name (default: best device)
``VKCORE_VALIDATION``       ``1`` enables the Khronos validation layer and raises on errors
``VKCORE_CACHE_DIR``        cache root (default ``$XDG_CACHE_HOME/vkcore``, ``~/.cache/vkcore``)
``VKCORE_PIPELINE_CACHE``   ``0`` disables the persisted VkPipelineCache
``VKCORE_SPIRV_CACHE``      ``0`` disables the on-disk SPIR-V cache
``VKCORE_FORCE_STAGING``    ``1`` uses device-local memory plus a staging buffer even where
                            host-visible device memory exists (tests the discrete-GPU path)
``VKCORE_TEXEL``            ``0`` reads kernel inputs through storage buffers instead of
                            uniform texel buffers (the faster path on lavapipe)
``VKCORE_DEVICE_SCALES``    ``0`` computes symmetric per-channel quantization scales on the
                            host, as the other modes do (same values, one more pass)
==========================  ==============================================================

``VKCORE_PIPELINE_CACHE_MAX_BYTES`` caps the size of a pipeline-cache file that is read
or written (default 256 MiB); ``vkcore.pipeline_cache.max_bytes`` reads it.
"""

from __future__ import annotations

import os
from pathlib import Path


def env_flag(name: str, default: bool = False) -> bool:
    """True when the variable is set to something other than 0/false/no/off/empty."""
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def cache_dir() -> Path:
    """Root of vkcore's on-disk caches, following the Mesa/pip/Triton convention."""
    explicit = os.environ.get("VKCORE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "vkcore"


def validation_requested() -> bool:
    return env_flag("VKCORE_VALIDATION")


def device_selector() -> str | None:
    value = os.environ.get("VKCORE_DEVICE")
    return value.strip() if value and value.strip() else None
