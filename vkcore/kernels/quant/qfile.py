"""Reading a ``QuantizedTensor`` file written by :func:`vkcore.kernels.quant.qarrays.save`.

Nothing of a file is read before it is known to be wanted (:func:`load`): its member
list and declared sizes come from the zip's central directory, each array's dtype and
shape from its .npy header (:mod:`vkcore.kernels.quant.npzfile`), and are checked against the
header fields before any array data is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from vkcore.base import hostmem
from vkcore.kernels.quant import npzfile, qlayout
from vkcore.kernels.quant.qarrays import (
    FORMAT,
    HEADER_FIELDS,
    VERSION,
    checked_zero_points,
    digest,
    per_channel_of,
)
from vkcore.kernels.quant.qlayout import Layout, ceil_div

T = TypeVar("T")


def load(path: Any, make: Callable[..., T]) -> T:
    """``make(**arrays)`` (``QuantizedTensor.from_arrays``) of the checked arrays of a file
    written by :func:`save`. Anything else (not a zip,
    another program's .npz, a damaged zip whatever zipfile or numpy raise for it, a field
    missing, extra, of the wrong dtype or shape, codes or parameters out of range, a newer
    format version) is a ValueError naming the file (and the field), the cause chained;
    only failing to open the file (FileNotFoundError, PermissionError: OSError) is raised
    as it is. The file is never trusted and never unpickled.

    Nothing is read before it is known to be wanted: the member list and every member's
    declared size come from the zip's central directory, each array's dtype and shape
    from its .npy header (:mod:`vkcore.kernels.quant.npzfile`). An extra or missing member, a
    header field of more than :data:`FIELD_BYTES_MAX` bytes, codes or parameters whose
    header disagrees with the shape the header fields give, or arrays that need more
    memory than is available are refused before any array data is read; the memory a
    file costs is then that of the tensor it holds."""
    name = os.fspath(path)
    with open(name, "rb") as fh:  # an OSError of opening is the caller's to see
        try:
            arrays = _read(_archive(fh))
        except npzfile.Unreadable as exc:
            raise ValueError(
                f"{name!r} is not a readable vkcore.QuantizedTensor .npz: {exc}"
            ) from exc
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name!r}: {exc}") from None
    try:
        return make(**arrays)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name!r}: {exc}") from None


# The most bytes a header field's member may declare (.npy header included): the
# longest, 'digest' (64 characters of UCS-4), takes 384.
FIELD_BYTES_MAX = 4096
_ARRAYS = ("codes", "scale", "zero_point")
_BASE = set(HEADER_FIELDS) | {"codes", "scale", "digest"}  # and zero_point when asymmetric


def _archive(fh: Any) -> npzfile.Npz:
    if npzfile.is_npy(fh):
        raise npzfile.Unreadable("it holds a single array, not the fields of a saved tensor")
    return npzfile.Npz(fh)


class _Fields:
    """The members of a saved tensor, read one at a time after their headers are checked."""

    def __init__(self, archive: npzfile.Npz) -> None:
        self.archive = archive
        self.names = set(archive.names)
        self.arrays: dict[str, np.ndarray] = {}

    def small(self, key: str) -> np.ndarray:
        """A header field (or the digest): its declared size is bounded before reading."""
        if key in self.arrays:
            return self.arrays[key]
        declared = self.archive.declared_size(key)
        if declared > FIELD_BYTES_MAX:
            raise ValueError(
                f"field {key!r} declares {declared} bytes; a header field takes at most "
                f"{FIELD_BYTES_MAX}"
            )
        header = self.archive.header(key)
        arr = self.arrays[key] = self.archive.read(key, header)
        return arr


def _field(fields: dict[str, np.ndarray], key: str, kind: str, ndim: int) -> np.ndarray:
    arr = fields[key]
    if arr.dtype.kind != kind or arr.ndim != ndim:
        raise ValueError(
            f"field {key!r} must be a {ndim}-D array of dtype kind {kind!r}, "
            f"got {arr.dtype} of shape {arr.shape}"
        )
    return arr


def _check_kind(f: _Fields) -> None:
    """A saved QuantizedTensor of this format and version, with no field missing or extra
    (``zero_point`` allowed: whether it must be there depends on ``symmetric``)."""
    if "format" not in f.names:
        raise ValueError(f"not a saved vkcore.QuantizedTensor (fields: {sorted(f.names)})")
    fmt = f.small("format")
    if fmt.dtype.kind != "U":
        raise ValueError(f"not a saved vkcore.QuantizedTensor (fields: {sorted(f.names)})")
    if str(fmt) != FORMAT:
        raise ValueError(f"format is {str(fmt)!r}, not {FORMAT!r}")
    if "version" in f.names:
        version = _field({"version": f.small("version")}, "version", "i", 0)
        if int(version) != VERSION:
            newer = " (written by a newer vkcore)" if int(version) > VERSION else ""
            raise ValueError(f"format version {int(version)}{newer}; this vkcore reads {VERSION}")
    missing, extra = _BASE - f.names, f.names - _BASE - {"zero_point"}
    if missing or extra:
        raise ValueError(
            f"fields must be {sorted(_BASE)} and, when asymmetric, 'zero_point'; got "
            f"{sorted(f.names)} (missing {sorted(missing)}, extra {sorted(extra)})"
        )


def _read(archive: npzfile.Npz) -> dict[str, Any]:
    """The keyword arguments of ``from_arrays`` that a file's fields hold, checked; the
    header fields first, then the headers of the arrays, then their data."""
    f = _Fields(archive)
    _check_kind(f)
    h = {
        key: _field({key: f.small(key)}, key, kind, nd) for key, (kind, nd) in HEADER_FIELDS.items()
    }
    symmetric = bool(h["symmetric"])
    want = _BASE | (set() if symmetric else {"zero_point"})
    if f.names != want:
        raise ValueError(
            f"fields must be {sorted(want)}, got {sorted(f.names)} "
            f"(missing {sorted(want - f.names)}, extra {sorted(f.names - want)})"
        )
    digest_field = _field({"digest": f.small("digest")}, "digest", "U", 0)
    shape = h["shape"]
    if shape.shape != (2,) or (shape < 1).any():
        raise ValueError(f"field 'shape' must be two positive ints, got {shape.tolist()}")
    m, n = (int(v) for v in shape)
    bits, group = int(h["bits"]), int(h["group_size"])
    group_size = None if group == 0 else qlayout.check_group_size(group)
    layout = Layout(m, n, qlayout.check_bits(bits), symmetric, True, group_size)
    headers = _array_headers(archive, layout, bool(h["per_channel"]))
    need = sum(hd.nbytes for hd in headers.values())
    # A load's traced peak, measured: about 10x the file's arrays with packed codes (they
    # are unpacked, checked and packed again), 4x without.
    short = hostmem.shortfall((10 if layout.packed else 4) * need)
    if short is not None:
        raise ValueError(f"a {m} x {n} tensor {short}")
    for key, hd in headers.items():
        f.arrays[key] = archive.read(key, hd)
    fields = f.arrays
    if digest_field != digest(fields):
        raise ValueError("its digest does not match its contents (the file was changed)")
    codes = _stored_codes(fields["codes"], layout)
    scale = fields["scale"]
    zero = None
    if not symmetric:
        zero = fields["zero_point"]
        checked_zero_points(zero, scale.shape, bits)  # range first: the padding check relies on it
        _check_padding(fields["codes"], layout, zero)
    elif layout.packed:
        _check_padding(fields["codes"], layout, np.zeros(scale.shape, np.int32))
    return {"q": codes, "scale": scale, "zero_point": zero, "bits": bits, "group_size": group_size}


def _array_headers(
    archive: npzfile.Npz, layout: Layout, per_channel: bool
) -> dict[str, npzfile.Header]:
    """The .npy headers of codes, scale and (asymmetric) zero_point, each checked against
    the dtype and shape the header fields give before any of their data is read."""
    m, n = layout.m, layout.n
    if layout.packed:
        want, dtype = (m, ceil_div(n, 2)), np.dtype(np.uint8)
    else:
        want, dtype = (m, n), layout.dtype
    out = {"codes": archive.header("codes")}
    if out["codes"].dtype != dtype or out["codes"].shape != want:
        got = out["codes"].describe()
        raise ValueError(f"field 'codes' must be {dtype} of shape {want}, got {got}")
    scale = out["scale"] = archive.header("scale")
    if scale.dtype != np.float32:
        raise ValueError(f"field 'scale' must be float32, got {scale.dtype}")
    if per_channel_of(m, n, layout.group_size, scale.shape) != per_channel:
        raise ValueError(f"field 'per_channel' says {per_channel}, the scale shape not")
    if not layout.symmetric:
        zero = out["zero_point"] = archive.header("zero_point")
        if zero.dtype != np.int32:
            raise ValueError(f"field 'zero_point' must be int32, got {zero.dtype}")
        if zero.shape != scale.shape:
            raise ValueError(
                f"zero_point must have the scale's shape {scale.shape}, got {zero.shape}"
            )
    return out


def _stored_codes(raw: np.ndarray, layout: Layout) -> np.ndarray:
    """The ``(m, n)`` codes of the file's ``codes`` field (dtype and shape checked)."""
    if not layout.packed:
        return raw
    padded = np.zeros((layout.m, layout.row_bytes), np.uint8)
    padded[:, : raw.shape[1]] = raw
    return qlayout.unpack_rows(padded, layout)


def _check_padding(raw: np.ndarray, layout: Layout, zero: np.ndarray) -> None:
    """After an odd n, the high nibble of each row's last byte must hold the padding code."""
    if not layout.packed or layout.n % 2 == 0 or zero.shape != layout.param_shape:
        return  # a wrong zero-point shape is reported by from_arrays
    high = raw[:, -1] >> 4
    pad = layout.last_zero(zero) & 0xF
    bad = np.flatnonzero(high != pad)
    if bad.size:
        raise ValueError(
            f"field 'codes': row {int(bad[0])} has {int(high[bad[0]])} in its padding nibble, "
            f"not its last group's zero point {int(pad[bad[0]])}"
        )
