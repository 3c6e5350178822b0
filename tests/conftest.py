"""Shared fixtures: one validated lavapipe device per session (the vkcore.testing plugin),
isolated cache folders.

Every test fails if the validation layer reported anything during it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# The helpers every folder's tests import by name (checks, kernel_tour, devices, ...).
SUPPORT = Path(__file__).resolve().parent / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

# Isolate caches before vkcore reads the environment (the user's folders stay untouched).
_CACHE_ROOT = tempfile.mkdtemp(prefix="vkcore-test-cache-")
_CACHE_OWNER = os.getpid()
os.environ["VKCORE_CACHE_DIR"] = _CACHE_ROOT
os.environ.setdefault("VKCORE_VALIDATION", "1")


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
