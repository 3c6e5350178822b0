"""vkcore: Vulkan compute kernels for Python (online softmax, RTN quantization, INT8 matvec).

numpy in, numpy out; :class:`Tensor` in, Tensor out for data that stays on the device.
"""

from . import reference
from .device import Device, default_device, devices
from .device_info import DeviceInfo
from .errors import ShaderCompileError, ValidationError, VulkanError
from .kernels.dequantize import dequantize
from .kernels.f32matrix import F32Matrix
from .kernels.matvec import matvec, matvec_f32
from .kernels.qtensor import QuantizedTensor
from .kernels.quant import quantize
from .kernels.sample import sample
from .kernels.softmax import log_softmax, softmax
from .kernels.topk import softmax_topk, topk
from .program import Program
from .quant_report import QuantError, quant_error
from .sequence import Sequence, sequence
from .tensor import Tensor, asarray

__version__ = "0.1.0"

__all__ = [
    "Device",
    "DeviceInfo",
    "F32Matrix",
    "QuantError",
    "Program",
    "QuantizedTensor",
    "Sequence",
    "ShaderCompileError",
    "Tensor",
    "ValidationError",
    "VulkanError",
    "asarray",
    "default_device",
    "dequantize",
    "devices",
    "log_softmax",
    "matvec",
    "matvec_f32",
    "quant_error",
    "quantize",
    "reference",
    "sample",
    "sequence",
    "softmax",
    "softmax_topk",
    "topk",
]
