import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import vkcore
from vkcore import _vk


def test_devices_lists_lavapipe_fields():
    infos = vkcore.devices()
    assert infos, "no Vulkan device"
    for info in infos:
        assert info.name
        assert len(info.pipeline_cache_uuid) == 16
        assert len(info.device_uuid) == 16
        assert info.max_storage_buffer_range > 0
        assert info.subgroup_size >= 1


def test_expected_driver(device):
    """CI sets VKCORE_EXPECT_DRIVER=llvmpipe: a silent fallback to another driver fails here."""
    expected = os.environ.get("VKCORE_EXPECT_DRIVER")
    if expected is None:
        pytest.skip("VKCORE_EXPECT_DRIVER not set (CI sets it)")
    haystack = f"{device.info.name} {device.info.driver_name}".lower()
    assert expected.lower() in haystack, f"ran on {device.info.name} / {device.info.driver_name}"


def test_lavapipe_identity(device):
    info = device.info
    if "llvmpipe" not in info.name:
        pytest.skip("identity values below are lavapipe's")
    assert info.vendor_id == 0x10005
    assert info.device_type == "cpu"
    assert info.driver_id == 13
    assert info.subgroup_size == 8
    assert info.timestamp_period == 1.0
    assert info.shader_int8 and info.storage_buffer_8bit_access


def test_select_by_index_and_name():
    infos = vkcore.devices()
    with vkcore.Device(0, pipeline_cache=False) as dev:
        assert dev.info.index == 0
    word = infos[0].name.split()[0][:4]
    with vkcore.Device(word, pipeline_cache=False) as dev:
        assert word.lower() in dev.info.name.lower()


def test_unknown_device_lists_devices(monkeypatch, caplog):
    with pytest.raises(ValueError, match="no-such-gpu-xyz.*devices are: 0: "):
        vkcore.Device("no-such-gpu-xyz")
    with pytest.raises(ValueError, match="out of range"):
        vkcore.Device(99)
    monkeypatch.setenv("VKCORE_DEVICE", "no-such-gpu-xyz")  # from the environment: a warning
    with caplog.at_level(logging.WARNING, logger="vkcore"):
        vkcore.Device(validation=False).close()
    assert "no-such-gpu-xyz" in caplog.text and "devices are: 0: " in caplog.text


def test_close_is_idempotent_and_blocks_use():
    dev = vkcore.Device(pipeline_cache=False)
    t = vkcore.asarray(np.ones(4, np.float32), device=dev)
    dev.close()
    dev.close()
    assert dev.closed
    with pytest.raises(RuntimeError, match="closed"):
        vkcore.asarray(np.ones(4, np.float32), device=dev)
    with pytest.raises(RuntimeError, match="released"):
        t.numpy()


def test_context_manager_closes():
    with vkcore.Device(pipeline_cache=False) as dev:
        assert not dev.closed
    assert dev.closed


