"""VkInstance creation, the validation-layer messenger, physical-device enumeration, and
the instance and device extensions vkcore enables (what a device offers: ``device_info``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from vkcore import _vk
from vkcore._vk import constants as vk
from vkcore.errors import RESULT_NAMES, ValidationError, VulkanError, result_code

log = logging.getLogger("vkcore")

NO_DRIVER_HINT = (
    "no Vulkan driver found: install one (Debian: mesa-vulkan-drivers for lavapipe) "
    "or check VK_ICD_FILENAMES / VK_DRIVER_FILES"
)
_VK_ERROR_INCOMPATIBLE_DRIVER = result_code("VK_ERROR_INCOMPATIBLE_DRIVER")

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
VALIDATION_FEATURES = "VK_EXT_validation_features"
DEBUG_UTILS = "VK_EXT_debug_utils"
# MoltenVK (and any other non-conformant "portability" driver) is only listed by a loader
# when the instance enables this extension with this flag.
PORTABILITY_ENUMERATION = "VK_KHR_portability_enumeration"
ENUMERATE_PORTABILITY_BIT = vk.VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
# Required on a device that reports it (VUID-VkDeviceCreateInfo-pProperties-04451).
PORTABILITY_SUBSET = "VK_KHR_portability_subset"
_V12 = 1 << 22 | 2 << 12
_V13 = 1 << 22 | 3 << 12


def instance_extensions(
    available: Iterable[str], validation: bool, layer_offers: Iterable[str] = ()
) -> tuple[list[str], int]:
    """The instance extensions to enable and the VkInstanceCreateInfo flags, from what the
    loader offers: debug utils with validation (and validation features, for
    synchronization validation, where the layer offers them: ``layer_offers``),
    portability enumeration (with its flag) wherever the loader offers it."""
    names = [DEBUG_UTILS] if validation else []
    if validation and VALIDATION_FEATURES in set(layer_offers):
        names.append(VALIDATION_FEATURES)
    flags = 0
    if PORTABILITY_ENUMERATION in set(available):
        names.append(PORTABILITY_ENUMERATION)
        flags |= ENUMERATE_PORTABILITY_BIT
    return names, flags


def enabled_device_extensions(available: Iterable[str], api_version: int) -> list[str]:
    """The device extensions vkcore enables, from those the device reports: what its API
    version lacks in core (8-bit storage and int8 before 1.2; creation feedback and
    integer dot product before 1.3), host-memory import, and the portability subset
    wherever it is reported."""
    offered = set(available)
    wanted: list[str] = []
    if api_version < _V12:
        wanted += [
            "VK_KHR_8bit_storage",
            "VK_KHR_shader_float16_int8",
            "VK_KHR_storage_buffer_storage_class",
            "VK_KHR_shader_float_controls",  # the RoundingModeRTE capability (kernels.variants)
        ]
    if api_version < _V13:
        wanted += ["VK_EXT_pipeline_creation_feedback", "VK_KHR_shader_integer_dot_product"]
    wanted += ["VK_EXT_external_memory_host", PORTABILITY_SUBSET]
    return [e for e in wanted if e in offered]


class Instance:
    """A VkInstance, with the validation layer and a messenger when asked for.

    The messenger's callback only records messages; :meth:`check` raises them as a
    :class:`ValidationError` from ordinary Python code (never from inside the callback).
    """

    def __init__(self, validation: bool = False) -> None:
        self.ffi, self.lib = _vk.api()
        self.validation = validation
        self.messages: list[str] = []
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self._callback: Any = None
        self.messenger: Any = None
        self.handle: Any = None
        self.enabled_extensions: list[str] = []  # as passed to vkCreateInstance
        self.create_flags = 0
        self._create()

    def _available_extensions(self) -> set[str]:
        """Instance extensions the loader and its implicit layers offer."""
        return self._layer_extensions(None)

    def _layer_extensions(self, layer: str | None) -> set[str]:
        """Instance extensions ``layer`` itself provides (None: the loader and its
        implicit layers)."""
        ffi, lib = self.ffi, self.lib
        call = "vkEnumerateInstanceExtensionProperties"
        name = ffi.NULL if layer is None else ffi.new("char[]", layer.encode())
        count = ffi.new("uint32_t*")
        _vk.check(lib.vkEnumerateInstanceExtensionProperties(name, count, ffi.NULL), call)
        props = ffi.new("VkExtensionProperties[]", count[0])
        _vk.check(lib.vkEnumerateInstanceExtensionProperties(name, count, props), call)
        return {ffi.string(props[i].extensionName).decode() for i in range(count[0])}

    def _sync_validation(self, keep: _vk.Keep, extensions: list[str]) -> Any:
        """VkValidationFeaturesEXT asking the layer to check synchronization too (a
        missing barrier between dependent dispatches is then an error); None where the
        layer's extension is not among ``extensions``."""
        if VALIDATION_FEATURES not in extensions:
            return None
        enables = keep.new(
            "VkValidationFeatureEnableEXT[1]",
            [vk.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT],
        )
        return keep.struct(
            "VkValidationFeaturesEXT",
            enabledValidationFeatureCount=1,
            pEnabledValidationFeatures=enables,
        )

    def _available_layers(self) -> set[str]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("uint32_t*")
        _vk.check(
            lib.vkEnumerateInstanceLayerProperties(count, ffi.NULL),
            "vkEnumerateInstanceLayerProperties",
        )
        props = ffi.new("VkLayerProperties[]", count[0])
        _vk.check(
            lib.vkEnumerateInstanceLayerProperties(count, props),
            "vkEnumerateInstanceLayerProperties",
        )
        return {ffi.string(props[i].layerName).decode() for i in range(count[0])}

    def _create(self) -> None:
        ffi, lib = self.ffi, self.lib
        keep = _vk.Keep()
        layers: list[str] = []
        layer_offers: set[str] = set()
        if self.validation:
            if VALIDATION_LAYER not in self._available_layers():
                raise VulkanError(
                    "vkCreateInstance",
                    0,
                    f"{VALIDATION_LAYER} is not installed (Debian: vulkan-validationlayers)",
                )
            layers.append(VALIDATION_LAYER)
            layer_offers = self._layer_extensions(VALIDATION_LAYER)
        extensions, flags = instance_extensions(
            self._available_extensions(), self.validation, layer_offers
        )
        messenger_info = features = None
        if self.validation:
            self._callback = ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", self._on_message)
            messenger_info = keep.struct(
                "VkDebugUtilsMessengerCreateInfoEXT",
                messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                pfnUserCallback=self._callback,
            )
            features = self._sync_validation(keep, extensions)
        app = keep.struct(
            "VkApplicationInfo",
            pApplicationName=keep.string("vkcore"),
            applicationVersion=1,
            pEngineName=keep.string("vkcore"),
            engineVersion=1,
            apiVersion=self._api_version(),
        )
        info = keep.struct(
            "VkInstanceCreateInfo",
            pNext=keep.chain(features, messenger_info),  # the messenger's pNext stays NULL
            flags=flags,
            pApplicationInfo=app,
            enabledLayerCount=len(layers),
            ppEnabledLayerNames=keep.strings(layers),
            enabledExtensionCount=len(extensions),
            ppEnabledExtensionNames=keep.strings(extensions),
        )
        handle = ffi.new("VkInstance*")
        result = lib.vkCreateInstance(info, ffi.NULL, handle)
        if result == _VK_ERROR_INCOMPATIBLE_DRIVER:  # what the loader says when it finds no driver
            raise VulkanError("vkCreateInstance", result, NO_DRIVER_HINT)
        _vk.check(result, "vkCreateInstance")
        self.handle = handle[0]
        self.enabled_extensions, self.create_flags = extensions, flags
        if messenger_info is not None:
            create = self.proc(
                "vkCreateDebugUtilsMessengerEXT", "PFN_vkCreateDebugUtilsMessengerEXT"
            )
            out = ffi.new("VkDebugUtilsMessengerEXT*")
            _vk.check(
                create(self.handle, messenger_info, ffi.NULL, out), "vkCreateDebugUtilsMessengerEXT"
            )
            self.messenger = out[0]

    @property
    def sync_validation(self) -> bool:
        """Whether the layer also checks synchronization."""
        return VALIDATION_FEATURES in self.enabled_extensions

    def _api_version(self) -> int:
        """The newest API version up to 1.3 that the loader offers (at least 1.1)."""
        ffi, lib = self.ffi, self.lib
        out = ffi.new("uint32_t*")
        try:
            _vk.check(lib.vkEnumerateInstanceVersion(out), "vkEnumerateInstanceVersion")
            loader = out[0]
        except AttributeError:
            loader = 1 << 22
        wanted = (1 << 22) | (3 << 12)
        if loader < (1 << 22) | (1 << 12):
            raise VulkanError("vkEnumerateInstanceVersion", 0, "vkcore needs a Vulkan 1.1 loader")
        return min(loader, wanted)

    def proc(self, name: str, pfn_type: str) -> Any:
        """An instance-level extension function, cast to its PFN type."""
        ffi, lib = self.ffi, self.lib
        ptr = lib.vkGetInstanceProcAddr(self.handle, name.encode())
        if ptr == ffi.NULL:
            raise VulkanError("vkGetInstanceProcAddr", 0, f"{name} is not available")
        return ffi.cast(pfn_type, ptr)

    def _on_message(self, severity: int, types: int, data: Any, user: Any) -> int:
        try:
            text = self.ffi.string(data.pMessage).decode(errors="replace") if data.pMessage else ""
            error = severity >= vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
            if error and _is_result_echo(types, text):
                # The driver restating a failed VkResult that the caller already raised
                # as a VulkanError: recorded, but not raised again at the next call.
                error = False
            with self._lock:
                self.messages.append(text)
                if error:
                    self._errors.append(text)
            # Loader and driver chatter (general type) is only logged at debug level: a
            # failure it describes reaches the caller as an exception, in one line.
            validation = bool(types & vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT)
            level = logging.WARNING if validation else logging.DEBUG
            log.log(level, "validation %s: %s", "error" if error else "warning", text)
        except Exception:  # noqa: BLE001 - nothing may escape into C
            pass
        return 0

    def check(self) -> None:
        """Raise the validation errors recorded since the last check, if any."""
        if not self._errors:
            return
        with self._lock:
            errors, self._errors = self._errors, []
        raise ValidationError(errors)

    def physical_devices(self) -> list[Any]:
        ffi, lib = self.ffi, self.lib
        count = ffi.new("uint32_t*")
        _vk.check(
            lib.vkEnumeratePhysicalDevices(self.handle, count, ffi.NULL),
            "vkEnumeratePhysicalDevices",
        )
        handles = ffi.new("VkPhysicalDevice[]", count[0])
        _vk.check(
            lib.vkEnumeratePhysicalDevices(self.handle, count, handles),
            "vkEnumeratePhysicalDevices",
        )
        return [handles[i] for i in range(count[0])]

    def destroy(self) -> None:
        if self.handle is None:
            return
        if self.messenger is not None:
            destroy = self.proc(
                "vkDestroyDebugUtilsMessengerEXT", "PFN_vkDestroyDebugUtilsMessengerEXT"
            )
            destroy(self.handle, self.messenger, self.ffi.NULL)
            self.messenger = None
        self.lib.vkDestroyInstance(self.handle, self.ffi.NULL)
        self.handle = None


def _is_result_echo(types: int, text: str) -> bool:
    """True for a driver's general (non-validation) message naming a VK_ERROR_ result.

    Mesa reports every error it returns (e.g. VK_ERROR_OUT_OF_DEVICE_MEMORY from
    vkAllocateMemory) through the messenger; the returned code already raises.
    """
    if types & vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT:
        return False
    return any(name in text for code, name in RESULT_NAMES.items() if code < 0)
