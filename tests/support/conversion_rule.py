"""The sources and the oracle of vkcore's one conversion rule (asarray, Tensor.write,
Program arguments), written apart from vkcore.compute.tensor.convert."""

from __future__ import annotations

import numpy as np

NUMERIC = [
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]


def _sources() -> dict[str, object]:
    """Every kind of argument: Python sequences, numpy arrays of each numeric dtype, a
    byte-swapped and a strided view, values out of range, floats with fractions, floats
    beyond float32, non-numbers."""
    out: dict[str, object] = {
        "list-int": [0, 1, 2, 100],
        "tuple-int": (3, 2, 1, 0),
        "list-float": [0.5, 1.0, 2.25, 100.0],
        "list-fraction": [0.1, 0.2, 0.3, 1.7],
        "list-beyond-float32": [1e39, -1e39, 0.0, 1.0],
        "list-300": [300, 0, 0, 0],
        "list-negative": [-1, 0, 1, 2],
        "list-2^31": [2**31, 0, 0, 0],
        "list-2^32": [2**32, 0, 0, 0],
        "list-2^24+1": [2**24 + 1, 0, 0, 0],
        "big-endian-int32": np.array([5, 6, 7, 8], ">i4"),
        "big-endian-float32": np.array([0.5, 1.5, 2.5, 3.5], ">f4"),
        "strided": np.arange(8, dtype=np.int64)[::2],
        "bool": np.array([True, False, True, True]),
        "complex": np.ones(4, np.complex64),
        "object": np.array([1, 2, 3, None], dtype=object),
        "strings": np.array(["a", "b", "c", "d"]),
    }
    for name in NUMERIC:
        out[f"array-{name}"] = np.array([0, 1, 2, 100], dtype=name)
    return out


SOURCES = _sources()


def oracle(x: object, dtype: str) -> np.ndarray | type[Exception]:
    """The documented rule, written apart from vkcore.compute.tensor.convert: the values as
    ``dtype``, or the exception the argument gets."""
    arr = np.asarray(x)
    dt = np.dtype(dtype)
    if arr.dtype.kind not in "fiu":
        return TypeError
    if dt.kind == "f":
        with np.errstate(over="ignore"):
            return arr.astype(dt)
    if arr.dtype.kind == "f":
        return TypeError
    info = np.iinfo(dt)
    if any(not info.min <= int(v) <= info.max for v in arr.reshape(-1).tolist()):
        return ValueError
    return arr.astype(dt)
