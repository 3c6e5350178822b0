"""The raw Vulkan binding, loaded lazily, and the two helpers every raw call goes through.

vkcore calls the C functions of the ``vulkan`` package (cffi, ABI mode) directly through
``lib`` and builds structs with ``ffi.new``. This avoids the binding's Python wrappers,
which cost 15-20 us per struct, free nested structs before the call, and lack
``vkGetPipelineCacheData``. Only the device-layer modules import this one.
"""

from __future__ import annotations

import threading
from typing import Any

from vkcore.errors import VulkanError

_lock = threading.Lock()
_loaded: tuple[Any, Any] | None = None


def api() -> tuple[Any, Any]:
    """``(ffi, lib)`` of the Vulkan loader; ``VulkanError`` if no loader is installed."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                try:
                    import vulkan  # noqa: PLC0415 - the import loads libvulkan.so.1
                except OSError as exc:
                    raise VulkanError(
                        "vkLoader",
                        0,
                        "no Vulkan loader found (libvulkan.so.1); install libvulkan1 "
                        f"and a driver such as mesa-vulkan-drivers ({exc})",
                    ) from None
                _loaded = (vulkan.ffi, vulkan.lib)
    return _loaded


def check(result: int, call: str) -> int:
    """Raise ``VulkanError`` for a negative VkResult; return the (non-error) code."""
    if result < 0:
        raise VulkanError(call, result)
    return result


def call(name: str, *args: Any) -> int:
    """Call ``lib.<name>(*args)`` and check its VkResult."""
    _, lib = api()
    return check(getattr(lib, name)(*args), name)


class Keep:
    """Keeps cffi objects alive until the Vulkan call that reads them has returned.

    A struct that points at another struct or a string only holds a raw pointer; the
    pointee must stay referenced. Every nested allocation goes through ``new`` here, so
    nothing is freed early, whatever the nesting.
    """

    def __init__(self) -> None:
        self.ffi, self.lib = api()
        self.objects: list[Any] = []

    def new(self, ctype: str, init: Any = None) -> Any:
        obj = self.ffi.new(ctype, init)
        self.objects.append(obj)
        return obj

    def struct(self, name: str, **fields: Any) -> Any:
        """A pointer to a new ``name`` struct; ``sType`` is filled in from the name."""
        stype = structure_type(name)
        if stype is not None:
            fields.setdefault("sType", stype)
        return self.new(name + "*", fields)

    def string(self, text: str) -> Any:
        return self.new("char[]", text.encode())

    def strings(self, texts: list[str]) -> Any:
        if not texts:
            return self.ffi.NULL
        return self.new("char*[]", [self.string(t) for t in texts])

    def array(self, ctype: str, items: list[Any]) -> Any:
        if not items:
            return self.ffi.NULL
        return self.new(ctype + "[]", items)

    def chain(self, *structs: Any) -> Any:
        """Link ``structs`` through ``pNext`` in order; return the first (or NULL)."""
        present = [s for s in structs if s is not None]
        for head, tail in zip(present, present[1:], strict=False):
            head.pNext = tail
        return present[0] if present else self.ffi.NULL


# Names whose digits the word split below gets wrong.
_STYPE_NAMES = {
    "VkPhysicalDevice8BitStorageFeatures": (
        "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES"
    ),
    "VkPhysicalDeviceShaderFloat16Int8Features": (
        "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES"
    ),
    "VkPhysicalDeviceVulkan11Properties": "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES",
    "VkPhysicalDeviceVulkan12Features": "VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES",
}
_STYPES: dict[str, int | None] = {}


def structure_type(name: str) -> int | None:
    """The VkStructureType of struct ``name`` (None for structs without ``sType``)."""
    if name not in _STYPES:
        import re

        import vulkan

        if not name.startswith("Vk"):
            _STYPES[name] = None
        else:
            words = re.findall(r"[A-Z][a-z]+|[A-Z0-9]+(?![a-z])|[0-9]+", name[2:])
            enum = _STYPE_NAMES.get(name, "VK_STRUCTURE_TYPE_" + "_".join(w.upper() for w in words))
            value = getattr(vulkan, enum, None)
            ffi, _ = api()
            fields = dict(ffi.typeof(name).fields)
            if value is None and "sType" in fields:
                raise KeyError(f"no VkStructureType known for {name}")
            _STYPES[name] = value
    return _STYPES[name]
