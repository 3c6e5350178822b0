"""numpy references of RTN quantization and dequantization (vkcore.kernels.quant.rtn).

The same formulas, written independently in float64 numpy where a value must be exact.
"""

from __future__ import annotations

import numpy as np

_TINY32 = np.finfo(np.float32).tiny  # 2**-126: smaller magnitudes count as zero


def flush_subnormals(a: np.ndarray) -> np.ndarray:
    """float32 copy with subnormal values replaced by 0 (Vulkan devices may flush them)."""
    a = np.asarray(a, dtype=np.float32)
    return np.where(np.abs(a) < _TINY32, np.float32(0), a).astype(np.float32)


def integer_range(bits: int, symmetric: bool) -> tuple[int, int]:
    """``(qmin, qmax)``: ``[-(2^(b-1)-1), 2^(b-1)-1]`` symmetric, ``[0, 2^b-1]`` asymmetric."""
    if symmetric:
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def round_quotient(w: np.ndarray | np.floating, s: np.ndarray | np.floating) -> np.ndarray:
    """roundEven of the exact real quotient w / s for float32 w and s (as float64 integers).

    The float64 quotient of two float32 values is never rounded onto or across a
    half-integer (their distance is at least 2^-25 relative), so np.rint decides exactly.
    """
    return np.rint(np.asarray(w, np.float64) / np.asarray(s, np.float64))


def _group_slices(n: int, group_size: int | None) -> list[slice]:
    """Column ranges of the parameter groups of a row: one of all n without group_size."""
    if group_size is None:
        return [slice(0, n)]
    return [slice(start, min(start + group_size, n)) for start in range(0, n, group_size)]


def _expand(p: np.ndarray, m: int, n: int, group_size: int | None) -> np.ndarray:
    """Per-weight ``(m, n)`` view of parameters ``()``, ``(m,)`` or ``(m, G)``."""
    p = np.asarray(p)
    if p.ndim == 0:
        return np.full((m, n), p)
    if p.ndim == 1:
        return np.repeat(p[:, None], n, axis=1)
    if group_size is None:
        raise ValueError("2-D parameters need group_size")
    out = np.empty((m, n), p.dtype)
    for g, cols in enumerate(_group_slices(n, group_size)):
        out[:, cols] = p[:, g : g + 1]
    return out


