"""pytest plugin for projects that run Vulkan compute in CI: ``pytest -p vkcore.testing``.

Installed vkcore registers it under the ``pytest11`` entry point, so it is active in any
pytest run of an environment that has vkcore (``-p no:vkcore`` turns it off).

Fixtures:

``vk_device``
    A :class:`vkcore.Device` with the Khronos validation layer on, shared by the tests of
    a session. A test that uses it FAILS if the layer reported anything while it ran
    (messages are errors and warnings of the layer, printed in the failure). Objects
    still alive when the device is destroyed at the end of the session fail the session.
    Where no Vulkan device exists, tests that use it are skipped with the loader's reason;
    a missing validation layer is an error (install ``vulkan-validationlayers``), not a
    skip: a test that asked for validation must not pass without it.

Options: ``--vk-device SELECTOR`` (index or name substring, as ``vkcore --device``) and
``--vk-lavapipe``, which applies :func:`lavapipe_settings` to this process before any
device is created: the deterministic software-renderer setup of ``vkcore ci-env``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from vkcore.device.device import Device
from vkcore.errors import VulkanError
from vkcore.tools.ci import lavapipe_icd, lavapipe_settings

__all__ = ["lavapipe_icd", "lavapipe_settings", "vk_device", "vk_session_device"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vkcore")
    group.addoption(
        "--vk-device",
        default=None,
        help="Vulkan device for vk_device: index or name substring (default: $VKCORE_DEVICE)",
    )
    group.addoption(
        "--vk-lavapipe",
        action="store_true",
        help="run on lavapipe with fresh shader caches and fixed threads (vkcore ci-env)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--vk-lavapipe"):
        os.environ.update(lavapipe_settings())


def pytest_report_header(config: pytest.Config) -> list[str]:
    keys = ("VK_DRIVER_FILES", "MESA_SHADER_CACHE_DIR", "LP_NUM_THREADS", "VKCORE_VALIDATION")
    return ["vkcore: " + "  ".join(f"{k}={os.environ.get(k, '')}" for k in keys)]


@pytest.fixture(scope="session")
def vk_session_device(pytestconfig: pytest.Config) -> Iterator[Device]:
    """The session's validated Device (use ``vk_device`` in tests)."""
    dev = open_validated_device(pytestconfig.getoption("--vk-device"))
    yield dev
    # Close first: objects left alive at vkDestroyDevice are reported during close.
    seen = len(dev.validation_messages)
    dev.close()
    left = dev.validation_messages[seen:]
    if left:
        pytest.fail(f"validation messages when the Vulkan device closed: {left}", pytrace=False)


def open_validated_device(selector: str | None) -> Device:
    """A Device with validation on, or a skip where the machine has no Vulkan device."""
    try:
        return Device(selector, validation=True)
    except VulkanError as exc:
        if "not installed" in str(exc):  # the validation layer: an error, not a skip
            raise
        pytest.skip(f"no Vulkan device: {exc}")


@pytest.fixture
def vk_device(vk_session_device: Device) -> Device:
    """A validated Device; the test fails if the validation layer reports anything."""
    return vk_session_device


@pytest.fixture(autouse=True)
def _vk_validation_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Counts the session device's messages before a test that uses it (its fixtures'
    setup included); messages caused by tearing them down fail it too."""
    if "vk_session_device" not in request.fixturenames:
        yield
        return
    dev = request.getfixturevalue("vk_session_device")
    request.node.stash[_BEFORE] = len(dev.validation_messages)
    yield
    new = dev.validation_messages[request.node.stash[_BEFORE] :]
    if new:
        pytest.fail(f"validation messages while the test was torn down: {new}", pytrace=False)


_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    """Fail the test itself (not its teardown) when the device got validation messages."""
    result = yield
    dev = getattr(item, "funcargs", {}).get("vk_session_device")
    if isinstance(dev, Device) and _BEFORE in item.stash:
        messages = dev.validation_messages
        new, item.stash[_BEFORE] = messages[item.stash[_BEFORE] :], len(messages)
        if new:
            pytest.fail(f"validation messages during the test: {new}", pytrace=False)
    return result
