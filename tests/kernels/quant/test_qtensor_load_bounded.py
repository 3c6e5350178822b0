"""QuantizedTensor.load checks a file's member list, its zip entries' declared sizes and
each array's .npy header before reading any array data: a crafted file (an extra member,
a member or header field declaring far more than the tensor needs, a dtype or shape in a
header that disagrees with the header fields, entries past the end of the file,
duplicate names) is a ValueError naming the file while the memory traced during the
call stays far below what the file declares."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from vkcore import QuantizedTensor as QT
from vkcore.base import hostmem
from vkcore.kernels.quant import qarrays

BIG = 1 << 27  # bytes a crafted member declares (128 MiB)
PEAK_MAX = 16 << 20  # traced bytes a refused load may take at most


@pytest.fixture
def fields(device, tmp_path):
    """The fields of a saved 3-bit asymmetric group tensor (shape (2, 5)), as a dict."""
    q = np.array([[0, 7, 3, 1, 5], [2, 2, 6, 4, 0]], np.uint8)
    qt = QT.from_arrays(
        q, np.ones((2, 2), np.float32), np.array([[1, 2], [3, 4]]), bits=3, group_size=3,
        device=device,
    )  # fmt: skip
    qt.save(tmp_path / "good.npz")
    with np.load(tmp_path / "good.npz") as f:
        return {k: f[k] for k in f.files}


def npy_header(descr, shape, fortran=False):
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": descr, "fortran_order": fortran, "shape": shape}
    )
    return buf.getvalue()


def npy(arr):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def write(path, members, deflated=(), zeros=None):
    """A zip of ``members`` ({name: .npy bytes}, names without .npy), stored except the
    names in ``deflated``; ``zeros`` = (name, header, count): a deflated member of that
    header followed by ``count`` zero bytes, written in chunks (the test never holds it)."""
    with zipfile.ZipFile(path, "w", compresslevel=1) as zf:
        for name, data in members.items():
            kind = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
            zf.writestr(name + ".npy", data, compress_type=kind)
        if zeros is not None:
            name, header, count = zeros
            info = zipfile.ZipInfo(name + ".npy")
            info.compress_type = zipfile.ZIP_DEFLATED
            chunk = bytes(1 << 20)
            with zf.open(info, "w") as out:
                out.write(header)
                for _ in range(count // len(chunk)):
                    out.write(chunk)
    return path


def members_of(fields, **changes):
    out = {k: npy(v) for k, v in fields.items()}
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def refused(path, device, match="."):
    """Load ``path``: it must be refused naming the file, with a small traced peak."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with pytest.raises(ValueError, match=match) as info:
            QT.load(path, device=device)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert path.name in str(info.value)
    assert peak < PEAK_MAX, f"{peak} bytes traced while refusing {path.name}: {info.value}"
    return str(info.value)


def test_an_extra_member_is_refused_before_any_is_read(fields, tmp_path, device):
    """The issue's file: the saved fields and an extra deflated member of zeros."""
    path = write(
        tmp_path / "extra.npz", members_of(fields),
        zeros=("padding", npy_header("|u1", (BIG,)), BIG),
    )  # fmt: skip
    assert path.stat().st_size < BIG // 100
    assert "extra ['padding']" in refused(path, device)


def test_an_extra_member_declaring_a_huge_array(fields, tmp_path, device):
    """A stored member whose .npy header declares 1 GiB and holds 16 bytes."""
    extra = npy_header("<f4", (1 << 28,)) + bytes(16)
    refused(write(tmp_path / "extra.npz", members_of(fields, notes=extra)), device, "extra")


