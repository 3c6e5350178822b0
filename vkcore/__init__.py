"""vkcore: GPU compute kernels from Python through Vulkan.

The kernels: attention (over arrays or a KVCache); softmax and log_softmax; RTN quantize
and dequantize (groups, packed 4-bit); matvec of quantized weights and matvec_f32; topk,
softmax_topk and sample. Your own
shaders run as :class:`Program` objects, several calls as one :func:`sequence`. numpy in, numpy
out; :class:`Tensor` in, Tensor out for data that stays on the device. The public names
are the ones below (docs/architecture.md has the layers behind them).
"""

from vkcore import reference
from vkcore.compute.program import Program
from vkcore.compute.sequence import Sequence, sequence
from vkcore.compute.tensor import Tensor, asarray
from vkcore.device.device import Device, default_device, devices
from vkcore.device.info import DeviceInfo
from vkcore.errors import InvalidSpirvError, ShaderCompileError, ValidationError, VulkanError
from vkcore.kernels.attention.attention import attention
from vkcore.kernels.attention.kvcache import KVCache
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.matvec.matvec import matvec, matvec_f32
from vkcore.kernels.quant.dequantize import dequantize
from vkcore.kernels.quant.qtensor import QuantizedTensor
from vkcore.kernels.quant.report import QuantError, quant_error
from vkcore.kernels.quant.rtn import quantize
from vkcore.kernels.sampling.sample import sample
from vkcore.kernels.sampling.topk import softmax_topk, topk
from vkcore.kernels.softmax.softmax import log_softmax, softmax

__version__ = "0.1.0"

__all__ = [
    "Device",
    "DeviceInfo",
    "F32Matrix",
    "InvalidSpirvError",
    "KVCache",
    "QuantError",
    "Program",
    "QuantizedTensor",
    "Sequence",
    "ShaderCompileError",
    "Tensor",
    "ValidationError",
    "VulkanError",
    "asarray",
    "attention",
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
