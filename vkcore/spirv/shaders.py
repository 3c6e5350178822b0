"""GLSL compute shaders to SPIR-V: shipped, cached by content, or compiled.

A variant (file name + defines) is looked up shipped in the wheel
(``vkcore/spirv/shipped/``), then in the SPIR-V cache, else compiled (glslangValidator,
then spirv-val) and stored in the cache; every shipped or cached entry is checked before
use and a failed check is one warning and a recompile. The lookup, the keys, the entry
format and the checks are docs/caches.md ("SPIR-V cache", "SPIR-V entry format"); the
entry itself is :mod:`vkcore.spirv.entries`, the folder's rules :mod:`vkcore.base.cachefs`.

Every variant a kernel can request is declared once, next to the kernel, with
:func:`register_variants`; :func:`variants` lists them all, and the wheel build (``setup.py``)
precompiles exactly that list, so an installed package needs no compiler.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vkcore.base import cachefs, config
from vkcore.errors import ShaderCompileError, cut, shown
from vkcore.spirv import entries, glslang

log = logging.getLogger("vkcore")

_PACKAGE_DIR = Path(__file__).resolve().parent
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


def shader_dir(name: str | None = None) -> Path:
    """The GLSL sources: ``$VKCORE_SHADER_DIR`` when it is a folder (holding ``name`` when
    given; else one warning), else ``vkcore/shaders`` in a wheel or the repository's
    ``shaders/``."""
    override = config.env_dir("VKCORE_SHADER_DIR", must_exist=True)
    if override is not None and name is not None and not (override / name).is_file():
        config.warn_ignored("VKCORE_SHADER_DIR", str(override), f"it has no {name}", "vkcore's")
        override = None
    if override is not None:
        return override
    for candidate in (_PACKAGE_DIR.parent / "shaders", _PACKAGE_DIR.parents[1] / "shaders"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("vkcore's GLSL shader folder was not found")


def shipped_dir() -> Path:
    return _PACKAGE_DIR / "shipped"


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
        raise FileNotFoundError(f"shader source {shown(str(path))} not found") from None
    except OSError as exc:  # a name too long, ...: the same error, the name cut short
        raise OSError(exc.errno, exc.strerror, cut(str(path))) from None
    parts = [f"--- {name}\n", text]
    for inc in glslang.INCLUDE.findall(text):
        parts.append(_source_text(inc, root, seen))
    return "".join(parts)


def source_key(name: str, defines: dict[str, int | str]) -> str:
    """Hash of everything that decides the SPIR-V except the compiler itself."""
    h = hashlib.sha256()
    h.update(_source_text(name, shader_dir(name)).encode())
    h.update(repr(glslang.define_args(defines)).encode())
    h.update(glslang.TARGET_ENV.encode())
    return h.hexdigest()[:32]


def _cache_dir() -> Path | None:
    if not config.env_flag("VKCORE_SPIRV_CACHE", True):
        return None
    return config.cache_dir() / "spirv"


def get(name: str, defines: dict[str, int | str] | None = None) -> Spirv:
    """SPIR-V for ``shaders/<name>`` with ``defines``: shipped, cached or compiled."""
    defines = dict(defines or {})
    start = time.perf_counter()
    skey = source_key(name, defines)  # FileNotFoundError for a shader vkcore does not have
    if config.env_dir("VKCORE_SHADER_DIR", must_exist=True) is None:
        _requested.setdefault(_variant_id(name, defines), defines)
    with _memo_lock:
        hit = _memo.get(skey)
    if hit is not None:
        return Spirv(hit.code, "memory", time.perf_counter() - start, hit.key)
    code = _shipped(skey)
    if code is not None:
        result = Spirv(code, "shipped", 0.0, skey)
    else:
        result = _cached_or_compiled(name, defines, skey)
    result = Spirv(result.code, result.origin, time.perf_counter() - start, result.key)
    with _memo_lock:
        _memo[skey] = result
    return result


def _shipped(skey: str) -> bytes | None:
    """The checked SPIR-V shipped in the wheel for ``skey``, or None (warned if damaged)."""
    path = shipped_dir() / f"{skey}.spv"
    try:
        return entries.read_entry(path, skey, trust=False)
    except FileNotFoundError:
        return None
    except cachefs.EntryError as exc:
        log.warning("shipped SPIR-V %s ignored (reinstall vkcore): %s", path, exc)
        return None


def cache_key(skey: str, version: str | None = None) -> str:
    """The cache entry's key: the source key plus the compiler version (this machine's
    unless given) and entry format."""
    version = glslang.compiler_version() if version is None else version
    text = f"{skey}|{version}|entry{entries.ENTRY_FORMAT}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# Users' GLSL (compile_source) is also stored under this compiler "version": a process
# without glslangValidator (an installed application) finds what another one compiled.
ANY_COMPILER = "any-compiler"


def _cached_or_compiled(name: str, defines: dict[str, int | str], skey: str) -> Spirv:
    return _from_cache_or(skey, lambda: compile_glsl(name, defines))


def _from_cache_or(skey: str, compile_now: Callable[[], bytes], *, portable: bool = False) -> Spirv:
    """The cached entry for source key ``skey``, else ``compile_now()`` stored there.

    ``portable``: without a compiler on this machine, look the entry up under
    ANY_COMPILER, and store each compiled entry under that key too."""
    keys = [cache_key(skey)]
    if portable:
        any_key = cache_key(skey, ANY_COMPILER)
        keys = [any_key] if not glslang.compiler_version() else [keys[0], any_key]
    folder = _cache_dir()
    warned = False
    if folder is not None:
        path = folder / f"{keys[0]}.spv"
        try:
            return Spirv(entries.read_entry(path, keys[0]), "cache", 0.0, keys[0])
        except FileNotFoundError:
            pass
        except cachefs.EntryError as exc:
            cachefs.report(exc, "SPIR-V cache entry %s ignored, recompiling: %s", path, exc)
            warned = True
    code = compile_now()
    if folder is not None:
        for key in keys:
            _store(folder / f"{key}.spv", entries.encode_entry(key, code), quiet=warned)
    return Spirv(code, "compiled", 0.0, keys[0])


def compile_glsl(name: str, defines: dict[str, int | str]) -> bytes:
    """Run glslangValidator (and spirv-val when installed) on one of vkcore's variants."""
    root = shader_dir(name)
    return glslang.compile_file(root / name, [root], defines, f"{name} {defines}")


