"""Exceptions raised by vkcore.

Bad arguments raise the builtin ``TypeError``/``ValueError`` with a message naming
the argument and the expectation. Driver failures raise :class:`VulkanError`.
"""

from __future__ import annotations

import reprlib
from numbers import Integral, Real

# Values echoed in messages are cut to a readable size (a bad argument can be huge).
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 3, 80, 80, 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxfrozenset = _SHORT.maxdeque = 8
_SHORT.maxdict = _SHORT.maxarray = 8
MAX_SHOWN = 200


def shown(value: object) -> str:
    """``repr(value)`` for an error message, at most about :data:`MAX_SHOWN` characters
    (containers, strings and numbers are cut with ``...``); numbers (numpy's too) as
    ``str`` gives them, an int too long to print as its number of digits, an exception
    as its text."""
    if isinstance(value, Integral):
        number = int(value)
        if number.bit_length() > 600:  # (str() of an int over 4300 digits raises)
            digits = int(number.bit_length() * 0.30103) + 1
            return f"{'-' if number < 0 else ''}<an int of about {digits} digits>"
        return str(value)
    if isinstance(value, Real):
        return str(value)
    try:
        text = str(value) if isinstance(value, BaseException) else _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a repr that fails
        text = f"<{type(value).__name__} that has no printable repr>"
    return cut(text)


def cut(text: str) -> str:
    """``text`` cut to :data:`MAX_SHOWN` characters (the middle replaced by ``...``)."""
    if len(text) <= MAX_SHOWN:
        return text
    half = (MAX_SHOWN - 3) // 2
    return text[:half] + "..." + text[-half:]


class VulkanError(RuntimeError):
    """A Vulkan call failed (or no Vulkan loader/driver/device could be used).

    ``call`` names the Vulkan function, ``result`` is the raw VkResult code (0 when
    the failure did not come from a VkResult) and ``result_name`` its enum name.
    """

    def __init__(self, call: str, result: int = 0, detail: str = "") -> None:
        self.call = call
        self.result = result
        self.result_name = result_name(result) if result else ""
        text = call
        if result:
            text += f" failed with {self.result_name} ({result})"
        if detail:
            text += f": {detail}"
        super().__init__(text)


class ShaderCompileError(RuntimeError):
    """GLSL that the compiler rejected. ``messages`` are its error lines, each
    ``file:line: text`` (the user's file names, also for included files); ``log`` is the
    compiler's whole output and ``source`` names what was compiled."""

    def __init__(self, source: str, messages: list[str], log: str) -> None:
        self.source = source
        self.messages = list(messages)
        self.log = log
        detail = "\n".join(self.messages) or log.strip()
        super().__init__(f"GLSL compilation of {source} failed:\n{detail}")


class InvalidSpirvError(ValueError):
    """SPIR-V bytes (``Program(spirv=...)``) that failed validation before reaching the
    driver. ``validator`` is ``"spirv-val"`` or ``"vkcore's structural checks"``,
    ``messages`` what it said."""

    def __init__(self, what: str, validator: str, messages: list[str]) -> None:
        self.validator = validator
        self.messages = list(messages)
        detail = "\n".join(self.messages)
        super().__init__(f"{what}: {validator} rejected the SPIR-V module:\n{detail}")


class ValidationError(VulkanError):
    """The Khronos validation layer reported one or more errors."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = list(messages)
        first = messages[0] if messages else ""
        more = f" (and {len(messages) - 1} more)" if len(messages) > 1 else ""
        super().__init__("validation layer", 0, first + more)


# The one table of VkResult codes vkcore names (tests/base/test_vk_constants.py checks each
# against the binding).
RESULT_NAMES = {
    1: "VK_NOT_READY",
    2: "VK_TIMEOUT",
    3: "VK_EVENT_SET",
    4: "VK_EVENT_RESET",
    5: "VK_INCOMPLETE",
    -1: "VK_ERROR_OUT_OF_HOST_MEMORY",
    -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
    -3: "VK_ERROR_INITIALIZATION_FAILED",
    -4: "VK_ERROR_DEVICE_LOST",
    -5: "VK_ERROR_MEMORY_MAP_FAILED",
    -6: "VK_ERROR_LAYER_NOT_PRESENT",
    -7: "VK_ERROR_EXTENSION_NOT_PRESENT",
    -8: "VK_ERROR_FEATURE_NOT_PRESENT",
    -9: "VK_ERROR_INCOMPATIBLE_DRIVER",
    -10: "VK_ERROR_TOO_MANY_OBJECTS",
    -11: "VK_ERROR_FORMAT_NOT_SUPPORTED",
    -12: "VK_ERROR_FRAGMENTED_POOL",
    -13: "VK_ERROR_UNKNOWN",
    -1000069000: "VK_ERROR_OUT_OF_POOL_MEMORY",
    -1000072003: "VK_ERROR_INVALID_EXTERNAL_HANDLE",
    -1000161000: "VK_ERROR_FRAGMENTATION",
    -1000257000: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
    1000297000: "VK_PIPELINE_COMPILE_REQUIRED",
}


def result_name(result: int) -> str:
    """The enum name of a VkResult code (``VK_RESULT_<n>`` when unknown)."""
    return RESULT_NAMES.get(result, f"VK_RESULT_{result}")


def result_code(name: str) -> int:
    """The VkResult code of ``name`` (a KeyError for a name not in :data:`RESULT_NAMES`)."""
    return _CODES[name]


_CODES = {name: code for code, name in RESULT_NAMES.items()}
