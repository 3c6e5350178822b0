"""The arrays behind ``QuantizedTensor.from_arrays``, ``to_arrays``, ``save`` and ``load``.

Host side only: :func:`checked` validates arrays made elsewhere and lays them out for
storage, :func:`load` reads and checks a file; the class uploads what they return.

``QuantizedTensor.from_arrays(q, scale, zero_point=None, *, bits=8, group_size=None,
device=None)`` takes integer codes ``q`` of shape ``(m, n)`` and the parameters of
``W = s (q - z)``:

* ``zero_point=None``: symmetric, codes in ``[-(2^(b-1)-1), 2^(b-1)-1]`` (never -2^(b-1));
  otherwise asymmetric, codes and zero points in ``[0, 2^b - 1]``.
* ``scale`` of shape ``()`` (per tensor) or ``(m,)`` (per channel) without group_size;
  ``(m, ceil(n / g))`` with ``group_size=g`` (the last group of a row may be shorter).
  float16 and float32 scales are taken exactly; float64 only where every value is a
  float32 (nothing is rounded silently). Scales must be finite; negative and zero scales
  are taken as they are (``W = s (q - z)`` and matvec's products by ``s`` are defined for
  them: a zero scale gives a group of zeros, a negative one the signed zeros
  ``s * 0 = -0.0`` of float32). :func:`vkcore.quantize` itself makes positive scales.
* ``group_size``: an int from 1 to 2^31 - 1 (the same rule as quantize); ``n`` or more is
  one group per row.
* ``zero_point``: an integer array of the scale's shape.

Mappings from other formats (each exact: the same ``W`` bit for bit in float32):

* ggml **Q8_0** (blocks of 32 weights: an fp16 scale ``d`` and 32 int8 codes, ``W = d q``):
  symmetric int8 with scale ``d``, ``from_arrays(q, d, bits=8, group_size=32)``, ``q`` of
  shape ``(m, n)``, ``d`` of shape ``(m, n/32)`` (float16 as stored, or float32). ggml's
  quantizer makes codes in -127..127; an all-zero block has ``d = 0`` and dequantizes to
  zeros, as in ggml. A code of -128 is outside the symmetric range: store such a tensor
  asymmetric with ``q + 128`` as uint8 and zero point 128 (``d (q + 128 - 128) = d q``).
* ggml **Q4_0** (blocks of 32: an fp16 ``d`` and 32 codes 0..15, ``W = d (q - 8)``):
  4-bit codes with zero point 8, ``from_arrays(q, d, np.full(d.shape, 8), bits=4,
  group_size=32)``, ggml's ``d`` as it is: negative where a block's largest-magnitude
  weight is positive, 0 for an all-zero block. The result is ggml's ``d (q - 8)`` bit for
  bit, signed zeros included. ggml interleaves each block's nibbles (byte k holds
  weights k and k + 16): unpack them to ``(m, n)`` codes first.
* **torchao int4, group 128** (``MappingType.ASYMMETRIC`` with integer zero points,
  ``ZeroPointDomain.INT``: ``q = clamp(round(w / s) + zp, 0, 15)``, ``W = (q - zp) s``):
  ``from_arrays(q, s, zp, bits=4, group_size=128)`` with uint4 codes unpacked to ``(m, n)``
  and ``s``, ``zp`` of shape ``(m, n/128)`` (bfloat16 scales convert to float32
  exactly; numpy has no bfloat16, so do it before). Symmetric int4 in -8..7 maps to
  codes ``q + 8`` with zero point 8.
* Not covered: float zero-point domains (torchao's tinygemm layout,
  ``ZeroPointDomain.FLOAT``: ``W = (q - 8) s + zp`` with a float ``zp``), i.e. any offset
  that is not an integer number of steps; GPTQ's act-order (a column permutation
  ``g_idx``); double-quantized scales (bitsandbytes nf4, ggml k-quants' super-blocks);
  non-uniform code books (nf4). Unpacking another tool's bit packing is the caller's job.

``to_arrays()`` returns the keyword arguments of ``from_arrays`` that rebuild the tensor
bit for bit. ``save(qt, path)`` writes an ``.npz`` file (``allow_pickle`` never needed);
``QuantizedTensor.load(path)`` reads it back and checks every field it reads as
``from_arrays`` does, each array's header before its data (:mod:`vkcore.kernels.quant.qfile`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from typing import Any

import numpy as np

from vkcore.compute.tensor import Tensor
from vkcore.kernels.quant import qlayout
from vkcore.kernels.quant.qlayout import Layout, ceil_div, integer_range

FORMAT = "vkcore.QuantizedTensor"
VERSION = 1  # the .npz format version this code writes and reads


# --------------------------------------------------------------------------- checks
def _integer_array(x: Any, name: str) -> np.ndarray:
    if isinstance(x, Tensor):
        raise TypeError(f"{name} must be a numpy integer array, got a vkcore.Tensor")
    if x is None or isinstance(x, (str, bytes, dict, set)):
        raise TypeError(f"{name} must be a numpy integer array, got {type(x).__name__}")
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {arr.dtype}")
    return arr


def _at(name: str, index: tuple[int, ...]) -> str:
    """``name[i, j]`` (just ``name`` for a 0-d array)."""
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def _first_outside(arr: np.ndarray, lo: int, hi: int) -> tuple[int, ...] | None:
    bad = (arr < lo) | (arr > hi)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0])


def _codes(q: Any, lo: int, hi: int, what: str) -> np.ndarray:
    arr = _integer_array(q, "q")
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"q must be a non-empty 2-D array (outputs x inputs), got {arr.shape}")
    at = _first_outside(arr, lo, hi)
    if at is not None:
        raise ValueError(f"{_at('q', at)} is {arr[at]}, outside {what} [{lo}, {hi}]")
    return arr


def per_channel_of(m: int, n: int, group_size: int | None, got: tuple[int, ...]) -> bool:
    """per_channel for a scale of shape ``got``, or a ValueError giving the shapes expected."""
    if group_size is not None:
        want = (m, ceil_div(n, group_size))
        if got != want:
            raise ValueError(
                f"scale must have shape (m, ceil(n / group_size)) = {want} for q of shape "
                f"{(m, n)} and group_size={group_size}, got {got}"
            )
        return True
    if got not in ((), (m,)):
        raise ValueError(
            f"scale must have shape () (per tensor) or ({m},) (per channel) for q of shape "
            f"{(m, n)} without group_size (give group_size for 2-D scales), got {got}"
        )
    return got == (m,)


def _scales(scale: Any) -> np.ndarray:
    if isinstance(scale, Tensor):
        raise TypeError("scale must be a numpy float array, got a vkcore.Tensor")
    if scale is None or isinstance(scale, (str, bytes, dict, set)):
        raise TypeError(f"scale must be a numpy float array, got {type(scale).__name__}")
    arr = np.asarray(scale)
    if arr.dtype.kind != "f" or arr.dtype.itemsize > 8:
        raise TypeError(f"scale must have a float16, float32 or float64 dtype, got {arr.dtype}")
    with np.errstate(over="ignore"):  # a float64 beyond float32 is reported just below
        s = arr.astype(np.float32)
    if arr.dtype.itemsize == 8:
        with np.errstate(invalid="ignore"):
            lost = (s.astype(np.float64) != arr) & ~np.isnan(arr)
        if lost.any():
            at = tuple(int(i) for i in np.argwhere(lost)[0])
            raise ValueError(
                f"{_at('scale', at)} is {float(arr[at])!r}, not a float32 value (scales "
                "are float32; round them yourself if that is meant)"
            )
    # Any finite scale: W = s (q - z) and matvec's products by s are defined for negative
    # and zero s too (ggml's own d), and reproduce its signed zeros.
    bad = ~np.isfinite(s)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"scale must be finite: {_at('scale', at)} is {s[at]}")
    return s


def checked_zero_points(zero_point: Any, shape: tuple[int, ...], bits: int) -> np.ndarray:
    arr = _integer_array(zero_point, "zero_point")
    if arr.shape != shape:
        raise ValueError(f"zero_point must have the scale's shape {shape}, got {arr.shape}")
    lo, hi = integer_range(bits, False)
    at = _first_outside(arr, lo, hi)
    if at is not None:
        raise ValueError(
            f"{_at('zero_point', at)} is {arr[at]}, outside the {bits}-bit range [{lo}, {hi}]"
        )
    return arr.astype(np.int32)


# --------------------------------------------------------------------------- building
def checked(
    q: Any, scale: Any, zero_point: Any = None, *, bits: int = 8, group_size: int | None = None
) -> tuple[Layout, np.ndarray, np.ndarray, np.ndarray]:
    """The layout, stored rows ``(m, row_bytes)``, scales (float32) and zero points (int32)
    of ``W = s (q - z)`` (module docstring: arguments, mappings), every argument checked:
    a TypeError/ValueError names the one out of range or shape."""
    bits = qlayout.check_bits(bits)
    group_size = qlayout.check_group_size(group_size)
    symmetric = zero_point is None
    kind = f"the {bits}-bit {'symmetric' if symmetric else 'asymmetric'} code range"
    codes = _codes(q, *integer_range(bits, symmetric), kind)
    m, n = codes.shape
    s = _scales(scale)
    per_channel = per_channel_of(m, n, group_size, s.shape)
    z = np.zeros(s.shape, np.int32) if symmetric else checked_zero_points(zero_point, s.shape, bits)
    layout = Layout(m, n, bits, symmetric, per_channel, group_size)
    return layout, qlayout.pack_rows(codes, layout, z), s, z


def _tensor(qt: Any) -> Any:
    """``qt`` if it is a QuantizedTensor (it has a quantized layout), else a TypeError."""
    if not isinstance(getattr(qt, "layout", None), Layout):
        raise TypeError(f"qt must be a vkcore.QuantizedTensor, got {type(qt).__name__}")
    return qt


def to_arrays(qt: Any) -> dict[str, Any]:
    """The keyword arguments of ``QuantizedTensor.from_arrays`` that rebuild ``qt`` bit for
    bit."""
    qt = _tensor(qt)
    return {
        "q": qt.q,
        "scale": qt.scale,
        "zero_point": None if qt.symmetric else qt.zero_point,
        "bits": qt.bits,
        "group_size": qt.group_size,
    }


# --------------------------------------------------------------------------- files
# Every field of a file, with the dtype kind and number of dimensions it must have
# (codes and the zero point are checked against the header fields in _read).
HEADER_FIELDS = {
    "format": ("U", 0),
    "version": ("i", 0),
    "shape": ("i", 1),
    "bits": ("i", 0),
    "symmetric": ("b", 0),
    "per_channel": ("b", 0),
    "group_size": ("i", 0),  # 0: none
}


def digest(fields: dict[str, np.ndarray]) -> str:
    """sha256 (hex) of every field but ``digest``: names, dtypes, shapes and bytes. A file
    edited without recomputing it is refused (the zip's CRCs catch accidental damage)."""
    h = hashlib.sha256()
    for key in sorted(fields):
        if key == "digest":
            continue
        arr = np.ascontiguousarray(fields[key])
        h.update(f"{key}|{arr.dtype.str}|{arr.shape}|".encode())
        if arr.nbytes:
            h.update(arr.reshape(-1).view(np.uint8).data)  # its bytes, without a copy
    return h.hexdigest()


def save(qt: Any, path: Any) -> None:
    """Write ``qt`` to ``path`` (exactly that name) as an uncompressed ``.npz``: the
    header fields of ``HEADER_FIELDS``, ``codes`` (the packed bytes ``(m, ceil(n/2))`` uint8,
    low nibble first, when bits <= 4; else ``q``), ``scale`` and, when asymmetric,
    ``zero_point``, and ``digest`` (see :func:`digest`). The file appears whole or not
    at all: it is written to a temporary name beside it and renamed."""
    qt = _tensor(qt)
    m, n = qt.shape
    stored = qt.stored_rows()
    codes = stored[:, : ceil_div(n, 2)] if qt.packed else stored[:, :n].view(qt.dtype)
    fields: dict[str, np.ndarray] = {
        "format": np.array(FORMAT),
        "version": np.array(VERSION, np.int64),
        "shape": np.array([m, n], np.int64),
        "bits": np.array(qt.bits, np.int64),
        "symmetric": np.array(qt.symmetric),
        "per_channel": np.array(qt.per_channel),
        "group_size": np.array(qt.group_size or 0, np.int64),
        "codes": np.ascontiguousarray(codes),
        "scale": qt.scale,
    }
    if not qt.symmetric:
        fields["zero_point"] = qt.zero_point
    fields["digest"] = np.array(digest(fields))
    # Written next to the target and renamed over it: an exception or Ctrl-C while
    # writing leaves the old file (or none) as it was, never a partial one.
    target = os.path.realpath(os.fspath(path))  # through a symlink, as open() writes
    temp = f"{target}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **fields)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
