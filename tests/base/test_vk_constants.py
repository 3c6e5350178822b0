"""The one table of Vulkan constants (vkcore/_vk/constants.py) and of VkResult codes
(vkcore.errors.RESULT_NAMES): each value is the binding's, and no module copies one."""

from __future__ import annotations

import ast
from pathlib import Path

import vulkan

from vkcore import errors
from vkcore._vk import constants

PACKAGE = Path(constants.__file__).resolve().parents[1]
# Names of newer Vulkan versions the binding (1.3.275) does not export.
NOT_IN_BINDING = {"VK_MEMORY_PROPERTY_PROTECTED_BIT", "VK_MEMORY_HEAP_MULTI_INSTANCE_BIT"}
# The binding exports these extension error codes without their minus sign (the spec's
# values are negative, as every error code is).
SIGN_DROPPED_IN_BINDING = {
    "VK_ERROR_OUT_OF_POOL_MEMORY",
    "VK_ERROR_INVALID_EXTERNAL_HANDLE",
    "VK_ERROR_FRAGMENTATION",
    "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
}


def table() -> dict[str, int]:
    return {k: v for k, v in vars(constants).items() if k.startswith("VK_")}


def test_every_constant_is_the_bindings_value():
    wrong = {
        name: (value, getattr(vulkan, name, None))
        for name, value in table().items()
        if name not in NOT_IN_BINDING and getattr(vulkan, name, None) != value
    }
    assert not wrong, f"values that differ from the binding's (ours, its): {wrong}"
    assert {n for n in table() if not hasattr(vulkan, n)} == NOT_IN_BINDING


def test_every_result_code_is_the_bindings_value():
    wrong = {
        name: code
        for code, name in errors.RESULT_NAMES.items()
        if getattr(vulkan, name) != (-code if name in SIGN_DROPPED_IN_BINDING else code)
    }
    assert not wrong
    assert all(code < 0 for code, name in errors.RESULT_NAMES.items() if "_ERROR_" in name)
    assert errors.result_code("VK_TIMEOUT") == vulkan.VK_TIMEOUT
    assert errors.result_name(-4) == "VK_ERROR_DEVICE_LOST"


def hex_literals_assigned(path: Path, root: Path = PACKAGE) -> list[str]:
    """Module-level names bound to an integer written in hex: a hand-copied Vulkan value."""
    text = path.read_text()
    found = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            for value in ast.walk(node.value) if node.value else ():
                if isinstance(value, ast.Constant) and isinstance(value.value, int):
                    segment = ast.get_source_segment(text, value) or ""
                    if segment.lower().startswith("0x"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {segment}")
    return found


def test_no_device_module_copies_a_vulkan_value():
    """The device layer, compute API and kernels take Vulkan values from the table only."""
    files = [
        p
        for layer in ("device", "compute", "kernels", "_vk")
        for p in sorted((PACKAGE / layer).rglob("*.py"))
        if p.name != "constants.py"
    ]
    copied = [hit for p in files for hit in hex_literals_assigned(p)]
    assert not copied, "hex values outside vkcore/_vk/constants.py:\n" + "\n".join(copied)


def test_the_copy_check_finds_a_copy(tmp_path):
    fake = PACKAGE / "device" / "placement.py"
    assert hex_literals_assigned(fake) == []
    bad = tmp_path / "m.py"
    bad.write_text("X = 0x20\nY = (1, 0x4)\nZ = 32\n")
    assert len(hex_literals_assigned(bad, tmp_path)) == 2
