"""The settings of a deterministic CI run on lavapipe (``vkcore ci-env``, the pytest
plugin's ``--vk-lavapipe``). No pytest here: the command line imports it.

A multiarch runner installs one lavapipe manifest per architecture
(``lvp_icd.i686.json`` next to ``lvp_icd.x86_64.json``): the Vulkan loader of a 64-bit
Python cannot load the 32-bit driver, so naming that one would leave the run with no
device. :func:`lavapipe_icd` picks the manifest whose driver this interpreter can load:
the ELF class, byte order and machine of the manifest's ``library_path`` compared with
the interpreter's own executable; where the library cannot be read (a bare name the
loader searches for, or a missing file), the architecture in the manifest's name.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Literal, NamedTuple

# Where Debian, Fedora and Arch install lavapipe's ICD manifest.
LAVAPIPE_ICD_GLOBS = ("/usr/share/vulkan/icd.d/lvp_icd*.json", "/etc/vulkan/icd.d/lvp_icd*.json")


class Arch(NamedTuple):
    """What decides whether a process can load a shared library: ELF class (32 or 64
    bits), byte order ("little"/"big"; None where a name does not say) and e_machine."""

    bits: int
    order: str | None
    machine: int

    def matches(self, other: Arch) -> bool:
        same_order = self.order is None or other.order is None or self.order == other.order
        return self.bits == other.bits and self.machine == other.machine and same_order

    def __str__(self) -> str:
        name = next((k for k, v in _NAMED.items() if v[:2] == (self.bits, self.machine)), None)
        return f"{name or f'machine {self.machine}'} ({self.bits}-bit)"


# Architecture names in manifest file names (lvp_icd.<name>.json): ELF class and
# e_machine. Byte order is not in most of these names; ppc64le and ppc64 differ in it.
_NAMED: dict[str, tuple[int, int, str | None]] = {
    "x86_64": (64, 62, "little"),
    "amd64": (64, 62, "little"),
    "i686": (32, 3, "little"),
    "i586": (32, 3, "little"),
    "i486": (32, 3, "little"),
    "i386": (32, 3, "little"),
    "x86": (32, 3, "little"),
    "aarch64": (64, 183, None),
    "arm64": (64, 183, None),
    "armv7l": (32, 40, None),
    "armv7hl": (32, 40, None),
    "armhf": (32, 40, None),
    "arm": (32, 40, None),
    "ppc64le": (64, 21, "little"),
    "ppc64": (64, 21, "big"),
    "s390x": (64, 22, "big"),
    "riscv64": (64, 243, None),
    "loongarch64": (64, 258, None),
}


def elf_arch(path: str | os.PathLike[str]) -> Arch | None:
    """The architecture in the ELF header of ``path``, or None (not readable, not ELF)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
    return Arch(32 if head[4] == 1 else 64, order, int.from_bytes(head[18:20], order))


def name_arch(manifest: str) -> Arch | None:
    """The architecture a manifest's file name gives (``lvp_icd.i686.json``), or None."""
    parts = Path(manifest).name.split(".")
    for part in reversed(parts[1:-1]):
        if part.lower() in _NAMED:
            bits, machine, order = _NAMED[part.lower()]
            return Arch(bits, order, machine)
    return None


def manifest_arch(manifest: str) -> Arch | None:
    """The architecture of the driver ``manifest`` names: its ``library_path``'s ELF
    header where that file can be read (a relative path is relative to the manifest, as
    the loader takes it), else the manifest's file name; None where neither says."""
    try:
        library = json.loads(Path(manifest).read_text())["ICD"]["library_path"]
    except (OSError, ValueError, KeyError, TypeError):
        library = None
    if isinstance(library, str) and os.sep in library:
        arch = elf_arch(Path(manifest).parent / library)  # absolute paths stay absolute
        if arch is not None:
            return arch
    return name_arch(manifest)


def interpreter_arch() -> Arch | None:
    """The architecture of the running interpreter's executable (None where it is not an
    ELF file one can read, e.g. on macOS or Windows)."""
    for exe in (sys.executable, "/proc/self/exe"):
        if exe:
            arch = elf_arch(exe)
            if arch is not None:
                return arch
    return None


