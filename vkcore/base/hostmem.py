"""How much host memory this process can still take, for refusing sizes that cannot fit
before anything is allocated (a weight file's declared arrays, the command line's
``--rows``/``--cols``).

:func:`available` is the smallest of the limits this process can see: the system's
``MemAvailable`` (``/proc/meminfo``; elsewhere the free physical pages), the cgroup's
``memory.max`` less its ``memory.current`` (a container's limit), and the address-space
limit ``RLIMIT_AS`` less what the process already maps. ``None`` where none of them can
be read: nothing is refused then.
"""

from __future__ import annotations

import os
from pathlib import Path


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _cgroup_available() -> int | None:
    """cgroup v2: the limit of this process's group less its usage (None: no limit)."""
    try:
        entry = Path("/proc/self/cgroup").read_text().splitlines()
        group = next(line.split(":", 2)[2] for line in entry if line.startswith("0::"))
        folder = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((folder / "memory.current").read_text()))
    except (OSError, ValueError, StopIteration, IndexError):
        return None


def _address_space_available() -> int | None:
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(0, soft - int(line.split()[1]) * 1024)
        return soft
    except (ImportError, OSError, ValueError, IndexError):
        return None


def available() -> int | None:
    """Bytes of host memory this process can still allocate, or None where unknown."""
    known = [
        v
        for v in (_meminfo_available(), _cgroup_available(), _address_space_available())
        if v is not None
    ]
    return min(known) if known else None


def describe(nbytes: int) -> str:
    """``nbytes`` in the largest binary unit that keeps it at 1 or more (``1.5 GiB``)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def shortfall(nbytes: int) -> str | None:
    """None when ``nbytes`` fit in what :func:`available` says (an unknown amount fits
    anything), else a sentence saying how much is needed and how much is available."""
    free = available()
    if free is None or nbytes <= free:
        return None
    return f"needs about {describe(nbytes)} of memory, {describe(free)} available"
