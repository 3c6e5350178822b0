"""pytest plugin for projects that run Vulkan compute in CI: ``pytest -p vkcore.testing``.

Installed vkcore registers it under the ``pytest11`` entry point named
``vkcore.testing``, so it is active in any pytest run of an environment that has vkcore
(``-p no:vkcore.testing`` turns it off, whichever way it was loaded).

Fixtures:

``vk_device``
    A :class:`vkcore.Device` with the Khronos validation layer on, shared by the tests of
    a session. A test that uses it FAILS if the layer reported anything while it ran
    (messages are errors and warnings of the layer, printed in the failure). Objects
    still alive when the device is destroyed at the end of the session fail the session.
    The plugin closes it at the end of the session: a test (or its fixture) that closes
    it fails saying so, and the device stays open for the tests after it (one closed by
    other means than ``close()`` is opened again for them).
    Where no Vulkan device exists, tests that use it are skipped with the loader's reason,
    except under ``--vk-lavapipe``, where no device is an error: a CI run that asked for
    lavapipe must not pass having run nothing. A missing validation layer is an error
    (install ``vulkan-validationlayers``), not a skip: a test that asked for validation
    must not pass without it.

Options: ``--vk-device SELECTOR`` (index or name substring, as ``vkcore --device``) and
``--vk-lavapipe``, which applies :func:`lavapipe_settings` to this process before any
device is created: the deterministic software-renderer setup of ``vkcore ci-env``. At the
end of the session the plugin closes the devices still open, removes the two cache
folders the settings named and restores the environment.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from vkcore.device import device as _device
from vkcore.device.device import Device
from vkcore.errors import VulkanError
from vkcore.tools.ci import CACHE_FOLDERS, lavapipe_icd, lavapipe_settings

__all__ = ["lavapipe_icd", "lavapipe_settings", "vk_device", "vk_session_device"]

# The environment before --vk-lavapipe changed it (None: the variable was not set).
_SAVED_ENV = pytest.StashKey[dict[str, str | None]]()


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
        help="run on lavapipe with fresh shader caches and fixed threads (vkcore ci-env); "
        "no Vulkan device is then an error, not a skip",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--vk-lavapipe"):
        return
    try:
        settings = lavapipe_settings()
    except RuntimeError as exc:  # not installed, or for other architectures only
        raise pytest.UsageError(f"--vk-lavapipe: {exc}") from None
    config.stash[_SAVED_ENV] = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)


def pytest_unconfigure(config: pytest.Config) -> None:
    saved = config.stash.get(_SAVED_ENV, None)
    if saved is None:
        return
    del config.stash[_SAVED_ENV]
    # Devices of the run write their pipeline caches when they close: before the folders go.
    _device.close_open_devices()
    for name in CACHE_FOLDERS:
        folder = os.environ.get(name)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_report_header(config: pytest.Config) -> list[str]:
    keys = ("VK_DRIVER_FILES", "MESA_SHADER_CACHE_DIR", "LP_NUM_THREADS", "VKCORE_VALIDATION")
    return ["vkcore: " + "  ".join(f"{k}={os.environ.get(k, '')}" for k in keys)]


class _Shared:
    """The session's device and what the plugin needs to keep it usable: the selector
    it was opened with, and whether a test tried to close it."""

    def __init__(self, selector: str | None, required: bool) -> None:
        self.selector = selector
        self.device = open_validated_device(selector, required=required)
        self.close_attempted = False
        self.in_call = False  # a test function runs (not a fixture's setup or teardown)
        self.device.close = self._refuse_close  # type: ignore[method-assign]

    def _refuse_close(self) -> None:
        """Leave the device open; fail the test at the call (its traceback shows where),
        or, in a fixture, let the plugin fail it once afterwards."""
        __tracebackhide__ = True
        self.close_attempted = True
        if self.in_call:
            pytest.fail(CLOSED_MESSAGE, pytrace=True)

    def reopen_if_closed(self) -> bool:
        """Open the device again in place where something closed it; True if it did."""
        dev = self.device
        if not dev.closed:
            return False
        Device.__init__(dev, self.selector, validation=True)
        dev.close = self._refuse_close  # type: ignore[method-assign]
        return True

    def close(self) -> None:
        del self.device.close  # the class's own close again
        self.device.close()


CLOSED_MESSAGE = (
    "a test closed vk_device: it is one Device shared by every test of the session, and "
    "the plugin closes it when the session ends (to test closing, open a vkcore.Device of "
    "your own); it stays open for the tests that follow"
)

_SHARED = pytest.StashKey[_Shared]()


@pytest.fixture(scope="session")
def vk_session_device(pytestconfig: pytest.Config) -> Iterator[Device]:
    """The session's validated Device (use ``vk_device`` in tests)."""
    shared = _Shared(
        pytestconfig.getoption("--vk-device"), bool(pytestconfig.getoption("--vk-lavapipe"))
    )
    pytestconfig.stash[_SHARED] = shared
    dev = shared.device
    yield dev
    del pytestconfig.stash[_SHARED]
    if dev.closed:  # closed by other means after the last test: nothing left to check
        return
    # Close first: objects left alive at vkDestroyDevice are reported during close.
    seen = len(dev.validation_messages)
    shared.close()
    left = dev.validation_messages[seen:]
    if left:
        pytest.fail(f"validation messages when the Vulkan device closed: {left}", pytrace=False)


