"""The device layer: the only code that calls Vulkan (docs/architecture.md).

Bottom up: the instance and physical-device info (:mod:`~vkcore.device.instance`,
:mod:`~vkcore.device.info`), the placement and queue choices as pure functions of the
device's properties (:mod:`~vkcore.device.placement`, :mod:`~vkcore.device.logical`),
what every device object needs (:mod:`~vkcore.device.context`), then memory
(:mod:`vkcore.device.memory`), pipelines (:mod:`vkcore.device.pipelines`) and submission
(:mod:`vkcore.device.submit`), and the :class:`Device` facade that owns them.
"""

from vkcore.device.device import Device, default_device, devices, resolve
from vkcore.device.info import DeviceInfo

__all__ = ["Device", "DeviceInfo", "default_device", "devices", "resolve"]
