"""Shared fixtures: one validated lavapipe device per session (the vkcore.testing plugin),
isolated cache folders.

Every test fails if the validation layer reported anything during it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# The helpers every folder's tests import by name (checks, kernel_tour, devices, ...).
SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

# Isolate caches before vkcore reads the environment (the user's folders stay untouched).
# Each process of the run (pytest-xdist workers too) has a cache folder of its own; the
# workers start from the SPIR-V the controller compiled once for all (SEED_ENV).
SEED_ENV = "VKCORE_TEST_SPIRV_SEED"
_CACHE_ROOT = tempfile.mkdtemp(prefix="vkcore-test-cache-")
_CACHE_OWNER = os.getpid()
os.environ["VKCORE_CACHE_DIR"] = _CACHE_ROOT
os.environ.setdefault("VKCORE_VALIDATION", "1")
if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(SEED_ENV, "")):
    shutil.copytree(os.environ[SEED_ENV], os.path.join(_CACHE_ROOT, "spirv"))

# Every declared shader variant compiled into the controller's cache folder, two
# compilers at a time (glslangValidator is a process of its own).
_COMPILE_ALL = """
from concurrent.futures import ThreadPoolExecutor
from vkcore import spirv
with ThreadPoolExecutor(2) as pool:
    list(pool.map(lambda v: spirv.get(*v), spirv.variants()))
"""


def pytest_configure(config):
    """Under pytest-xdist, compile every shader variant once before the workers start
    (each worker would otherwise compile all of them again, a minute of CPU each)."""
    workers = getattr(config.option, "numprocesses", None)
    if os.environ.get("PYTEST_XDIST_WORKER") or not workers:
        return
    env = dict(os.environ, VKCORE_VALIDATION="0")
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_ALL], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:  # the tests that compile will say why
        print(f"conftest: shader variants not compiled ahead:\n{done.stderr[-2000:]}")
        return
    os.environ[SEED_ENV] = os.path.join(_CACHE_ROOT, "spirv")


def pytest_unconfigure(config):
    """Remove the session's cache folder (only in the process that made it: a forked
    child that ends must not take it from the running session)."""
    if os.getpid() == _CACHE_OWNER:
        shutil.rmtree(_CACHE_ROOT, ignore_errors=True)


# The plugin vkcore.testing (loaded through its pytest11 entry point, and named here for
# a run where vkcore is not installed) provides the validated session device and fails
# any test during which the validation layer said anything, and the session if objects
# are still alive when the device is destroyed.
pytest_plugins = ["vkcore.testing", "binding_limits"]  # binding_limits: the small_binding fixture


@pytest.fixture(scope="session")
def device(vk_session_device):
    return vk_session_device


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)


@pytest.fixture
def scale(device):
    """y = a * x over n floats (tests/support/adversarial_programs.py)."""
    from adversarial_programs import SCALE

    import vkcore

    return vkcore.Program(SCALE, device=device)


@pytest.fixture
def copy_words(device):
    """y[i] = x[i] word for word (tests/support/adversarial_programs.py)."""
    from adversarial_programs import COPY_WORDS

    import vkcore

    return vkcore.Program(COPY_WORDS, device=device)