def open_validated_device(selector: str | None, *, required: bool = False) -> Device:
    """A Device with validation on, or a skip where the machine has no Vulkan device
    (a failure where ``required``: under ``--vk-lavapipe``)."""
    try:
        return Device(selector, validation=True)
    except VulkanError as exc:
        if "not installed" in str(exc):  # the validation layer: an error, not a skip
            raise
        if required:
            driver = os.environ.get("VK_DRIVER_FILES", "")
            pytest.fail(
                f"--vk-lavapipe: no Vulkan device on lavapipe (VK_DRIVER_FILES={driver}): {exc}",
                pytrace=False,
            )
        pytest.skip(f"no Vulkan device: {exc}")


@pytest.fixture
def vk_device(vk_session_device: Device) -> Device:
    """A validated Device; the test fails if the validation layer reports anything."""
    return vk_session_device


def _closed_by_the_test(item: pytest.Item) -> str | None:
    """The failure message when the test (or its fixtures) closed the session device or
    tried to; the device is usable again afterwards either way."""
    shared = item.config.stash.get(_SHARED, None)
    if shared is None:
        return None
    attempted, shared.close_attempted = shared.close_attempted, False
    if shared.reopen_if_closed():
        item.stash[_BEFORE] = 0  # a new device: its messages start anew
        return CLOSED_MESSAGE.replace("it stays open", "it was opened again")
    return CLOSED_MESSAGE if attempted else None


@pytest.fixture(autouse=True)
def _vk_validation_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Counts the session device's messages before a test that uses it (its fixtures'
    setup included); messages caused by tearing them down fail it too, and so does
    closing the device in a teardown."""
    if "vk_session_device" not in request.fixturenames:
        yield
        return
    dev = request.getfixturevalue("vk_session_device")
    shared = request.config.stash.get(_SHARED, None)
    if shared is not None:
        shared.close_attempted = False
    request.node.stash[_BEFORE] = len(dev.validation_messages)
    yield
    new = dev.validation_messages[request.node.stash[_BEFORE] :]
    closed = _closed_by_the_test(request.node)
    if closed:
        pytest.fail(closed, pytrace=False)
    if new:
        pytest.fail(f"validation messages while the test was torn down: {new}", pytrace=False)


_BEFORE = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    """Fail the test itself (not its teardown) when the device got validation messages,
    or when the test closed it (also where it caught the failure that close raised)."""
    shared = item.config.stash.get(_SHARED, None)
    closed = _closed_by_the_test(item)  # by a fixture's setup
    if closed:
        pytest.fail(closed, pytrace=False)
    if shared is not None:
        shared.in_call = True
    try:
        result = yield
    except BaseException:
        _closed_by_the_test(item)  # the test failed already; the device is usable again
        raise
    finally:
        if shared is not None:
            shared.in_call = False
    closed = _closed_by_the_test(item)
    if closed:
        pytest.fail(closed, pytrace=False)
    dev = getattr(item, "funcargs", {}).get("vk_session_device")
    if isinstance(dev, Device) and _BEFORE in item.stash:
        messages = dev.validation_messages
        new, item.stash[_BEFORE] = messages[item.stash[_BEFORE] :], len(messages)
        if new:
            pytest.fail(f"validation messages during the test: {new}", pytrace=False)
    return result
