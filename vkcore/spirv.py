"""GLSL compute shaders to SPIR-V: shipped, cached by content, or compiled.

Lookup order for a shader variant (file name + defines):

1. *shipped*: ``vkcore/spirv/<source key>.spv`` inside an installed wheel, where the
   source key hashes the GLSL source with its includes, the defines and the target
   environment. A changed shader has another key, so stale SPIR-V is never used.
2. *cache*: ``$VKCORE_CACHE_DIR/spirv/<key>.spv``, where the key also covers the
   compiler's version (``VKCORE_SPIRV_CACHE=0`` disables it).
3. *compiled*: ``glslangValidator`` then ``spirv-val``; the result is written to the cache
   atomically (temp file + ``os.replace``).

Every variant a kernel can request is declared once, next to the kernel, with
:func:`register_variants`; :func:`variants` lists them all, and the wheel build (``setup.py``)
precompiles exactly that list, so an installed package needs no compiler.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import logging
import os
import pkgutil
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from . import config

log = logging.getLogger("vkcore")

TARGET_ENV = "vulkan1.1"
_PACKAGE_DIR = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_memo: dict[str, Spirv] = {}
_memo_lock = threading.Lock()
Defines = dict[str, int | str]
# (shader file, sorted define items) -> defines: what kernels declared they may request.
VariantId = tuple[str, tuple[tuple[str, int | str], ...]]
_registered: dict[VariantId, Defines] = {}
# The same for what get() was asked for with the package's own shaders (completeness tests).
_requested: dict[VariantId, Defines] = {}


@dataclass(frozen=True)
class Spirv:
    """Compiled SPIR-V words for one variant, with where they came from and how long it took."""

    code: bytes
    origin: str  # "shipped" | "cache" | "compiled" | "memory"
    seconds: float
    key: str


def shader_dir() -> Path:
    """The GLSL sources: ``vkcore/shaders`` in a wheel, the repository's ``shaders/`` otherwise."""
    override = os.environ.get("VKCORE_SHADER_DIR")
    if override:
        return Path(override)
    for candidate in (_PACKAGE_DIR / "shaders", _PACKAGE_DIR.parent / "shaders"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("vkcore's GLSL shader folder was not found")


def shipped_dir() -> Path:
    return _PACKAGE_DIR / "spirv"


def _source_text(name: str, root: Path, seen: set[str] | None = None) -> str:
    """The shader text followed by every included file, recursively (for hashing)."""
    seen = set() if seen is None else seen
    if name in seen:
        return ""
    seen.add(name)
    path = root / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"shader source {path} not found") from None
    parts = [f"--- {name}\n", text]
    for inc in _INCLUDE.findall(text):
        parts.append(_source_text(inc, root, seen))
    return "".join(parts)


def _define_args(defines: dict[str, int | str]) -> list[str]:
    return [f"-D{k}={v}" for k, v in sorted(defines.items())]


def source_key(name: str, defines: dict[str, int | str]) -> str:
    """Hash of everything that decides the SPIR-V except the compiler itself."""
    h = hashlib.sha256()
    h.update(_source_text(name, shader_dir()).encode())
    h.update(repr(_define_args(defines)).encode())
    h.update(TARGET_ENV.encode())
    return h.hexdigest()[:32]


