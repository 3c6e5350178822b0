"""The storage layout of a :class:`~vkcore.kernels.quant.qtensor.QuantizedTensor` (version 2).

A matrix of ``m x n`` integer codes is stored row by row; each row is padded to a
multiple of 16 bytes (``BLOCK``) so kernels read whole ``uvec4`` blocks:

* ``bits`` 5..8: one code per byte, int8 (symmetric) or uint8 (asymmetric);
  ``row_bytes = ceil(n / 16) * 16``.
* ``bits`` 2..4 (``packed``): two codes per byte. Byte ``k`` of a row holds column ``2k``
  in bits 0-3 (low nibble) and column ``2k + 1`` in bits 4-7 (high nibble); symmetric
  codes as 4-bit two's complement, asymmetric codes as unsigned 0..15;
  ``row_bytes = ceil(ceil(n / 2) / 16) * 16``.
* padding (columns ``n`` up to the row end, including the high nibble after an odd ``n``)
  holds the zero point of the row's LAST group (0 when symmetric), so ``q - z = 0`` there.

Parameters (scale float32, zero point int32): one per tensor (shape ``()``), per row
(``(m,)``) or, with ``group_size = g``, per row and group of ``g`` consecutive columns
(``(m, G)``, ``G = ceil(n / g)``, the last group may be shorter), row-major on the device:
the parameters of row ``i``, column ``j`` are element ``i * G + j // g``. ``g`` is an int
from 1 to 2^31 - 1 (:func:`check_group_size`); a ``g`` of ``n`` or more is one group, and
kernels are given ``group_cols = min(g, n)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vkcore.errors import shown

BLOCK = 16  # bytes per stored block of a row


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def integer_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """``(qmin, qmax)``: ``[-(2^(b-1)-1), 2^(b-1)-1]`` symmetric, ``[0, 2^b-1]`` asymmetric."""
    half = 2 ** (bits - 1) - 1
    return (-half, half) if symmetric else (0, 2**bits - 1)


def check_bits(bits: Any) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an int from 2 to 8, got {type(bits).__name__}")
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be from 2 to 8, got {shown(bits)}")
    return int(bits)


GROUP_SIZE_MAX = 2**31 - 1  # group_size limit: kernels take columns per group as uint32


def check_group_size(group_size: Any) -> int | None:
    """``None`` or an int from 1 to ``GROUP_SIZE_MAX`` (2^31 - 1; bools rejected), as an
    int. The one rule for quantize, from_arrays and load. A group_size of n or more is one
    group per row: :attr:`Layout.group_cols` is ``min(group_size, n)``."""
    if group_size is None:
        return None
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)):
        raise TypeError(
            f"group_size must be a positive int or None, got {type(group_size).__name__}"
        )
    if group_size < 1:
        raise ValueError(f"group_size must be a positive int or None, got {shown(group_size)}")
    if group_size > GROUP_SIZE_MAX:
        raise ValueError(
            f"group_size must be at most 2^31 - 1 = {GROUP_SIZE_MAX}, got {shown(group_size)} "
            "(any group_size of n or more is one group per row: give n)"
        )
    return int(group_size)


@dataclass(frozen=True)
class Layout:
    """Where each code and parameter of an ``m x n`` quantized matrix lives."""

    m: int
    n: int
    bits: int
    symmetric: bool
    per_channel: bool
    group_size: int | None = None  # only with per_channel

    def __post_init__(self) -> None:
        assert self.group_size is None or self.per_channel

    @property
    def group_cols(self) -> int:
        """Columns per parameter group: ``min(group_size, n)`` if set (a group_size
        beyond the row is one group), else n. Kernels get this, never group_size."""
        return min(self.group_size, self.n) if self.group_size is not None else self.n

    @property
    def groups(self) -> int:
        """G: parameter groups per row, ``ceil(n / group_size)`` (1 without group_size)."""
        return ceil_div(self.n, self.group_cols)

    @property
    def packed(self) -> bool:
        return self.bits <= 4

    @property
    def row_bytes(self) -> int:
        """Stored bytes per row: codes (two per byte when packed) padded to 16-byte blocks."""
        return ceil_div(ceil_div(self.n, 2 if self.packed else 1), BLOCK) * BLOCK

    @property
    def param_shape(self) -> tuple[int, ...]:
        if self.group_size is not None:
            return (self.m, self.groups)
        return (self.m,) if self.per_channel else ()

    @property
    def param_count(self) -> int:
        return int(np.prod(self.param_shape, dtype=np.int64))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.int8 if self.symmetric else np.uint8)

    @property
    def nbytes(self) -> int:
        """Device bytes: codes, float32 scales and int32 zero points (4 bytes each)."""
        return self.m * self.row_bytes + 2 * 4 * self.param_count

    def last_zero(self, zero_point: np.ndarray) -> np.ndarray:
        """Per row, the zero point of its last group (the padding code), as int64."""
        z = np.asarray(zero_point, np.int64)
        if z.ndim == 2:
            return z[:, -1]
        return np.broadcast_to(z, (self.m,))


def pack_rows(codes: np.ndarray, layout: Layout, zero_point: np.ndarray) -> np.ndarray:
    """Codes ``(m, n)`` (integers in range) as the stored rows ``(m, row_bytes)`` uint8."""
    m, n = layout.m, layout.n
    per_byte = 2 if layout.packed else 1
    cols = layout.row_bytes * per_byte
    # Codes and zero points are in [-128, 255] here: int16 holds them (int64 took 8 bytes
    # per code, several times over, for a tensor's whole codes).
    full = np.empty((m, cols), dtype=np.int16)
    full[:, :n] = codes
    full[:, n:] = layout.last_zero(zero_point)[:, None]
    full &= 0xFF if not layout.packed else 0xF  # two's complement bytes / nibbles
    if not layout.packed:
        return full.astype(np.uint8)
    low = full[:, 0::2].astype(np.uint8)
    low |= (full[:, 1::2] << 4).astype(np.uint8)
    return low


def unpack_rows(raw: np.ndarray, layout: Layout) -> np.ndarray:
    """Stored rows ``(m, row_bytes)`` uint8 back to codes ``(m, n)`` int8/uint8."""
    raw = np.asarray(raw, np.uint8)
    if not layout.packed:
        return raw[:, : layout.n].view(layout.dtype).copy()
    nib = np.empty((raw.shape[0], 2 * raw.shape[1]), dtype=np.uint8)
    np.bitwise_and(raw, 0xF, out=nib[:, 0::2])
    np.right_shift(raw, 4, out=nib[:, 1::2])
    nib = nib[:, : layout.n]
    if layout.symmetric:  # sign-extend 4-bit two's complement: (v ^ 8) - 8, in int8
        return np.subtract((nib ^ 8).view(np.int8), 8, dtype=np.int8)
    return nib.copy()
