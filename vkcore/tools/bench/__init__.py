"""``vkcore bench``: every kernel against its honest baseline, side by side in one process.

Each comparison runs the baseline and the vkcore call on the same data, alternating
them repetition after repetition (so a noisy neighbour slows both alike), and keeps every
sample. A ratio is ``median(baseline) / median(vkcore)``: above 1 means vkcore is faster.
Two clocks are used and both are kept: wall time (numpy in, numpy out, transfers
included, or Tensor in, Tensor out where the comparison says "resident") and device time
from the timestamp queries around the kernel's dispatches.

The per-call overhead row is the other way round: it reports ``call / floor``, where the
floor is resubmitting the very command buffer the call recorded, with every struct built
in advance (:meth:`vkcore.device.submit.submitter.Submitter.resubmit_seconds`).

Effective bandwidth counts the bytes a kernel must move at least (each input read once,
each output written once) per second of wall or device time, next to this machine's copy
bandwidth measured in the same run (a numpy copy of a large array): a roofline position.

The INT8 and quantize comparisons run only when the package has those kernels.
"""

from vkcore.tools.bench.baselines import numpy_log_softmax, numpy_quantize, numpy_softmax
from vkcore.tools.bench.harness import Comparison, side_by_side
from vkcore.tools.bench.report import format_table, to_json, write_plot
from vkcore.tools.bench.run import run_bench
from vkcore.tools.bench.targets import TARGETS

__all__ = [
    "TARGETS",
    "Comparison",
    "format_table",
    "numpy_log_softmax",
    "numpy_quantize",
    "numpy_softmax",
    "run_bench",
    "side_by_side",
    "to_json",
    "write_plot",
]