@pytest.mark.parametrize(
    ("name", "header", "match"),
    [
        ("codes", npy_header("|u1", (BIG,)), "field 'codes' must be uint8 of shape \\(2, 3\\)"),
        ("codes", npy_header("<f8", (BIG // 8,)), "field 'codes' must be uint8 of shape"),
        ("codes", npy_header("|u1", (2, BIG // 2)), "field 'codes' must be uint8 of shape"),
        ("scale", npy_header("<f4", (2, BIG // 8)), "scale must have shape"),
        ("scale", npy_header("<f8", (2, 2, BIG // 32)), "'scale' must be float32"),
        ("zero_point", npy_header("<i4", (BIG // 4,)), "zero_point must have the scale's"),
        ("zero_point", npy_header("<i8", (2, BIG // 16)), "must be int32"),
        ("format", npy_header("<U64", (BIG // 256,)), "field 'format' declares"),
        ("digest", npy_header("<U1", (BIG // 4,)), "field 'digest' declares"),
        ("shape", npy_header("<i8", (BIG // 8,)), "field 'shape' declares"),
        ("bits", npy_header("<i8", (BIG // 8,)), "field 'bits' declares"),
    ],
)
def test_a_member_whose_header_declares_too_much(fields, tmp_path, device, name, header, match):
    """Deflated members whose zip entry and .npy header agree on a size the tensor never
    needs: refused from the header, before the data is decompressed."""
    members = members_of(fields)
    del members[name]
    path = write(tmp_path / f"big-{name}.npz", members, zeros=(name, header, BIG))
    refused(path, device, match)


def test_a_header_that_disagrees_with_its_zip_entry(fields, tmp_path, device):
    """A stored member whose .npy header declares 1 GiB of codes (the shape field agrees)
    but whose zip entry holds 100 bytes of data."""
    shape = (1 << 15, 1 << 16)  # packed codes: (2^15, 2^15) bytes
    members = members_of(
        fields,
        shape=npy(np.array(shape, np.int64)),
        codes=npy_header("|u1", (1 << 15, 1 << 15)) + bytes(100),
    )
    message = refused(write(tmp_path / "short.npz", members), device, "not a readable")
    assert "codes" in message and "declares" in message


def _claim(raw, member, size):
    """``raw`` with the zip entries of ``member`` claiming ``size`` bytes (stored)."""
    raw = bytearray(raw)
    name = member.encode()
    for signature, sizes_at, name_at in ((b"PK\x01\x02", 20, 46), (b"PK\x03\x04", 18, 30)):
        at = 0
        while (at := raw.find(signature, at)) >= 0:
            if raw[at + name_at : at + name_at + len(name)] == name:
                raw[at + sizes_at : at + sizes_at + 8] = struct.pack("<II", size, size)
            at += 4
    return bytes(raw)


def test_entries_past_the_end_of_the_file(fields, tmp_path, device):
    """A truncated file whose central directory survived: the codes' entry and header
    agree on 1 GiB, the file holds a few hundred bytes."""
    header = npy_header("|u1", (1 << 15, 1 << 15))
    members = members_of(fields, shape=npy(np.array([1 << 15, 1 << 16], np.int64)))
    members["codes"] = header + bytes(16)
    path = write(tmp_path / "cut.npz", members)
    path.write_bytes(_claim(path.read_bytes(), "codes.npy", len(header) + (1 << 30)))
    message = refused(path, device, "not a readable")
    assert "past the end" in message


def test_the_same_member_twice(fields, tmp_path, device):
    """A zip may hold two entries of one name (numpy reads the last); refused."""
    path = tmp_path / "twice.npz"
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "w") as zf:
        for key, value in fields.items():
            zf.writestr(key + ".npy", npy(value))
        zf.writestr("codes.npy", npy(fields["codes"]))
    assert "twice" in refused(path, device, "not a readable")
    path2 = tmp_path / "alias.npz"  # 'codes' and 'codes.npy' are the same array to numpy
    with zipfile.ZipFile(path2, "w") as zf:
        for key, value in fields.items():
            zf.writestr(key + ".npy", npy(value))
        zf.writestr("codes", npy(fields["codes"]))
    assert "twice" in refused(path2, device, "not a readable")


@pytest.mark.parametrize("key", sorted(set(qarrays.HEADER_FIELDS) - {"format"}))
def test_a_missing_header_field_is_a_valueerror(fields, tmp_path, device, key):
    members = members_of(fields)
    del members[key]
    message = refused(write(tmp_path / f"no-{key}.npz", members), device)
    assert f"missing ['{key}']" in message or "not a saved" in message


def test_damaged_headers_and_entries(fields, tmp_path, device):
    """Object arrays, .npy versions not read, a header numpy cannot parse, a header field
    of another kind, a file cut short: each a ValueError naming the file."""
    cases = {
        "object": npy_header("|O", (2, 3)) + bytes(48),
        "version3": b"\x93NUMPY\x03\x00" + npy_header("|u1", (2, 3))[8:] + bytes(6),
        "noise": b"\x93NUMPY\x01\x00\x10\x00" + b"{'descr': 1 }   ",
        "nomagic": b"not an array at all",
    }
    for label, codes in cases.items():
        path = write(tmp_path / f"{label}.npz", members_of(fields, codes=codes))
        refused(path, device, "not a readable")
    for key in ("bits", "symmetric", "shape"):
        members = members_of(fields, **{key: npy(np.array(["x"]))})
        refused(write(tmp_path / f"kind-{key}.npz", members), device, f"field '{key}' must be")
    path = write(tmp_path / "whole.npz", members_of(fields))
    data = path.read_bytes()
    for cut in (len(data) - 10, len(data) // 2, 30, 5):
        short = tmp_path / f"cut{cut}.npz"
        short.write_bytes(data[:cut])
        refused(short, device, "not a readable")


def test_a_valid_load_takes_memory_of_the_tensor_only(fields, device, tmp_path):
    """A 4 MiB tensor loads with a traced peak of a few times its size, not more; what
    numpy writes still loads: deflated members (np.savez_compressed) and a Fortran-order
    array, bit for bit."""
    rng = np.random.default_rng(0)
    q = rng.integers(-7, 8, (512, 8192)).astype(np.int8)
    qt = QT.from_arrays(q, np.ones(512, np.float32), bits=4, device=device)
    qt.save(tmp_path / "w.npz")
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        back = QT.load(tmp_path / "w.npz", device=device)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(back.q, q)
    assert peak < 8 * q.nbytes, peak
    good = tmp_path / "good.npz"
    np.savez(good, **fields)
    want = QT.load(good, device=device)
    squeezed = tmp_path / "squeezed.npz"
    np.savez_compressed(squeezed, **fields)
    back = QT.load(squeezed, device=device)
    assert np.array_equal(back.stored_rows(), want.stored_rows())
    assert np.array_equal(back.zero_point, want.zero_point)
    fortran = {**fields, "scale": np.asfortranarray(fields["scale"])}
    path = tmp_path / "fortran.npz"
    np.savez(path, **fortran)
    assert b"'fortran_order': True" in path.read_bytes()
    assert np.array_equal(QT.load(path, device=device).scale, fields["scale"])


def test_a_tensor_bigger_than_the_available_memory(fields, tmp_path, device, monkeypatch):
    """The declared arrays are held to the memory available, before they are read."""
    path = write(tmp_path / "w.npz", members_of(fields))
    monkeypatch.setattr(hostmem, "available", lambda: 100)
    with pytest.raises(ValueError, match="w.npz.*needs about .* of memory, 100 B available"):
        QT.load(path, device=device)
    monkeypatch.setattr(hostmem, "available", lambda: 1 << 20)
    assert QT.load(path, device=device).shape == (2, 5)
    monkeypatch.setattr(hostmem, "available", lambda: None)  # unknown: nothing refused
    assert QT.load(path, device=device).shape == (2, 5)
