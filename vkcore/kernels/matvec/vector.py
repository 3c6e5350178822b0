"""One matvec call on a vector x: the checks, the bindings and the dispatches, with y,
bias and parameters bound whole (else :mod:`vkcore.kernels.matvec.chunked`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkcore.compute.repeat import SMALL_CALL_BYTES, Repeat
from vkcore.compute.tensor import Tensor, check_on_device
from vkcore.device.memory.buffer import Buffer
from vkcore.device.submit.commands import Dispatch
from vkcore.kernels import common as c
from vkcore.kernels import storage
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec import program as mp
from vkcore.kernels.matvec.args import check_binding, input_buffer, vector
from vkcore.kernels.matvec.chunked import matvec_by_chunks
from vkcore.kernels.matvec.f32matrix import F32Matrix
from vkcore.kernels.matvec.steps import kernel, push, rowsum_step
from vkcore.kernels.quant.qtensor import QuantizedTensor

# Calls kept for an exact repeat (vkcore.compute.repeat) live on the weights themselves
# (ScratchOwner.kept_calls), by signature.


def repeated(mat: Any, x: Any, bias: Any, mode: int | None, device: Any, out: Any = None) -> Any:
    """The result of a call that repeats a kept one, else None (the full call runs): a
    C-contiguous float32 ``x`` (and ``bias``, or none again), or Tensors ``x`` and ``out``
    (and ``bias``, or none) over the very buffers of the kept call, for the same weights,
    mode and device, under the same per-call context."""
    if mode is None or (device is not None and device is not mat.device):
        return None
    if type(x) is Tensor:
        return _repeated_tensors(mat, x, bias, mode, out)
    if not c.plain_f32(x) or out is not None or not _plain_bias(bias, mat.shape[0]):
        return None
    repeat = c.found(mat.kept_calls.get((mode, x.shape, bias is None)))
    if repeat is None:
        return None
    y = np.empty(mat.shape[0], np.float32)
    return y if repeat.run((x, bias, y)) else None


def _tensor_key(x: Tensor, bias: Any, mode: int, out: Tensor) -> tuple[Any, ...]:
    return (mode, id(x.buffer), None if bias is None else id(bias.buffer), id(out.buffer))


def _tensors_bound(x: Tensor, bias: Any, out: Tensor) -> tuple[Any, ...]:
    """The buffers a Tensor repeat must bind again: x's, out's and the bias's."""
    return (x.buffer, out.buffer) + (() if bias is None else (bias.buffer,))


def _repeated_tensors(mat: Any, x: Tensor, bias: Any, mode: int, out: Any) -> Tensor | None:
    if type(out) is not Tensor or not (bias is None or type(bias) is Tensor):
        return None
    m, n = mat.shape
    if x.dtype != np.float32 or x.shape != (n,):  # a vector (a batch: the full call)
        return None
    if out.dtype != np.float32 or out.shape != (m,):
        return None
    if bias is not None and (bias.dtype != np.float32 or bias.shape != (m,)):
        return None
    repeat = c.found(mat.kept_calls.get(_tensor_key(x, bias, mode, out)))
    if repeat is None or not repeat.binds(_tensors_bound(x, bias, out)):
        return None
    return out if repeat.run(()) else None


def _keep_tensors(mat: Any, kept: Any, x: Any, bias: Any, mode: int, out: Tensor) -> None:
    """Keep a call on Tensors into ``out`` whose recording the device kept."""
    if kept is None or not (bias is None or type(bias) is Tensor) or type(x) is not Tensor:
        return
    repeat = Repeat(mat.device, kept, (), (), _tensors_bound(x, bias, out))
    mat.kept_calls.put(_tensor_key(x, bias, mode, out), c.stamped(repeat))


def _plain_bias(bias: Any, m: int) -> bool:
    return bias is None or c.plain_f32(bias, (m,))


def _keep(
    mat: QuantizedTensor | F32Matrix,
    kept: Any,
    x: Any,
    bias: Any,
    mode: int,
    bufs: tuple[Buffer, Buffer, Buffer],
) -> None:
    """Keep a numpy call whose recording the device kept, for an exact repeat: its x,
    bias and y buffers are ``mat``'s own scratch buffers (a call of another size replaces
    them, which drops the recording)."""
    if kept is None or not c.plain_f32(x) or not _plain_bias(bias, mat.shape[0]):
        return
    if x.nbytes > SMALL_CALL_BYTES:
        return
    xbuf, bbuf, ybuf = bufs
    inputs = [(0, xbuf)] if bias is None else [(0, xbuf), (1, bbuf)]
    repeat = Repeat(mat.device, kept, inputs, [(2, ybuf)])
    mat.kept_calls.put((mode, x.shape, bias is None), c.stamped(repeat))


