"""numpy references: the same formulas and documented edge-case answers as the kernels.

Tests and the demo compare every kernel with these functions. One module per kernel
family; everything is importable from ``vkcore.reference``.
"""

from vkcore.reference.attention import attention, kv_dequantize, kv_quantize
from vkcore.reference.matvec import (
    ACT_INV,
    ACT_TINY,
    group_rowsums,
    matvec,
    matvec_accumulators,
    quantize_activation_columns,
    quantize_activations,
    sequential_sum,
)
from vkcore.reference.quant import (
    dequantize,
    flush_subnormals,
    integer_range,
    pack_nibbles,
    quant_params,
    quantize,
    round_quotient,
    stored_rows,
    unpack_nibbles,
)
from vkcore.reference.softmax import log_softmax, softmax
from vkcore.reference.topk import (
    gumbel,
    philox4x32,
    rank_order,
    sample,
    softmax_topk,
    topk,
    topk_allowed,
    uniforms,
)

__all__ = [
    "ACT_INV",
    "ACT_TINY",
    "attention",
    "dequantize",
    "flush_subnormals",
    "gumbel",
    "group_rowsums",
    "integer_range",
    "kv_dequantize",
    "kv_quantize",
    "log_softmax",
    "matvec",
    "matvec_accumulators",
    "pack_nibbles",
    "philox4x32",
    "quant_params",
    "quantize",
    "quantize_activation_columns",
    "quantize_activations",
    "rank_order",
    "round_quotient",
    "sample",
    "sequential_sum",
    "softmax",
    "softmax_topk",
    "stored_rows",
    "topk",
    "topk_allowed",
    "uniforms",
    "unpack_nibbles",
]
