"""Matrix-vector products with quantized weights, and the float32 baseline.

``matvec(qt, x, bias=None, activations=...)`` with ``v_ij = Q_ij - z_i`` (``z_i = 0`` for
symmetric weights; asymmetric weights are supported through this correction):

* ``"float"`` (weight-only): ``y_i = s_i * sum_j v_ij x_j + b_i``; float32 sums, the scale
  applied once per output after the sum. Accuracy: float32 summation error against the
  float64 reference, ``|err_i| <= n * 2^-23 * s_i * sum_j |v_ij x_j|`` (what tests hold).
* ``"int8"`` (full integer): x is quantized per tensor, symmetric, on the device
  (:func:`vkcore.reference.quantize_activations`); ``acc_i = sum_j v_ij qx_j`` in int32.
* ``"uint8"``: x quantized asymmetrically with zero point ``z_x``;
  ``acc_i = sum_j v_ij qx_j - z_x V_i`` with ``V_i = sum_j v_ij`` computed once per
  weight tensor on the device and reused by every call.
* integer modes: ``y_i = float32(s_i s_x) * float32(acc_i) + b_i``, each step one float32
  rounding, so y equals :func:`vkcore.reference.matvec` bit for bit and ``acc`` equals
  an int64 reference exactly.
* non-finite activations: in the float mode NaN and infinities propagate as float32
  arithmetic makes them; in the integer modes a NaN or infinity anywhere in x makes every
  output NaN (``s_x = NaN``), never a silent finite answer.

int32 overflow: ``|acc_i| <= vmax * amax * n`` with ``vmax`` = 2^(b-1)-1 (symmetric) or
2^b-1 (asymmetric weights) and ``amax`` = 127 (int8) or 255 (uint8). Calls with
``n > max_exact_n(...)`` raise ValueError rather than risk a wrong answer (8-bit symmetric
weights: n <= 133,144 with int8 activations, n <= 66,311 with uint8).

The kernel reads 16 weights per 32-bit-word quadruple (``uvec4`` loads, bytes unpacked
with ``bitfieldExtract``), so it needs neither 8-bit storage nor int8 arithmetic; a
workgroup is one subgroup computing ``ROWS`` rows (``ROWS_F32`` for the float32 kernel),
reusing each loaded activation block. Weights and activations are read through uniform
texel buffers where the device allows (lavapipe's texture path is vectorized, its
storage-buffer loads are not; ``VKCORE_TEXEL=0`` keeps storage buffers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.device.device import Device
from vkcore.errors import shown
from vkcore.kernels import common as c
from vkcore.kernels.matvec import batch as batch
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec.args import check_call
from vkcore.kernels.matvec.f32matrix import F32Matrix, f32_weights
from vkcore.kernels.matvec.program import MODE_F32, MODES
from vkcore.kernels.matvec.vector import check_out, repeated, run
from vkcore.kernels.quant.qtensor import QuantizedTensor


def matvec_f32(
    w: Any, x: Any, *, bias: Any = None, out: Any = None, device: Device | None = None
) -> Any:
    """``y = W x + b`` in float32 on the device: the honest baseline for :func:`matvec`.

    ``w`` is a 2-D float array (uploaded for this call) or a :class:`vkcore.F32Matrix`
    (already resident). ``x``: numpy vector or Tensor of length n; numpy in, numpy out.
    ``out``: as for :func:`matvec`. An ``x`` of shape ``(n, b)`` is a batch:
    :func:`vkcore.kernels.matvec.batch.matvec_f32`.
    """
    if isinstance(w, F32Matrix):
        y = repeated(w, x, bias, MODE_F32, device, out)  # vkcore.compute.repeat
        if y is not None:
            return y
    with f32_weights(w, device) as mat:  # inside a sequence: numpy uploaded as Tensors
        x, bias = c.as_recorded(x, mat.device), c.as_recorded(bias, mat.device)
        if batch.is_batch(x):  # all b columns in one call
            _no_batch_out(out)
            return batch.matvec_f32(mat, x, bias=bias, device=device)
        target = check_out(out, x, mat.shape[0], mat.device)
        return run(mat, x, bias, MODE_F32, out=target)


def _no_batch_out(out: Any) -> None:
    if out is not None:
        raise TypeError("out is for a vector x, not a batch (x of shape (n, b))")


def matvec(
    qt: QuantizedTensor,
    x: Any,
    *,
    bias: Any = None,
    activations: str = "float",
    out: Any = None,
    device: Device | None = None,
) -> Any:
    """``y = W_hat x + b`` with quantized weights ``qt``; see the module docstring.

    ``x``: a float vector of length n (numpy or a float32 Tensor on qt's device); numpy
    in, numpy out, Tensor in, Tensor out. ``bias``: None or a float vector of length m.
    ``activations``: "float", "int8" or "uint8". ``out``: for a Tensor ``x``, a float32
    Tensor of shape ``(m,)`` that receives y and is returned (a loop that passes the same
    Tensors repeats its call exactly: docs/performance.md#repeated-calls). An ``x`` of
    shape ``(n, b)`` is a batch: :func:`vkcore.kernels.matvec.batch.matvec`.
    """
    if isinstance(qt, QuantizedTensor):
        mode = MODES.get(activations) if type(activations) is str else None
        y = repeated(qt, x, bias, mode, device, out)  # vkcore.compute.repeat
        if y is not None:
            return y
        # inside a sequence: numpy uploaded as Tensors
        x, bias = c.as_recorded(x, qt.device), c.as_recorded(bias, qt.device)
    if batch.is_batch(x):  # all b columns in one call
        _no_batch_out(out)
        return batch.matvec(qt, x, bias=bias, activations=activations, device=device)
    check_call(qt, activations, device)
    target = check_out(out, x, qt.shape[0], qt.device)
    return run(qt, x, bias, MODES[activations], out=target)


def integer_accumulators(qt: QuantizedTensor, x: Any, activations: str = "int8") -> np.ndarray:
    """The int32 accumulators of an integer-mode matvec, as numpy int32: ``acc_i`` shape
    ``(m,)`` with one group per row, ``acc_ig`` shape ``(m, G)`` with groups.

    For checks and tests: they equal :func:`vkcore.reference.matvec_accumulators`.
    """
    if activations not in ("int8", "uint8"):
        raise ValueError(f"activations must be 'int8' or 'uint8', got {shown(activations)}")
    check_call(qt, activations, None)
    c.not_recorded(qt.device, "integer_accumulators", "it returns numpy accumulators")
    y = run(qt, x, None, MODES[activations], out_acc=True)
    arr = (y.numpy() if isinstance(y, Tensor) else y).view(np.int32)
    return arr.reshape(qt.shape[0], -1) if mg.groups(qt) > 1 else arr
