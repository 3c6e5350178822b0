"""Build hook: the wheel carries the GLSL sources and the SPIR-V of every shader variant.

``python -m build`` (or ``pip wheel``) runs ``build_py``, which here also

1. copies the repository's ``shaders/*.comp`` and ``shaders/*.glsl`` into the package as
   ``vkcore/shaders/`` (the sources stay available for users who change a shader), and
2. compiles every variant that :func:`vkcore.spirv.variants` lists (the kernels declare them
   with ``register_variants``) into ``vkcore/spirv/shipped/<source key>.spv``, plus an
   ``index.json`` naming each file's shader and defines and an ``interfaces.json`` with
   each module's reflected interface (:mod:`vkcore.spirv.interface_file`).

An installed wheel then finds every variant as *shipped* SPIR-V and needs no
``glslangValidator``. Building one does: glslang-tools (and numpy, which the kernel
modules import while listing their variants). Editable installs skip both steps: they
read ``shaders/`` from the checkout and compile at run time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHADER_PATTERNS = ("*.comp", "*.glsl")

# Runs in a child process on the source tree: lists the declared variants and compiles
# each into argv[1], named by the same source key the installed package looks up.
_COMPILE_ALL = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from vkcore import spirv
from vkcore.spirv import entries, interface_file, reflect

out = Path(sys.argv[1])
found = spirv.variants()
if not found:
    sys.exit("no shader variants are registered; nothing to ship")

def one(variant):
    name, defines = variant
    key = spirv.source_key(name, defines)
    # Through the content-addressed cache (checked entries, the same words a compile gives):
    # a build right after the tests, or a second build, compiles nothing again.
    code = spirv.get(name, defines).code
    (out / f"{key}.spv").write_bytes(entries.encode_entry(key, code))
    return {"key": key, "shader": name, "defines": defines}, code

with ThreadPoolExecutor() as pool:
    built = list(pool.map(one, found))
index = [entry for entry, _ in built]
(out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
# Reflected here, so an installed wheel never reflects its own kernels at run time.
interfaces = {interface_file.digest(code): reflect.reflect(code) for _, code in built}
interface_file.write(out / interface_file.FILE_NAME, interfaces)
print(f"vkcore: compiled {len(index)} shader variants into {out}")
"""


class BuildPyWithShaders(build_py):
    """``build_py`` plus the shader sources and their precompiled SPIR-V."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        package = Path(self.build_lib) / "vkcore"
        shaders = self._copy_shaders(package / "shaders")
        self._compile_variants(package / "spirv" / "shipped", shaders)

    def _copy_shaders(self, dest: Path) -> Path:
        source = ROOT / "shaders"
        files = sorted(f for pattern in SHADER_PATTERNS for f in source.glob(pattern))
        if not files:
            raise SystemExit(f"no shader sources found in {source}")
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        for f in files:
            shutil.copy2(f, dest / f.name)
        return dest

    def _compile_variants(self, dest: Path, shaders: Path) -> None:
        if shutil.which("glslangValidator") is None:
            raise SystemExit(
                "building vkcore's wheel compiles its shaders: glslangValidator is not on "
                "PATH (Debian: apt-get install glslang-tools)"
            )
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        env = dict(os.environ)
        # Hash the copies that will ship, so the keys match what the wheel looks up.
        env["VKCORE_SHADER_DIR"] = str(shaders)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        cmd = [sys.executable, "-c", _COMPILE_ALL, str(dest)]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"compiling the shader variants failed:\n{proc.stdout}{proc.stderr}")
        self.announce(proc.stdout.strip(), level=2)
        json.loads((dest / "index.json").read_text())  # fail the build on a broken index
        json.loads((dest / "interfaces.json").read_text())


setup(cmdclass={"build_py": BuildPyWithShaders})
