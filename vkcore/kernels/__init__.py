"""Kernel families, thin wrappers over :class:`vkcore.Program`: each module checks
arguments, picks a shader variant and grid, and records the Program's dispatches; none
calls Vulkan itself.

Every kernel module is imported here: each declares its shader variants when imported
(:func:`vkcore.spirv.register_variants`), so ``import vkcore`` knows all of them (the
wheel ships them; ``tests/test_builtin_programs.py`` checks none is left out).
"""

from . import (  # noqa: F401
    dequantize,
    matvec,
    matvec_act,
    matvec_batch,
    matvec_groups,
    matvec_program,
    qarrays,
    quant,
    softmax,
    softmax_stages,
)
