"""Mesa 25's lavapipe from Debian bookworm-backports, unpacked next to the virtual
environment (tests/support/fetch_mesa_backports.sh, fetched once), for tests that need a second
real driver: a driver upgrade for the pipeline cache, VK_EXT_memory_budget."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FETCH_MESA = Path(__file__).resolve().parent / "fetch_mesa_backports.sh"
MESA25 = Path(os.environ.get("VKCORE_MESA25_DIR", REPO / ".venv" / "mesa25"))


def mesa25_env() -> dict[str, str]:
    """Environment selecting Mesa 25's lavapipe, fetching it once; skips if unavailable."""
    if not (MESA25 / ".complete").exists():
        try:
            out = subprocess.run(
                ["bash", str(FETCH_MESA), str(MESA25)], capture_output=True, text=True, timeout=300
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"Mesa from bookworm-backports unavailable: {exc}")
        if out.returncode != 0:
            last = (out.stderr.strip().splitlines() or ["no reason given"])[-1]
            pytest.skip(f"Mesa from bookworm-backports unavailable: {last}")
    libdirs = [str(p.parent) for p in MESA25.glob("usr/lib/*/libvulkan_lvp.so")]
    icd = str(MESA25 / "lvp_icd.json")
    return {
        "VK_ICD_FILENAMES": icd,
        "VK_DRIVER_FILES": icd,
        "LD_LIBRARY_PATH": ":".join([*libdirs, os.environ.get("LD_LIBRARY_PATH", "")]),
        "VKCORE_DEVICE": "llvmpipe",
    }