def run(
    mat: QuantizedTensor | F32Matrix,
    x: Any,
    bias: Any,
    mode: int,
    out_acc: bool = False,
    out: Tensor | None = None,
) -> Any:
    """``y = W x + b`` (or, with ``out_acc``, the int32 accumulators of every group) in
    ``mode``; numpy in, numpy out, Tensor in, Tensor out (``out``, when given: checked by
    the caller, :func:`check_out`)."""
    dev = mat.device
    mat.check_usable()  # the device is open and mat not released (says which)
    m, n = mat.shape
    xv = vector(x, n, dev, "x")
    bv = None if bias is None else vector(bias, m, dev, "bias")
    check_binding(dev, 4 * n, "x")
    groups = 1 if isinstance(mat, F32Matrix) else mg.groups(mat)
    count = m * groups if out_acc else m  # y, or the accumulators of every group
    with dev.lock:
        xbuf = input_buffer(mat, xv, "x")
        if not storage.vectors_fit(dev, m * groups):
            return matvec_by_chunks(mat, mode, xbuf, xv, bv, out_acc)
        bbuf = c.dummy_buffer(dev) if bv is None else input_buffer(mat, bv, "bias")
        y_tensor = None
        if isinstance(xv, Tensor):
            y_tensor = out if out is not None else c.result_tensor(dev, (count,))
        ybuf = y_tensor.buffer if y_tensor is not None else mat.scratch_buffer("y", 4 * count)
        assert ybuf is not None
        made: dict[str, Buffer] = {}  # derived state, kept only once the steps have run
        try:
            steps = _steps(mat, mode, xbuf, bbuf, ybuf, (int(bv is not None), int(out_acc)), made)
            kept = dev.run(steps)
        except BaseException:
            for buf in made.values():
                buf.destroy()
            raise
        # Kept once computed; a recorded sequence has not run yet (or may be discarded).
        if "rowsum" in made and isinstance(mat, QuantizedTensor) and not c.recording(dev):
            mat.rowsum = made["rowsum"]
        if y_tensor is not None:
            if out is not None and not made and not out_acc:
                _keep_tensors(mat, kept, xv, bv, mode, out)
            return y_tensor
        y = np.empty(count, dtype=np.float32)
        ybuf.read(y)
        if not made and not out_acc:  # (a call that made the row sums differs from the next)
            _keep(mat, kept, x, bias, mode, (xbuf, bbuf, ybuf))
        return y


def check_out(out: Any, x: Any, m: int, device: Any) -> Tensor | None:
    """``out`` for a call on ``x``: None, or (for a Tensor ``x``) a float32 Tensor of
    shape ``(m,)`` on the weights' device, not released."""
    if out is None:
        return None
    if not isinstance(x, Tensor):
        raise TypeError(
            "out is for a Tensor x (a numpy x returns a new numpy array), got "
            f"a {type(x).__name__} x"
        )
    if not isinstance(out, Tensor):
        raise TypeError(f"out must be a vkcore.Tensor, got {type(out).__name__}")
    check_on_device(out.device, device, "out", "the weights'")
    if out.dtype != np.float32 or out.shape != (m,):
        raise ValueError(
            f"out must be a float32 Tensor of shape ({m},), got a {out.dtype} Tensor of "
            f"shape {out.shape}"
        )
    if out.buffer is None or not out.buffer.alive:
        raise c.ReleasedError("out is a released Tensor (its buffer was destroyed)")
    if out.buffer is x.buffer:  # every output reads all of x while others are written
        raise ValueError("out must not share x's buffer: each output reads the whole of x")
    return out


def _steps(
    mat: QuantizedTensor | F32Matrix,
    mode: int,
    xbuf: Buffer,
    bbuf: Buffer,
    ybuf: Buffer,
    flags: tuple[int, int],
    made: dict[str, Buffer],
) -> list[Dispatch]:
    """Every dispatch of the call, in order; ``flags``: (bias given, accumulators out)."""
    dev = mat.device
    steps: list[Dispatch] = []
    scale, zero = mp.param_buffers(mat)  # they fit one binding (else matvec_by_chunks)
    rowsum = c.dummy_buffer(dev)
    if isinstance(mat, QuantizedTensor) and mode == mp.MODES["uint8"]:
        rowsum = _rowsum(mat, steps, made)
    prog, act, act_vec, blocks = kernel(mat, mode, xbuf, steps)
    for ch in mat.chunks:
        words = push(mat, blocks, ch.rows, ch.row0, ch.row0, 0, flags)
        buffers = (ch.buffer, scale, zero, rowsum, act, act_vec, bbuf, ybuf)
        grid = mp.grid(dev, ch.rows, mp.pipe_mode(mat, mode))
        steps.append(prog.record(*buffers, groups=grid, push=words))
    return steps


def _rowsum(qt: QuantizedTensor, steps: list[Dispatch], made: dict[str, Buffer]) -> Buffer:
    """V_ig = sum_{j in g} (Q_ij - z_ig) (G = 1: one per row), computed on the device once
    per weight tensor.

    A new buffer goes into ``made`` with the dispatches that fill it appended to ``steps``;
    the caller keeps it as ``qt.rowsum`` only once those have run (an interrupted first
    call must not leave row sums that were never computed)."""
    if qt.rowsum is not None and qt.rowsum.alive:
        return qt.rowsum
    rowsum = made["rowsum"] = Buffer(qt.device, 4 * qt.shape[0] * mg.groups(qt))
    scale, zero = mp.param_buffers(qt)
    for ch in qt.chunks:
        steps.append(rowsum_step(qt, ch, scale, zero, rowsum, ch.row0, 0, ch.rows, ch.row0))
    return rowsum
