"""tests/support/devices/gpuinfo.py turns a Vulkan Hardware Database report into a recorded device
without inventing a value: encodings change, values do not, and what a report lacks is
left out."""

from __future__ import annotations

import json

import pytest
from devices import device_info, gpuinfo, load


def _report(**extra):
    """The smallest report the converter reads: an old one, with no core11/12/13 sections
    (their values then come from the extension structures, where present)."""
    report = {
        "properties": {
            "deviceName": "Example GPU",
            "vendorID": 0x5143,
            "deviceID": 7,
            "deviceTypeText": "INTEGRATED_GPU",
            "apiVersionText": "1.1.128",
            "driverVersion": 2149490688,
            "limits": {
                "maxComputeWorkGroupCount": [65535, 65535, 65535],
                "maxComputeWorkGroupSize": [1024, 1024, 64],
                "maxComputeWorkGroupInvocations": 1024,
                "maxComputeSharedMemorySize": 32768,
                "maxStorageBufferRange": "0x8000000",
                "minStorageBufferOffsetAlignment": "0x40",
                "nonCoherentAtomSize": "0x1",
                "timestampComputeAndGraphics": 1,
                "timestampPeriod": 52,
            },
        },
        "memory": {
            "memoryHeaps": [{"flags": 1, "size": "0x3b926f000"}],
            "memoryTypes": [{"heapIndex": 0, "propertyFlags": 15}],
        },
        "features": {"shaderInt16": 1, "shaderInt64": 0},
        "queues": [{"queueFlags": 0x83, "queueCount": 3, "timestampValidBits": 48}],
        "extended": {
            "deviceproperties2": [
                {
                    "extension": "VK_KHR_driver_properties",
                    "name": "driverID",
                    "value": "MESA_TURNIP",
                },
                {
                    "extension": "VK_KHR_maintenance3",
                    "name": "maxMemoryAllocationSize",
                    "value": "1073741824",
                },
            ],
            "devicefeatures2": [
                {
                    "extension": "VK_KHR_8bit_storage",
                    "name": "storageBuffer8BitAccess",
                    "supported": True,
                },
            ],
        },
    }
    report.update(extra)
    return report


def test_encodings_change_and_values_do_not():
    r = gpuinfo.record(_report(), "a test report")
    assert r["source"] == "a test report" and r["device_name"] == "Example GPU"
    assert r["memory_heaps"] == [{"size": 0x3B926F000, "flags": ["DEVICE_LOCAL"]}]
    assert r["memory_types"] == [
        {"heap_index": 0, "flags": ["DEVICE_LOCAL", "HOST_VISIBLE", "HOST_COHERENT", "HOST_CACHED"]}
    ]
    lim = r["limits"]
    assert lim["maxStorageBufferRange"] == 1 << 27 and lim["minStorageBufferOffsetAlignment"] == 64
    assert lim["nonCoherentAtomSize"] == 1 and lim["timestampComputeAndGraphics"] is True
    assert lim["timestampPeriod"] == 52.0 and lim["maxMemoryAllocationSize"] == 1 << 30
    # A bit without a Vulkan name here stays as its hex value, never dropped or renamed.
    assert r["queue_families"] == [
        {"flags": ["GRAPHICS", "COMPUTE", "0x80"], "count": 3, "timestamp_valid_bits": 48}
    ]
    assert r["driver_id"] == "DRIVER_ID_MESA_TURNIP"  # an old report's enum name
    assert r["features"] == {
        "shaderInt16": True,
        "shaderInt64": False,
        "storageBuffer8BitAccess": True,
    }


def test_what_a_report_lacks_is_left_out():
    r = gpuinfo.record(_report(), "a test report")
    for key in (
        "subgroup",
        "subgroup_size_control",
        "float_controls",
        "integer_dot_product",
        "external_memory_host",
        "device_extensions",
        "uniform_texel_buffer_formats",
        "pipeline_cache_uuid",
        "device_uuid",
        "driver_name",
    ):
        assert key not in r, f"{key} was not in the report"
    info = device_info(json.loads(json.dumps(r)))  # unknown fields are 0, False or empty
    assert info.subgroup_size == 0 and info.pipeline_cache_uuid == bytes(16)
    assert info.driver_id == 18 and info.texel_formats == frozenset()
    assert info.max_memory_allocation_size == 1 << 30


def test_uuids_read_as_vulkaninfo_prints_them():
    octets = list(range(16))
    report = _report()
    report["properties"]["pipelineCacheUUID"] = octets
    assert (
        gpuinfo.record(report, "x")["pipeline_cache_uuid"] == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    )


@pytest.mark.parametrize(
    "name", ["nvidia_a100_datacenter", "qualcomm_adreno750_android", "arm_mali_g715_android"]
)
def test_the_converted_records_name_their_report(name):
    record = load(name)
    assert "vulkan.gpuinfo.org" in record["source"] and "reports/" in record["source"]
    assert "converted by tests/support/devices/gpuinfo.py" in record["source"]


def _damaged(change):
    report = _report()
    change(report)
    return report


DAMAGES = {
    "no memory": lambda r: r.pop("memory"),
    "no properties": lambda r: r.pop("properties"),
    "heap size not a number": lambda r: r["memory"]["memoryHeaps"][0].update(size="big"),
    "negative flags": lambda r: r["memory"]["memoryTypes"][0].update(propertyFlags=-1),
    "limit not a number": lambda r: r["properties"]["limits"].update(maxStorageBufferRange="x"),
    "queues not a list": lambda r: r.update(queues=None),
    "short uuid": lambda r: r["properties"].update(pipelineCacheUUID=[1, 2]),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_report_is_refused_with_what_is_wrong(damage):
    with pytest.raises(gpuinfo.ReportError, match="not a usable report"):
        gpuinfo.record(_damaged(DAMAGES[damage]), "x")


@pytest.mark.parametrize("content", ["", "[]", "{}", '{"properties": 1}', "\xff"])
def test_the_converter_command_says_which_file_is_not_a_report(tmp_path, capsys, content):
    path = tmp_path / "report.json"
    path.write_text(content, encoding="latin-1")
    assert gpuinfo.main([str(path), "--source", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuinfo: {path}: ") and err.count("\n") == 1


def test_numbers_stored_as_strings_become_integers():
    report = _report()
    report["memory"]["memoryTypes"][0]["heapIndex"] = "0"
    report["queues"][0].update(queueCount="3", timestampValidBits="0x30")
    r = gpuinfo.record(report, "x")
    assert r["memory_types"][0]["heap_index"] == 0
    assert (
        r["queue_families"][0]["count"] == 3
        and r["queue_families"][0]["timestamp_valid_bits"] == 48
    )
