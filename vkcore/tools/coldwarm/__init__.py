"""Cold versus warm pipeline creation, measured honestly in fresh processes.

The only way to be cold is a new process: nothing in memory, nothing JIT-compiled. So
:func:`measure` (the parent, :mod:`.harness`) starts one Python process per sample; each
runs :func:`probe` (the child, :mod:`.child`) on one kernel and prints its stage timings
as JSON. The stages are listed in :mod:`.stages`, the cache conditions in
:mod:`.conditions`; :mod:`.cases` holds the built-in kernels and :mod:`.shader` a user's
compute shader. Since stages are timed separately, ``vkcore`` versus ``cold`` shows the
SPIR-V cache on the ``spirv`` stage and the pipeline cache on the ``pipeline`` stage.

The parent's report is summarized by :mod:`.summary`, put in words by :mod:`.prose`,
printed by :mod:`.report` and drawn by :mod:`.plotting`.
"""

from vkcore.tools.coldwarm.cases import KERNELS, KernelCase, check_names
from vkcore.tools.coldwarm.child import probe, probe_main
from vkcore.tools.coldwarm.conditions import CONDITIONS, Condition, child_env
from vkcore.tools.coldwarm.harness import SCHEMA, Progress, environment, measure
from vkcore.tools.coldwarm.plotting import plot
from vkcore.tools.coldwarm.prose import findings
from vkcore.tools.coldwarm.report import format_report, format_table
from vkcore.tools.coldwarm.shader import DEFAULT_ELEMENTS, ShaderCase
from vkcore.tools.coldwarm.stages import STAGE_LABELS, STAGES
from vkcore.tools.coldwarm.summary import kernel_ratios, ratios, stats, summarize

__all__ = [
    "CONDITIONS",
    "DEFAULT_ELEMENTS",
    "KERNELS",
    "SCHEMA",
    "STAGES",
    "STAGE_LABELS",
    "Condition",
    "KernelCase",
    "Progress",
    "ShaderCase",
    "check_names",
    "child_env",
    "environment",
    "findings",
    "format_report",
    "format_table",
    "kernel_ratios",
    "measure",
    "plot",
    "probe",
    "probe_main",
    "ratios",
    "stats",
    "summarize",
]
