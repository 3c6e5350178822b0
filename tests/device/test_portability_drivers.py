"""MoltenVK and other portability drivers: the instance enables
VK_KHR_portability_enumeration with its flag wherever the loader offers it (else such
devices are not even listed), and a device that reports VK_KHR_portability_subset gets
it enabled (the spec requires it). Both choices are pure functions of what is offered,
tested on recorded real devices and on the loader here."""

from __future__ import annotations

import devices
import pytest

import vkcore
from vkcore import _vk
from vkcore.device import instance as inst


def api_version(text: str) -> int:
    major, minor, patch = (int(p) for p in text.split("."))
    return major << 22 | minor << 12 | patch


# ------------------------------------------------------------------ instance, pure
@pytest.mark.parametrize("validation", [False, True])
def test_portability_enumeration_and_its_flag_where_the_loader_offers_it(validation):
    offered = {"VK_KHR_surface", inst.PORTABILITY_ENUMERATION, inst.DEBUG_UTILS}
    names, flags = inst.instance_extensions(offered, validation)
    assert inst.PORTABILITY_ENUMERATION in names
    assert flags & inst.ENUMERATE_PORTABILITY_BIT and inst.ENUMERATE_PORTABILITY_BIT == 0x1
    assert (inst.DEBUG_UTILS in names) == validation
    assert "VK_KHR_surface" not in names  # nothing vkcore does not use


@pytest.mark.parametrize("validation", [False, True])
def test_no_portability_flag_without_the_extension(validation):
    names, flags = inst.instance_extensions({"VK_KHR_surface", inst.DEBUG_UTILS}, validation)
    assert inst.PORTABILITY_ENUMERATION not in names and flags == 0
    assert names == ([inst.DEBUG_UTILS] if validation else [])


@pytest.mark.parametrize("validation", [False, True])
def test_validation_features_only_with_validation_where_the_layer_offers_them(validation):
    loader = {inst.DEBUG_UTILS}
    names, _ = inst.instance_extensions(loader, validation, {inst.VALIDATION_FEATURES})
    assert (inst.VALIDATION_FEATURES in names) == validation
    names, _ = inst.instance_extensions(loader, validation, set())
    assert inst.VALIDATION_FEATURES not in names


# ------------------------------------------------------------ instance, create info
class _Captured(Exception):
    pass


class _CapturingLib:
    """The binding's lib, except that vkCreateInstance records its create info and stops."""

    def __init__(self, ffi, lib):
        self._ffi, self._lib, self.seen = ffi, lib, {}

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def vkCreateInstance(self, info, allocator, out):
        ffi = self._ffi
        self.seen["flags"] = info.flags
        self.seen["extensions"] = [
            ffi.string(info.ppEnabledExtensionNames[i]).decode()
            for i in range(info.enabledExtensionCount)
        ]
        raise _Captured


def _capture(monkeypatch, offered):
    ffi, lib = _vk.api()
    fake = _CapturingLib(ffi, lib)
    monkeypatch.setattr(_vk, "api", lambda: (ffi, fake))
    monkeypatch.setattr(inst.Instance, "_available_extensions", lambda self: set(offered))
    with pytest.raises(_Captured):
        inst.Instance(validation=False)
    return fake.seen


def test_the_create_info_carries_the_flag_and_the_extension(monkeypatch):
    seen = _capture(monkeypatch, {inst.PORTABILITY_ENUMERATION, "VK_KHR_surface"})
    assert seen["flags"] & inst.ENUMERATE_PORTABILITY_BIT
    assert seen["extensions"] == [inst.PORTABILITY_ENUMERATION]


def test_a_loader_without_it_gets_neither(monkeypatch):
    seen = _capture(monkeypatch, {"VK_KHR_surface"})
    assert seen == {"flags": 0, "extensions": []}


def test_the_real_instance_records_what_it_enabled(device):
    """On this loader: exactly the pure function's choice, under the validation layer (the
    device fixture fails the test on any message)."""
    instance = device.instance
    offers = instance._layer_extensions(inst.VALIDATION_LAYER) if instance.validation else ()
    names, flags = inst.instance_extensions(
        instance._available_extensions(), instance.validation, offers
    )
    assert device.instance.enabled_extensions == names
    assert device.instance.create_flags == flags
    assert device.enabled_extensions == inst.enabled_device_extensions(
        device.info.extensions, device.info.api_version
    )
    assert set(device.enabled_extensions) <= device.info.extensions


def test_an_instance_without_portability_still_lists_this_device(monkeypatch):
    monkeypatch.setattr(
        inst.Instance,
        "_available_extensions",
        lambda self: set(),  # an older loader: no portability enumeration offered
    )
    with vkcore.Device(validation=True) as dev:
        features = [inst.VALIDATION_FEATURES] if dev.instance.sync_validation else []
        assert dev.instance.enabled_extensions == [inst.DEBUG_UTILS, *features]
        assert dev.instance.create_flags == 0
        assert dev.validation_messages == []


# --------------------------------------------------------------------- device, pure
def test_a_recorded_moltenvk_device_gets_the_portability_subset():
    record = devices.load("apple_m2_moltenvk")
    offered = set(record["device_extensions"])
    assert inst.PORTABILITY_SUBSET in offered  # the report says so
    chosen = inst.enabled_device_extensions(offered, api_version(record["api_version"]))
    assert inst.PORTABILITY_SUBSET in chosen


@pytest.mark.parametrize("name", devices.NAMES)
def test_every_recorded_device_enables_only_what_it_reports(name):
    record = devices.load(name)
    offered = set(record["device_extensions"])
    version = api_version(record["api_version"])
    chosen = inst.enabled_device_extensions(offered, version)
    assert set(chosen) <= offered and len(chosen) == len(set(chosen))
    assert (inst.PORTABILITY_SUBSET in chosen) == (inst.PORTABILITY_SUBSET in offered)
    if version >= api_version("1.3.0"):  # core in 1.3: never enabled as an extension
        assert "VK_KHR_shader_integer_dot_product" not in chosen


def test_extensions_promoted_to_core_are_asked_for_only_below_that_version():
    offered = {
        "VK_KHR_8bit_storage",
        "VK_KHR_shader_float16_int8",
        "VK_KHR_storage_buffer_storage_class",
        "VK_EXT_pipeline_creation_feedback",
        "VK_KHR_shader_integer_dot_product",
        "VK_EXT_external_memory_host",
    }
    v11 = inst.enabled_device_extensions(offered, api_version("1.1.0"))
    v12 = inst.enabled_device_extensions(offered, api_version("1.2.0"))
    v13 = inst.enabled_device_extensions(offered, api_version("1.3.0"))
    assert set(v11) == offered
    assert set(v12) == offered - {
        "VK_KHR_8bit_storage",
        "VK_KHR_shader_float16_int8",
        "VK_KHR_storage_buffer_storage_class",
    }
    assert v13 == ["VK_EXT_external_memory_host"]
    assert inst.enabled_device_extensions(set(), api_version("1.1.0")) == []
