"""vkcore: Vulkan compute kernels for Python (online softmax, RTN quantization, INT8 matvec)."""

from . import reference
from .device import Device, default_device, devices
from .errors import ValidationError, VulkanError
from .instance import DeviceInfo
from .memory import Tensor, asarray

__version__ = "0.1.0"

__all__ = [
    "Device",
    "DeviceInfo",
    "Tensor",
    "ValidationError",
    "VulkanError",
    "asarray",
    "default_device",
    "devices",
]

from .kernels.softmax import softmax  # noqa: E402

__all__ += ["softmax"]

from .kernels.matvec import F32Matrix, matvec, matvec_f32  # noqa: E402
from .kernels.quant import QuantizedTensor, dequantize, quantize  # noqa: E402
from .quant_report import QuantError, quant_error  # noqa: E402

__all__ += [
    "F32Matrix",
    "QuantError",
    "QuantizedTensor",
    "dequantize",
    "matvec",
    "matvec_f32",
    "quant_error",
    "quantize",
]
