"""Device flags take a bool: ``Device(validation="no")`` turned validation on (any
non-empty string is true), and so did every other truthy value of either flag."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore.device import device as device_module

NOT_BOOLS = ["no", "yes", "false", "", 0, 1, 1.0, [], [False], object()]


@pytest.mark.parametrize("flag", ["validation", "pipeline_cache"])
@pytest.mark.parametrize("value", NOT_BOOLS, ids=[repr(v)[:12] for v in NOT_BOOLS])
def test_a_flag_that_is_not_a_bool_is_refused_before_anything_is_made(monkeypatch, flag, value):
    made = []
    monkeypatch.setattr(device_module.DeviceContext, "__init__", lambda *a, **k: made.append(1))
    with pytest.raises(TypeError, match=f"{flag} must be True, False or None, got"):
        vkcore.Device(**{flag: value})
    assert not made  # refused before a Vulkan instance was created


@pytest.mark.parametrize("value", [True, False, None, np.True_, np.False_])
def test_bools_and_numpy_bools_are_taken(value):
    assert device_module.check_flag(value, "validation") == (None if value is None else bool(value))


def test_validation_false_means_off():
    with vkcore.Device(validation=np.False_, pipeline_cache=False) as dev:
        assert dev.instance.validation is False


def test_a_cache_dir_that_is_not_a_path_is_refused():
    with pytest.raises(TypeError, match="cache_dir"):
        vkcore.Device(cache_dir=5, pipeline_cache=False)
