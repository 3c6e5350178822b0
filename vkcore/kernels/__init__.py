"""Kernel families, thin wrappers over :class:`vkcore.Program`: each module checks
arguments, picks a shader variant and grid, and records the Program's dispatches; none
calls Vulkan itself.

The modules that declare shader variants (:func:`vkcore.spirv.register_variants`) are
imported here, so ``import vkcore`` knows every variant a kernel can request (the wheel
ships them; ``tests/kernels/test_builtin_programs.py`` checks none is left out).
"""

from vkcore.kernels.matvec import activation, batch, program  # noqa: F401
from vkcore.kernels.quant import dequantize, rtn  # noqa: F401
from vkcore.kernels.sampling import sample, topk_steps  # noqa: F401
from vkcore.kernels.softmax import stages  # noqa: F401