def lavapipe_manifests() -> list[str]:
    """Every lavapipe manifest installed, in the order of :data:`LAVAPIPE_ICD_GLOBS`."""
    return [path for pattern in LAVAPIPE_ICD_GLOBS for path in sorted(glob.glob(pattern))]


def lavapipe_icd(arch: Arch | None = None) -> str | None:
    """The path of the lavapipe manifest whose driver this interpreter (or ``arch``) can
    load, or None where lavapipe is not installed.

    A manifest whose architecture is known and matches is taken first; else one whose
    architecture nobody can tell (the loader will try it). Manifests for other
    architectures only: RuntimeError naming them.
    """
    found = lavapipe_manifests()
    if not found:
        return None
    want = interpreter_arch() if arch is None else arch
    if want is None:  # nothing to compare with: the old rule, the first by name
        return found[0]
    unknown = []
    others = []
    for path in found:
        got = manifest_arch(path)
        if got is None:
            unknown.append(path)
        elif got.matches(want):
            return path
        else:
            others.append(f"{path} ({got})")
    if unknown:
        return unknown[0]
    raise RuntimeError(
        f"lavapipe is installed for other architectures only: {', '.join(others)}; this "
        f"Python is {want} (Debian/Ubuntu: apt-get install mesa-vulkan-drivers for it)"
    )


def lavapipe_settings(threads: int | None = None) -> dict[str, str]:
    """Environment for a deterministic CI run on lavapipe.

    * ``VK_DRIVER_FILES`` and ``VK_ICD_FILENAMES`` (older loaders) name lavapipe's
      manifest for this interpreter's architecture only (:func:`lavapipe_icd`), so a
      runner that also has a GPU driver, or lavapipe for another architecture, still
      runs on this lavapipe;
    * ``MESA_SHADER_CACHE_DIR``: a fresh folder, so no run reuses another's compiled
      shaders (cold pipeline creation every time, as on a new runner);
    * ``LP_NUM_THREADS``: lavapipe's rasterizer/compute threads, fixed (default: the
      runner's CPU count), so timings and thread interleavings do not depend on it;
    * ``VKCORE_VALIDATION=1``: every Device gets the validation layer;
    * ``VKCORE_CACHE_DIR``: a fresh folder for vkcore's own caches.

    The two folders are new names under the temporary directory that nothing has made
    yet: Mesa and vkcore create them on their first write, so asking for the settings
    leaves nothing behind. Whoever runs with them removes them afterwards (the pytest
    plugin does at the end of its session; on a throw-away CI runner nobody needs to).

    ``threads``: None (the CPU count) or an int from 1 to :data:`THREADS_MAX`, else
    TypeError/ValueError (Mesa reads the value into an unsigned int: 2^32 would become
    0 threads; above its own maximum it takes that maximum).

    Raises RuntimeError when lavapipe is not installed, or only for other architectures.
    """
    icd = lavapipe_icd()
    if icd is None:
        raise RuntimeError(
            "lavapipe is not installed (Debian/Ubuntu: apt-get install mesa-vulkan-drivers)"
        )
    threads = _threads(threads)
    run = uuid.uuid4().hex[:16]  # unguessable: nobody else can have made these folders
    root = tempfile.gettempdir()
    return {
        "VK_DRIVER_FILES": icd,
        "VK_ICD_FILENAMES": icd,
        "MESA_SHADER_CACHE_DIR": os.path.join(root, f"mesa-shader-cache-{run}"),
        "LP_NUM_THREADS": str(threads),
        "VKCORE_VALIDATION": "1",
        "VKCORE_CACHE_DIR": os.path.join(root, f"vkcore-cache-{run}"),
    }


THREADS_MAX = 2**31 - 1


def _threads(threads: object) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads must be an int or None, got {type(threads).__name__}")
    if not 1 <= threads <= THREADS_MAX:
        raise ValueError(f"threads must be from 1 to {THREADS_MAX}, got {threads}")
    return threads


# The settings whose folders lavapipe_settings names (removed by whoever ran with them).
CACHE_FOLDERS = ("MESA_SHADER_CACHE_DIR", "VKCORE_CACHE_DIR")
