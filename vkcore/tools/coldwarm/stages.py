"""What every probe process times, stage by stage (seconds).

``import``            ``import vkcore`` (numpy, the binding, the Vulkan loader)
``device``            ``vkcore.Device()``: instance, ICD, logical device, pipeline-cache load
``spirv``             SPIR-V obtained (compiled, read from the SPIR-V cache, or shipped)
``module``            ``vkCreateShaderModule``
``pipeline``          ``vkCreateComputePipelines``
``first_dispatch``    first submission, submit to fence (lavapipe JIT-compiles here)
``second_dispatch``   the same work again, for comparison
``first_result``      import + device + the first kernel call, to its result on the host
                      (the kernel's input is made before, outside every stage)
"""

from __future__ import annotations

STAGES = (
    "import",
    "device",
    "spirv",
    "module",
    "pipeline",
    "first_dispatch",
    "second_dispatch",
    "first_result",
)

# How the report and the plot name each stage.
STAGE_LABELS = {
    "import": "import vkcore",
    "device": "device creation",
    "spirv": "SPIR-V obtained",
    "module": "shader module",
    "pipeline": "vkCreateComputePipelines",
    "first_dispatch": "first dispatch",
    "second_dispatch": "second dispatch",
    "first_result": "total to first result",
}