def _params_of(
    w: np.ndarray, axis: int | None, bits: int, symmetric: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(s, z) of the values of float64 ``w`` reduced over ``axis``."""
    qmin, qmax = integer_range(bits, symmetric)
    if symmetric:
        amax = np.abs(w).max(axis=axis)
        s = (amax / qmax).astype(np.float32)
        empty = amax == 0
    else:
        lo = np.minimum(w.min(axis=axis), 0.0)
        hi = np.maximum(w.max(axis=axis), 0.0)
        s = ((hi - lo) / (qmax - qmin)).astype(np.float32)
        empty = hi == lo
    s = np.where(empty, np.float32(1), np.maximum(s, np.float32(2.0**-149))).astype(np.float32)
    if symmetric:
        z = np.zeros(np.shape(s), dtype=np.int32)
    else:
        z = np.clip(round_quotient(-lo, s), qmin, qmax).astype(np.int32)
    return np.asarray(s, np.float32), np.asarray(z, np.int32)


def quant_params(
    w: np.ndarray,
    bits: int = 8,
    symmetric: bool = True,
    per_channel: bool = True,
    group_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Scale (float32) and zero point (int32): shape ``()`` per tensor, ``(m,)`` per
    channel, ``(m, ceil(n / g))`` with ``group_size = g`` (groups of g consecutive
    columns of a row, the last one possibly shorter; only with per_channel).

    symmetric:  s = float32(max|W| / (2^(b-1) - 1)), z = 0;
    asymmetric: lo = min(W, 0), hi = max(W, 0) (the range always contains 0),
                s = float32((hi - lo) / (2^b - 1)), z = roundEven(-lo / s).
    W is the group's values. Both quotients are evaluated in float64 and rounded once to
    float32. A group of only zeros gets s = 1, z = 0. A scale that would round to 0 is
    the smallest subnormal.
    """
    w = flush_subnormals(w).astype(np.float64)
    if group_size is None:
        return _params_of(w, 1 if per_channel else None, bits, symmetric)
    if not per_channel:
        raise ValueError("group_size needs per_channel=True")
    parts = [
        _params_of(w[:, cols], 1, bits, symmetric) for cols in _group_slices(w.shape[1], group_size)
    ]
    s = np.stack([p[0] for p in parts], axis=1)
    z = np.stack([p[1] for p in parts], axis=1)
    return s.astype(np.float32), z.astype(np.int32)


def quantize(
    w: np.ndarray,
    bits: int = 8,
    symmetric: bool = True,
    per_channel: bool = True,
    group_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(q, scale, zero_point)``: q = clamp(roundEven(W / s) + z, qmin, qmax), with each
    weight's own group's (s, z) (see quant_params).

    q is int8 when symmetric, uint8 otherwise, shape ``(m, n)``; W / s is the exact quotient.
    """
    w = flush_subnormals(w)
    s, z = quant_params(w, bits, symmetric, per_channel, group_size)
    qmin, qmax = integer_range(bits, symmetric)
    m, n = w.shape
    sc = _expand(s, m, n, group_size)
    zc = _expand(z, m, n, group_size).astype(np.float64)
    q = np.clip(round_quotient(w, sc) + zc, qmin, qmax)
    return q.astype(np.int8 if symmetric else np.uint8), s, z


def dequantize(
    q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, group_size: int | None = None
) -> np.ndarray:
    """W_hat = s * (q - z): one float32 multiply of the exact integer q - z, with each
    weight's group's (s, z); 2-D parameters need ``group_size``."""
    m, n = np.shape(q)
    s = _expand(np.asarray(scale, np.float32), m, n, group_size)
    z = _expand(np.asarray(zero_point, np.int64), m, n, group_size)
    return (s * (q.astype(np.int64) - z).astype(np.float32)).astype(np.float32)


def pack_nibbles(codes: np.ndarray, fill: np.ndarray | int = 0) -> np.ndarray:
    """Two 4-bit codes per byte, ``(m, ceil(n / 2))`` uint8: byte k of a row holds column
    2k in its low nibble and column 2k + 1 in its high nibble; negative codes as 4-bit
    two's complement. After an odd n the last high nibble is ``fill`` (per row or one)."""
    codes = np.asarray(codes, np.int64)
    m, n = codes.shape
    if n % 2:
        pad = np.broadcast_to(np.asarray(fill, np.int64).reshape(-1, 1), (m, 1))
        codes = np.concatenate([codes, pad], axis=1)
    nibbles = np.mod(codes, 16).reshape(m, -1, 2)
    return (nibbles[..., 0] + 16 * nibbles[..., 1]).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray, n: int, signed: bool) -> np.ndarray:
    """The inverse of pack_nibbles: ``(m, n)`` codes, int8 (``signed``) or uint8."""
    b = np.asarray(packed, np.int64)
    both = np.stack([b % 16, b // 16], axis=-1).reshape(b.shape[0], -1)[:, :n]
    if signed:
        return np.where(both >= 8, both - 16, both).astype(np.int8)
    return both.astype(np.uint8)


def stored_rows(
    q: np.ndarray, zero_point: np.ndarray, bits: int, group_size: int | None = None
) -> np.ndarray:
    """The bytes a QuantizedTensor keeps on the device, ``(m, row_bytes)`` uint8: codes one
    per byte (bits 5..8) or packed (bits <= 4, pack_nibbles), each row padded to a multiple
    of 16 bytes with its last group's zero point (0 when symmetric)."""
    q = np.asarray(q, np.int64)
    m, n = q.shape
    z = np.asarray(zero_point, np.int64)
    last = z[:, -1] if z.ndim == 2 else np.broadcast_to(z, (m,))
    if bits <= 4:
        body = pack_nibbles(q, last)
        fill = np.mod(last, 16) * 17  # both nibbles
    else:
        body = np.mod(q, 256).astype(np.uint8)
        fill = np.mod(last, 256)
    width = -(-body.shape[1] // 16) * 16
    out = np.repeat(fill.astype(np.uint8)[:, None], width, axis=1)
    out[:, : body.shape[1]] = body
    return out
