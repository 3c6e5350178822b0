"""Kernel families, thin wrappers over :class:`vkcore.Program`: each module checks
arguments, picks a shader variant and grid, and records the Program's dispatches; none
calls Vulkan itself.

Every kernel module is imported by ``import vkcore`` (the ones below and what they
import), so it knows every variant a kernel can request: each module declares its own
with :func:`vkcore.spirv.register_variants`, and the wheel ships them
(``tests/kernels/test_builtin_programs.py`` checks no module is left out).
"""

from vkcore.kernels import tuning  # noqa: F401 - the tune file the kernels read
from vkcore.kernels.matvec import activation, batch, program  # noqa: F401
from vkcore.kernels.quant import dequantize, rtn  # noqa: F401
from vkcore.kernels.sampling import sample, topk_steps  # noqa: F401
from vkcore.kernels.softmax import stages  # noqa: F401