def compile_source(
    text: str,
    *,
    name: str = "<string>",
    include_dirs: Sequence[str | Path] = (),
    defines: Mapping[str, int | str] | None = None,
) -> Spirv:
    """SPIR-V for a user's compute shader ``text``, through the same content-addressed
    cache as vkcore's own shaders: the key hashes the text, every file it includes, the
    defines and the target (and the compiler version), so a second process with the same
    sources never runs the compiler. ``name`` is how messages name the text (a file's
    path); includes are looked up in ``include_dirs`` in order."""
    start = time.perf_counter()
    dirs = [Path(d) for d in include_dirs]
    defs = dict(defines or {})
    h = hashlib.sha256(b"user-glsl\0")
    h.update(glslang.user_text(text, dirs, set()).encode())
    h.update(repr(glslang.define_args(defs)).encode())
    h.update(glslang.TARGET_ENV.encode())
    skey = h.hexdigest()[:32]
    with _memo_lock:
        hit = _memo.get(skey)
    if hit is not None:
        return Spirv(hit.code, "memory", time.perf_counter() - start, hit.key)

    def compile_text() -> bytes:
        with tempfile.TemporaryDirectory(prefix="vkcore-src-") as tmp:
            shown = Path(name).name if name != "<string>" else "source.comp"
            src = Path(tmp) / shown
            src.write_text(text)
            try:
                return glslang.compile_file(src, dirs, defs, name)
            except ShaderCompileError as exc:  # the user's name, not the temporary one
                fix = [m.replace(str(src), name) for m in exc.messages]
                raise ShaderCompileError(name, fix, exc.log.replace(str(src), name)) from None

    result = _from_cache_or(skey, compile_text, portable=True)
    result = Spirv(result.code, result.origin, time.perf_counter() - start, result.key)
    with _memo_lock:
        _memo[skey] = result
    return result


_unwritable: set[str] = set()


def _store(path: Path, data: bytes, *, quiet: bool) -> None:
    """Write an entry; a failure is one warning per folder (``quiet``: only logged, the
    entry was already warned about), never an error."""
    try:
        cachefs.store(path, data)
    except OSError as exc:
        folder = str(path.parent)
        if quiet or folder in _unwritable:
            log.info("SPIR-V cache entry %s not written: %s", path, exc)
            return
        _unwritable.add(folder)
        log.warning("could not write SPIR-V cache entries in %s: %s", folder, exc)


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
        raise ValueError(f"name must be a shader file name ending in .comp, got {shown(name)}")
    for d in defines:
        if not isinstance(d, Mapping):
            raise TypeError(
                f"defines must be an iterable of mappings, got an item of type {type(d).__name__}"
            )
        clean = dict(d)
        _registered.setdefault(_variant_id(name, clean), clean)


def variants() -> list[tuple[str, Defines]]:
    """Every shader variant declared so far, sorted. Kernel modules declare theirs when
    imported, and ``import vkcore`` imports every one (``vkcore/kernels/__init__.py``)."""
    return _listing(_registered)


def requested() -> list[tuple[str, Defines]]:
    """Variants :func:`get` was asked for in this process with the package's own shaders."""
    return _listing(_requested)


def _listing(table: dict[VariantId, Defines]) -> list[tuple[str, Defines]]:
    ordered = sorted(table.items(), key=lambda item: repr(item[0]))
    return [(vid[0], dict(defines)) for vid, defines in ordered]
