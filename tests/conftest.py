"""Shared fixtures: one validated lavapipe device per session, isolated cache folders.

Every test fails if the validation layer reported anything during it.
"""

from __future__ import annotations

import os
import tempfile

import pytest

# Isolate caches before vkcore reads the environment (the user's folders stay untouched).
_CACHE_ROOT = tempfile.mkdtemp(prefix="vkcore-test-cache-")
os.environ["VKCORE_CACHE_DIR"] = _CACHE_ROOT
os.environ.setdefault("VKCORE_VALIDATION", "1")

import vkcore  # noqa: E402


@pytest.fixture(scope="session")
def device():
    dev = vkcore.Device(validation=True)
    yield dev
    # Closing first: objects left alive at vkDestroyDevice are reported during close.
    messages = list(dev.validation_messages)
    dev.close()
    messages += dev.validation_messages[len(messages) :]
    assert messages == [], f"validation messages: {messages}"


@pytest.fixture(autouse=True)
def _no_validation_messages(request):
    """Fail a test that produced validation messages on the shared device."""
    if "device" not in request.fixturenames:
        yield
        return
    dev = request.getfixturevalue("device")
    before = len(dev.validation_messages)
    yield
    new = dev.validation_messages[before:]
    assert new == [], f"validation messages during the test: {new}"


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)