@pytest.mark.parametrize(
    "dtype", ["float32", "float16", "int8", "uint8", "int16", "uint16", "int32", "uint32"]
)
def test_asarray_roundtrip(device, rng, dtype):
    a = (rng.standard_normal((3, 5, 7)) * 50).astype(dtype)
    t = vkcore.asarray(a, device=device)
    assert t.shape == a.shape and t.dtype == a.dtype and t.device is device
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_asarray_edge_inputs(device):
    assert vkcore.asarray(np.zeros((0, 3), np.float32), device=device).numpy().shape == (0, 3)
    assert vkcore.asarray(np.float32(2.5), device=device).numpy() == np.float32(2.5)
    view = np.arange(20, dtype=np.float32)[::-3]
    np.testing.assert_array_equal(vkcore.asarray(view, device=device).numpy(), view)
    t = vkcore.asarray(np.arange(6, dtype=np.int32), device=device)
    assert vkcore.asarray(t, device=device) is t
    np.testing.assert_array_equal(t.reshape(2, 3).numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(TypeError, match="dtype"):
        vkcore.asarray(np.array(["a"]), device=device)
    with pytest.raises(TypeError):
        vkcore.asarray(None, device=device)


def test_asarray_64_bit_data_follows_the_kernels_rule(device, rng):
    """float64 and 64-bit integers (arrays, Python floats and ints, lists, byte-swapped,
    strided) are stored as float32, as every kernel converts them; a Tensor made from
    them gives the kernel's result bit for bit."""
    x64 = rng.standard_normal((5, 300)) * 30
    i64 = rng.integers(-(2**40), 2**40, size=(3, 50))
    inputs = (x64, x64.tolist(), x64.astype(">f8"), x64[:, ::-2], 2.5, [1.0, 2.0])
    inputs += (i64, i64.tolist(), i64.astype(np.uint64) >> 20, [1000, 0, 0, 0], 7)
    for data in inputs:
        t = vkcore.asarray(data, device=device)
        want = np.asarray(data).astype(np.float32)
        assert t.dtype == np.float32 and t.shape == want.shape
        np.testing.assert_array_equal(t.numpy(), want)
    for data in (x64, i64, [1000, 0, 0, 0]):
        from_tensor = vkcore.softmax(vkcore.asarray(data, device=device)).numpy()
        np.testing.assert_array_equal(from_tensor, vkcore.softmax(data, device=device))
    small = np.arange(-5, 5, dtype=np.int32)  # a Tensor holds 32-bit integers as they are
    assert vkcore.asarray(small, device=device).dtype == np.int32
    for bad, match in (
        (np.zeros(3, bool), "bool"),
        (np.zeros(3, np.complex128), "complex128"),
        (np.zeros(3, np.longdouble), "float128|longdouble"),
        ([[1.0], [2.0, 3.0]], "array-like"),
    ):
        with pytest.raises(TypeError, match=match):
            vkcore.asarray(bad, device=device)
    with pytest.raises(TypeError, match="float64"):
        vkcore.asarray(x64, device=device, dtype=np.float64)  # asked for, not converted
    with pytest.raises(TypeError, match="int64"):
        vkcore.asarray(i64, device=device, dtype=np.int64)
    assert vkcore.asarray([1, 2], device=device, dtype=np.int32).dtype == np.int32


@pytest.mark.parametrize(
    ("selector", "error", "match"),
    [
        (True, TypeError, "selector.*bool"),
        (False, TypeError, "selector.*bool"),
        (1.0, TypeError, "selector.*float"),
        (0.5, TypeError, "selector.*float"),
        (b"llvmpipe", TypeError, "selector.*bytes"),
        ([0], TypeError, "selector.*list"),
        (-1, ValueError, "selector.*0 or more"),
        (np.int64(-2), ValueError, "selector.*0 or more"),
        (10**6, ValueError, "out of range"),
        ("", ValueError, "selector"),
        ("   ", ValueError, "selector"),
        ("no-such-gpu-xyz", ValueError, "matches no device"),
    ],
)
def test_bad_selectors_say_what_is_wrong(selector, error, match):
    with pytest.raises(error, match=match):
        vkcore.Device(selector, pipeline_cache=False)


def test_numpy_integer_selector():
    with vkcore.Device(np.int64(0), pipeline_cache=False) as dev:
        assert dev.info.index == 0


def test_staging_path_roundtrip_and_kernel(monkeypatch, rng):
    monkeypatch.setenv("VKCORE_FORCE_STAGING", "1")
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        a = rng.standard_normal((7, 300)).astype(np.float32)
        t = vkcore.asarray(a, device=dev)
        assert t.buffer.mapped is None
        np.testing.assert_array_equal(t.numpy(), a)
        y = vkcore.softmax(a, device=dev)
        np.testing.assert_allclose(y, vkcore.reference.softmax(a), atol=1e-6)
        assert dev.validation_messages == []


def test_validation_errors_are_raised():
    """A deliberately invalid call (a zero-size buffer) is caught and raised by the next check."""
    with vkcore.Device(validation=True, pipeline_cache=False) as dev:
        keep = _vk.Keep()
        info = keep.struct("VkBufferCreateInfo", size=0, usage=0x20, sharingMode=0)
        out = dev.ffi.new("VkBuffer*")
        dev.lib.vkCreateBuffer(dev.handle, info, dev.ffi.NULL, out)
        with pytest.raises(vkcore.ValidationError, match="VUID-VkBufferCreateInfo-size-00912"):
            dev.check()
        if out[0] != dev.ffi.NULL:
            dev.lib.vkDestroyBuffer(dev.handle, out[0], dev.ffi.NULL)


def test_vulkan_error_names_call_and_result():
    err = vkcore.VulkanError("vkAllocateMemory", -2)
    assert isinstance(err, RuntimeError)
    assert "vkAllocateMemory" in str(err) and "VK_ERROR_OUT_OF_DEVICE_MEMORY" in str(err)


def test_default_device_is_shared():
    a = vkcore.default_device()
    assert vkcore.default_device() is a


def test_no_driver_gives_clear_error(tmp_path):
    env = dict(
        os.environ,
        VK_ICD_FILENAMES=str(tmp_path / "none.json"),
        VK_DRIVER_FILES=str(tmp_path / "none.json"),
    )
    code = (
        "import vkcore\ntry:\n    vkcore.Device()\n"
        "except vkcore.VulkanError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "ERR" in out.stdout and (
        "no Vulkan device" in out.stdout or "vkCreateInstance" in out.stdout
    )
