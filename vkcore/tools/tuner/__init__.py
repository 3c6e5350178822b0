"""``vkcore tune``'s measuring side: choose kernel parameters by timing them, once per device.

:func:`tune` times each candidate value (:func:`vkcore.kernels.tuning.values`) on every kernel path
it steers (:mod:`.paths`: the softmax workgroup on the online and safe softmax and
log_softmax; the INT8 rows on the float, int8 and uint8 activation modes; the quantize
rows on quantize and dequantize), takes each path's median (:mod:`.timing`), and stores
the value with the smallest sum over its paths through :mod:`vkcore.kernels.tuning`, the store the
kernels read. Times are device time from timestamp queries where the compute queue has
them, else wall time around each call: the record says which (``"clock"``).

The kernels never import this package: it imports them.
"""

from vkcore.tools.tuner.search import best, measure, tune
from vkcore.tools.tuner.timing import clock

__all__ = ["best", "clock", "measure", "tune"]
