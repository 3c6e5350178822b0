"""DeviceInfo fields the placement, rounding and subgroup decisions read."""

import pytest

from vkcore.device import placement


def test_memory_properties_are_queried(device):
    info = device.info
    assert info.memory_heaps and info.memory_types
    for _flags, heap in info.memory_types:
        assert 0 <= heap < len(info.memory_heaps)
    assert any(flags & placement.DEVICE_LOCAL for flags, _ in info.memory_types)
    assert info.non_coherent_atom_size >= 1
    assert info.max_compute_shared_memory_size >= 16384  # the Vulkan minimum


def test_subgroup_and_float_control_properties(device):
    info = device.info
    assert info.subgroup_supported_stages and info.subgroup_supported_operations
    if info.subgroup_size_control:
        assert info.min_subgroup_size <= info.subgroup_size <= info.max_subgroup_size


def test_lavapipe_values(device):
    info = device.info
    if "llvmpipe" not in info.name:
        pytest.skip("the values below are lavapipe's")
    assert info.rounding_mode_rte_float32
    assert not info.denorm_preserve_float32 and not info.denorm_flush_to_zero_float32
    assert info.subgroup_arithmetic_in_compute
    assert not info.portability_subset
    assert len(info.memory_heaps) == 1 and info.memory_types[0][0] & 0x7 == 0x7


def test_info_json_says_what_is_exact_here(capsys):
    import json

    from vkcore.tools.cli import main

    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    exact = report["exactness"]
    chosen = report["chosen"]
    assert exact["rounding_mode_rte_requested"] == chosen["rounding_mode_rte_float32"]
    assert exact["quantize_q"] == "bit for bit"
    assert report["instance"]["enabled_extensions"] is not None
    assert set(report["memory"]["placement"]) == {"resident", "upload", "readback", "params"}


@pytest.mark.parametrize("selector", ["\u0661", "\uff10", "1\u0660"])
def test_only_ascii_digits_select_a_device_by_index(selector):
    """int() reads other scripts' digits too; a selector of them is a name, not an index."""
    import vkcore
    from vkcore.device.info import choose

    with pytest.raises(ValueError, match="matches no device name"):
        choose(vkcore.devices(), selector)
