"""The settings of a deterministic CI run on lavapipe (``vkcore ci-env``, the pytest
plugin's ``--vk-lavapipe``). No pytest here: the command line imports it."""

from __future__ import annotations

import glob
import os
import tempfile

# Where Debian, Fedora and Arch install lavapipe's ICD manifest.
LAVAPIPE_ICD_GLOBS = ("/usr/share/vulkan/icd.d/lvp_icd*.json", "/etc/vulkan/icd.d/lvp_icd*.json")


def lavapipe_icd() -> str | None:
    """The path of lavapipe's ICD manifest, or None where it is not installed."""
    for pattern in LAVAPIPE_ICD_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def lavapipe_settings(threads: int | None = None) -> dict[str, str]:
    """Environment for a deterministic CI run on lavapipe.

    * ``VK_DRIVER_FILES`` and ``VK_ICD_FILENAMES`` (older loaders) name lavapipe's
      manifest only, so a runner that also has a GPU driver still runs on lavapipe;
    * ``MESA_SHADER_CACHE_DIR``: a fresh folder, so no run reuses another's compiled
      shaders (cold pipeline creation every time, as on a new runner);
    * ``LP_NUM_THREADS``: lavapipe's rasterizer/compute threads, fixed (default: the
      runner's CPU count), so timings and thread interleavings do not depend on it;
    * ``VKCORE_VALIDATION=1``: every Device gets the validation layer;
    * ``VKCORE_CACHE_DIR``: a fresh folder for vkcore's own caches.

    Raises RuntimeError when lavapipe is not installed.
    """
    icd = lavapipe_icd()
    if icd is None:
        raise RuntimeError(
            "lavapipe is not installed (Debian/Ubuntu: apt-get install mesa-vulkan-drivers)"
        )
    threads = threads or os.cpu_count() or 1
    return {
        "VK_DRIVER_FILES": icd,
        "VK_ICD_FILENAMES": icd,
        "MESA_SHADER_CACHE_DIR": tempfile.mkdtemp(prefix="mesa-shader-cache-"),
        "LP_NUM_THREADS": str(threads),
        "VKCORE_VALIDATION": "1",
        "VKCORE_CACHE_DIR": tempfile.mkdtemp(prefix="vkcore-cache-"),
    }