@cache
def compiler_version() -> str:
    """First line of ``glslangValidator --version``; empty when it is not installed."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"


def _cache_dir() -> Path | None:
    if not config.env_flag("VKCORE_SPIRV_CACHE", True):
        return None
    return config.cache_dir() / "spirv"


def get(name: str, defines: dict[str, int | str] | None = None) -> Spirv:
    """SPIR-V for ``shaders/<name>`` with ``defines``: shipped, cached or compiled."""
    defines = dict(defines or {})
    start = time.perf_counter()
    if not os.environ.get("VKCORE_SHADER_DIR"):
        _requested.setdefault(_variant_id(name, defines), defines)
    skey = source_key(name, defines)
    with _memo_lock:
        hit = _memo.get(skey)
    if hit is not None:
        return Spirv(hit.code, "memory", time.perf_counter() - start, hit.key)
    shipped = shipped_dir() / f"{skey}.spv"
    if shipped.is_file():
        result = Spirv(shipped.read_bytes(), "shipped", 0.0, skey)
    else:
        result = _cached_or_compiled(name, defines, skey)
    result = Spirv(result.code, result.origin, time.perf_counter() - start, result.key)
    with _memo_lock:
        _memo[skey] = result
    return result


def _cached_or_compiled(name: str, defines: dict[str, int | str], skey: str) -> Spirv:
    version = compiler_version()
    key = hashlib.sha256(f"{skey}|{version}".encode()).hexdigest()[:32]
    folder = _cache_dir()
    if folder is not None:
        path = folder / f"{key}.spv"
        try:
            code = path.read_bytes()
            if _looks_like_spirv(code):
                return Spirv(code, "cache", 0.0, key)
            log.warning("ignoring damaged SPIR-V cache file %s", path)
        except OSError:
            pass
    code = compile_glsl(name, defines)
    if folder is not None:
        _write_atomic(folder, f"{key}.spv", code)
    return Spirv(code, "compiled", 0.0, key)


def _looks_like_spirv(code: bytes) -> bool:
    return len(code) >= 20 and len(code) % 4 == 0 and code[:4] == b"\x03\x02\x23\x07"


def compile_glsl(name: str, defines: dict[str, int | str]) -> bytes:
    """Run glslangValidator (and spirv-val when installed) on one variant."""
    exe = shutil.which("glslangValidator")
    if exe is None:
        raise RuntimeError(
            f"SPIR-V for shader {name} {defines} is neither shipped nor cached, and "
            "glslangValidator is not installed (Debian: glslang-tools)"
        )
    root = shader_dir()
    with tempfile.TemporaryDirectory(prefix="vkcore-glsl-") as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [exe, "-V", "--target-env", TARGET_ENV, *_define_args(defines), "-I" + str(root)]
        cmd += ["-o", str(out), str(root / name)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(
                f"glslangValidator failed on {name} {defines}:\n{proc.stdout}{proc.stderr}"
            )
        code = out.read_bytes()
        val = shutil.which("spirv-val")
        if val is not None:
            proc = subprocess.run(
                [val, "--target-env", TARGET_ENV, str(out)], capture_output=True, text=True
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"spirv-val rejected {name} {defines}:\n{proc.stdout}{proc.stderr}"
                )
    return code


def _write_atomic(folder: Path, filename: str, data: bytes) -> None:
    """Write ``folder/filename`` via a temp file and ``os.replace``; failures only log."""
    tmp_name = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, folder / filename)
        tmp_name = None
    except OSError as exc:
        log.warning("could not write SPIR-V cache file in %s: %s", folder, exc)
    finally:
        if tmp_name is not None:
            try:
                os.unlink(tmp_name)
            except OSError:
                pass


def clear_memory_cache() -> None:
    """Forget SPIR-V held in this process (tests and cold measurements)."""
    with _memo_lock:
        _memo.clear()


def _variant_id(name: str, defines: Mapping[str, int | str]) -> VariantId:
    return name, tuple(sorted(defines.items()))


def define_grid(**choices: Sequence[int | str]) -> list[Defines]:
    """Every combination of the given define values: ``define_grid(A=[0, 1], B=[2])``
    gives ``[{"A": 0, "B": 2}, {"A": 1, "B": 2}]``."""
    names = sorted(choices)
    combos = itertools.product(*(choices[n] for n in names))
    return [dict(zip(names, combo, strict=True)) for combo in combos]


def register_variants(name: str, defines: Iterable[Mapping[str, int | str]]) -> None:
    """Declare that a kernel may request ``shaders/<name>`` with each of ``defines``.

    Kernel modules call this at import time. The wheel build precompiles every declared
    variant, so a variant that is requested but not declared needs a compiler at run time.
    """
    if not isinstance(name, str) or not name.endswith(".comp"):
        raise ValueError(f"name must be a shader file name ending in .comp, got {name!r}")
    for d in defines:
        if not isinstance(d, Mapping):
            raise TypeError(
                f"defines must be an iterable of mappings, got an item of type {type(d).__name__}"
            )
        clean = dict(d)
        _registered.setdefault(_variant_id(name, clean), clean)


def variants() -> list[tuple[str, Defines]]:
    """Every declared shader variant of every kernel module, sorted (imports them all)."""
    from . import kernels  # noqa: PLC0415 - kernels import this module

    for module in sorted(m.name for m in pkgutil.iter_modules(kernels.__path__)):
        importlib.import_module(f"{kernels.__name__}.{module}")
    return _listing(_registered)


def requested() -> list[tuple[str, Defines]]:
    """Variants :func:`get` was asked for in this process with the package's own shaders."""
    return _listing(_requested)


def _listing(table: dict[VariantId, Defines]) -> list[tuple[str, Defines]]:
    ordered = sorted(table.items(), key=lambda item: repr(item[0]))
    return [(vid[0], dict(defines)) for vid, defines in ordered]
