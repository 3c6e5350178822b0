"""QuantizedTensor: integer codes, scales and zero points kept on the device.

The storage layout (row padding, nibble order, parameter groups) is described in
:mod:`vkcore.kernels.quant.qlayout`; building one from arrays made elsewhere, going back, and
``.npz`` files are in :mod:`vkcore.kernels.quant.qarrays`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.device.device import Device, resolve
from vkcore.device.memory.buffer import Buffer
from vkcore.kernels import storage
from vkcore.kernels.quant import qarrays, qfile
from vkcore.kernels.quant.qlayout import Layout, unpack_rows
from vkcore.kernels.storage import Chunk, ScratchOwner

# Writes the codes into the leased chunks; returns the scales and zero points.
Fill = Callable[[list[Chunk]], tuple[np.ndarray, np.ndarray]]


class QuantizedTensor(ScratchOwner):
    """Quantized weights kept on the device, with their scales and zero points.

    Fields: ``shape`` ``(m, n)``, ``bits`` (2..8), ``symmetric``, ``per_channel``,
    ``group_size`` (None, or columns per group as given), ``group_cols`` (effective
    columns per group: group_size, else n), ``groups`` (G = ceil(n / group_size), else 1),
    ``packed`` (bits <= 4: two codes per byte), ``row_bytes`` (stored bytes per row) and
    ``nbytes`` (device bytes of codes, scales and zero points; caches that matvec derives
    later, such as row sums, are not counted). Layout: :mod:`vkcore.kernels.quant.qlayout`.

    ``q`` reads back one code per weight, shape ``(m, n)``, int8 when symmetric, uint8
    otherwise (packed storage is unpacked); ``scale`` (float32) and ``zero_point`` (int32)
    have shape ``(m, G)`` with group_size, ``(m,)`` per channel, ``()`` per tensor.
    ``scale_tensor`` and ``zero_point_tensor`` are the device copies (row-major).
    Create one with :func:`vkcore.quantize` or :meth:`from_arrays`; :meth:`to_arrays`,
    :meth:`save` and :meth:`load` go back and forth.
    """

    _remake = "quantize the weights again"

    def __init__(
        self,
        device: Device,
        shape: tuple[int, int],
        bits: int,
        symmetric: bool,
        per_channel: bool,
        chunks: list[Chunk],
        scale: Tensor,
        zero_point: Tensor,
        group_size: int | None = None,
    ) -> None:
        self.device = device
        self.layout = Layout(shape[0], shape[1], bits, symmetric, per_channel, group_size)
        self.shape = shape
        self.bits = bits
        self.symmetric = symmetric
        self.per_channel = per_channel
        self.group_size = group_size
        self.chunks = chunks
        self.scale_tensor = scale
        self.zero_point_tensor = zero_point
        self.rowsum: Buffer | None = None  # sum_j (Q_ij - z_i), made on first use
        self.scratch: dict[str, Buffer] = {}  # per-call buffers reused by matvec

    @property
    def group_cols(self) -> int:
        return self.layout.group_cols

    @property
    def groups(self) -> int:
        return self.layout.groups

    @property
    def packed(self) -> bool:
        return self.layout.packed

    @property
    def row_bytes(self) -> int:
        return self.layout.row_bytes

    @property
    def nbytes(self) -> int:
        return self.layout.nbytes

    def group_buffers(self, take: Callable[[int], Buffer]) -> list[tuple[Buffer, Buffer, int]]:
        """Per chunk: the scale and zero-point buffers to bind and the global row of their
        first element (row r's parameters start at element ``(r - row) * groups``). The
        whole arrays (row 0) where they fit one binding, else slices written for this call
        into buffers from ``take(nbytes)`` (the caller frees them)."""
        scale, zero = self.scale_tensor.buffer, self.zero_point_tensor.buffer
        assert scale is not None and zero is not None
        if not self.per_channel or storage.vectors_fit(self.device, self.layout.param_count):
            return [(scale, zero, 0)] * len(self.chunks)
        s, z = self.scale, self.zero_point
        out = []
        for ch in self.chunks:
            part = slice(ch.row0, ch.row0 + ch.rows)
            count = ch.rows * self.groups
            s_buf, z_buf = take(4 * count), take(4 * count)
            s_buf.write(np.ascontiguousarray(s[part]))
            z_buf.write(np.ascontiguousarray(z[part]))
            out.append((s_buf, z_buf, ch.row0))
        return out

    @property
    def dtype(self) -> np.dtype:
        return self.layout.dtype

    def stored_rows(self) -> np.ndarray:
        """The stored bytes, shape ``(m, row_bytes)`` uint8, padding and nibbles as kept."""
        self.check_usable()
        out = np.empty((self.shape[0], self.row_bytes), dtype=np.uint8)
        for ch in self.chunks:
            ch.buffer.read(out[ch.row0 : ch.row0 + ch.rows])
        return out

    @property
    def q(self) -> np.ndarray:
        return unpack_rows(self.stored_rows(), self.layout)

    @property
    def scale(self) -> np.ndarray:
        self.check_usable()
        return self.scale_tensor.numpy()

    @property
    def zero_point(self) -> np.ndarray:
        self.check_usable()
        return self.zero_point_tensor.numpy()

    @classmethod
    def build(cls, dev: Device, layout: Layout, fill: Fill, what: str) -> QuantizedTensor:
        """Lease row chunks for ``layout`` on ``dev`` (a row longer than one binding is a
        ValueError naming ``what``), let ``fill(chunks)`` write the codes and return the
        scales and zero points, and upload those; on any failure every buffer made here
        is freed."""
        chunks: list[Chunk] = []
        made: list[Tensor] = []
        try:
            storage.lease_chunks(dev, layout.m, layout.row_bytes, chunks, what)
            s, z = fill(chunks)
            scale_t = storage.upload(
                np.asarray(s, np.float32).reshape(layout.param_shape), dev, made
            )
            zero_t = storage.upload(np.asarray(z, np.int32).reshape(layout.param_shape), dev, made)
            return cls(
                dev, (layout.m, layout.n), layout.bits, layout.symmetric, layout.per_channel,
                chunks, scale_t, zero_t, group_size=layout.group_size,
            )  # fmt: skip
        except BaseException:
            storage.free_partial(chunks, made)
            raise

    @classmethod
    def from_arrays(
        cls,
        q: Any,
        scale: Any,
        zero_point: Any = None,
        *,
        bits: int = 8,
        group_size: int | None = None,
        device: Device | None = None,
    ) -> QuantizedTensor:
        """A tensor from codes and parameters made elsewhere: ``W = s (q - z)`` per group.

        ``zero_point=None`` means symmetric. Every argument is checked, raising
        TypeError/ValueError naming it (see :mod:`vkcore.kernels.quant.qarrays`, which also maps
        ggml Q8_0 / Q4_0 and torchao int4 onto it).
        """
        layout, rows, s, z = qarrays.checked(q, scale, zero_point, bits=bits, group_size=group_size)
        dev = resolve(device)
        dev.check()

        def write(chunks: list[Chunk]) -> tuple[np.ndarray, np.ndarray]:
            for ch in chunks:
                ch.buffer.write(np.ascontiguousarray(rows[ch.row0 : ch.row0 + ch.rows]))
            return s, z

        return cls.build(dev, layout, write, "one row of q stored")

    def to_arrays(self) -> dict[str, Any]:
        """``{"q", "scale", "zero_point", "bits", "group_size"}``: the keyword arguments of
        :meth:`from_arrays` that rebuild this tensor bit for bit (zero_point None when
        symmetric)."""
        return qarrays.to_arrays(self)

    def save(self, path: Any) -> None:
        """Write the tensor to an ``.npz`` file (see :func:`vkcore.kernels.quant.qarrays.save`)."""
        qarrays.save(self, path)

    @classmethod
    def load(cls, path: Any, device: Device | None = None) -> QuantizedTensor:
        """Read a tensor written by :meth:`save`, checking everything it reads."""
        return qfile.load(path, functools.partial(cls.from_arrays, device=device))

    def release(self) -> None:
        """Free the device memory now (also happens when the object is collected)."""
        super().release()
        rowsum, self.rowsum = self.rowsum, None
        if rowsum is not None:
            rowsum.destroy()
        for t in (self.scale_tensor, self.zero_point_tensor):
            if t.buffer is not None:
                t.buffer.destroy()

    def __repr__(self) -> str:
        kind = "symmetric" if self.symmetric else "asymmetric"
        if self.group_size is not None:
            group = f"group_size={self.group_size}"
        else:
            group = "per-channel" if self.per_channel else "per-tensor"
        packed = ", packed" if self.packed else ""
        return (
            f"vkcore.QuantizedTensor(shape={self.shape}, bits={self.bits}, {kind}, {group}{packed})"
        )
