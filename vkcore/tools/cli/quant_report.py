"""``vkcore quant-report``: quantize a weight matrix and hold its errors to the RTN bounds.

The matrix is a ``.npy`` file, an ``.npz`` file (its only array, or the one ``--array``
names) given by ``--weights``, or a seeded random layer, optionally with one row scaled
up (``--outlier``). Prints, per granularity (per tensor, per channel, and groups of
``--group-size`` columns), the worst ratios to the worst-case bounds (``s/2``, and for
the output ``sum_g s_g/2 ||x_g||_1``) and the ratios to the typical values
(``s/sqrt(12)``, ``sqrt(sum_g s_g^2/12 ||x_g||_2^2)``), then the rows (and groups)
closest to their bound.
Exit 1 if a worst-case bound fails.

Checked before any device opens (exit 2, one line naming the option): ``--group-size``
from 0 to 2^31 - 1 (quantize's own range), ``--outlier`` within float32's range and small
enough that row 0 of the random layer stays finite in float32 (for the given ``--seed``
and ``--cols``), a
``--rows`` x ``--cols`` layer or a ``--weights`` matrix (from its header, before its data
is read) whose report fits in the memory available (:func:`report_bytes`), and a weights
file's values finite float32s; once the device is open, a row that one storage binding
holds (the device's ``maxStorageBufferRange``), before anything is printed.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from vkcore.device.device import Device
from vkcore.kernels import storage
from vkcore.kernels.quant import npzfile
from vkcore.kernels.quant.qlayout import GROUP_SIZE_MAX
from vkcore.kernels.quant.report import format_report, quant_error, ratio
from vkcore.kernels.quant.rtn import quantize
from vkcore.tools.cli._args import (
    FLOAT32_MAX,
    UsageError,
    after_parse,
    float32_range,
    input_file,
    int_range,
    memory_check,
    nonnegative_int,
    positive_int,
)

# Host memory a report takes, measured as peak RSS less the interpreter's (lavapipe's
# device memory included, with some margin): per weight, and per scale group for the
# per-group error arrays (their JSON lists with --json).
BYTES_PER_WEIGHT = 48
BYTES_PER_GROUP = 256
BYTES_PER_GROUP_JSON = 512


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quant-report", help="quantization error of a weight matrix against the RTN bounds"
    )
    p.add_argument(
        "--weights",
        type=input_file,
        help=".npy or .npz file with a 2-D float matrix (default: a random layer)",
    )
    p.add_argument("--array", metavar="NAME", help="the array of an .npz file that holds several")
    p.add_argument("--rows", type=positive_int, default=256, help="rows of the random layer")
    p.add_argument("--cols", type=positive_int, default=1024, help="columns of the random layer")
    p.add_argument(
        "--outlier",
        type=float32_range,
        default=100.0,
        help="scale of row 0 of the random layer (row 0 must stay within float32's range)",
    )
    p.add_argument("--bits", type=int_range(2, 8), default=8, help="bits per weight, 2 to 8")
    p.add_argument("--asymmetric", action="store_true", help="asymmetric (uint8, zero point)")
    p.add_argument(
        "--group-size",
        type=int_range(0, GROUP_SIZE_MAX),
        default=128,
        help="columns per scale group for the group-wise row (0: none)",
    )
    p.add_argument(
        "--seed", type=nonnegative_int, default=0, help="random seed for the layer and x"
    )
    p.add_argument(
        "--top",
        type=nonnegative_int,
        default=5,
        help="rows to list, closest to their bound first (0: none)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the per-row errors and bounds as JSON"
    )
    p.set_defaults(func=run)
    after_parse(p, check)


def report_bytes(m: int, n: int, group_size: int, as_json: bool, itemsize: int = 4) -> int:
    """Host memory the report of an ``m`` x ``n`` matrix of ``itemsize``-byte floats
    takes, about (per weight, and per parameter group of its three granularities)."""
    groups = m * (2 + (math.ceil(n / group_size) if group_size else 0))
    per_group = BYTES_PER_GROUP + (BYTES_PER_GROUP_JSON if as_json else 0)
    return m * n * (BYTES_PER_WEIGHT + itemsize) + groups * per_group


def check(args: argparse.Namespace) -> None:
    """The options together, before anything runs (a weights file: when it is read)."""
    if args.weights:
        return
    if args.array is not None:
        raise UsageError("--array needs --weights FILE.npz")
    r, c = args.rows, args.cols
    need = report_bytes(r, c, args.group_size, args.json)
    memory_check(f"--rows {r} --cols {c}: the report of a {r} x {c} layer", need)
    row = _row0(args.seed, c)
    with np.errstate(over="ignore"):
        scaled = (row * args.outlier).astype(np.float32)
    if not np.isfinite(scaled).all():
        largest = float(np.abs(row).max())
        raise UsageError(
            f"--outlier {args.outlier:g} makes row 0 of the random layer overflow float32 "
            f"(its largest weight would be {largest * abs(args.outlier):.3g}, float32 holds "
            f"{FLOAT32_MAX:.3g}); at most {FLOAT32_MAX / largest:.3g} for this --seed and --cols"
        )


def _row0(seed: int, cols: int) -> np.ndarray:
    """Row 0 of the random layer before --outlier (the generator fills row by row)."""
    return np.random.default_rng(seed).standard_normal(cols) / np.sqrt(cols)


def _random_layer(rows: int, cols: int, seed: int, outlier: float) -> np.ndarray:
    w = np.random.default_rng(seed).standard_normal((rows, cols))
    w /= np.sqrt(cols)  # in place: one float64 copy of the layer, not two
    w[0] *= outlier
    return w.astype(np.float32)


def _load(path: str, name: str | None, accept: Any) -> np.ndarray:
    """The array in a .npy file, or in an .npz file (its only one, or ``name``), read
    after ``accept(header)`` took its .npy header (dtype, shape). Any failure to open or
    read it (a damaged zip, a bad header) is a ValueError naming the file, so the command
    exits 2 with the reason."""
    try:
        with open(path, "rb") as fh:
            if npzfile.is_npy(fh):
                if name is not None:
                    raise _Refused(f"--array is for .npz files; {path!r} holds a single array")
                header = npzfile.read_header(fh)
                size = npzfile.file_size(fh)
                if size < header.offset + header.nbytes:
                    raise npzfile.Unreadable(
                        f"the file holds {size} bytes, its header declares "
                        f"{header.offset + header.nbytes} ({header.describe()})"
                    )
                accept(header)
                return npzfile.read_data(fh, header)
            with npzfile.Npz(fh) as npz:
                key = _member(npz.names, path, name)
                header = npz.header(key)
                accept(header)
                return npz.read(key, header)
    except _Refused as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # every failure to read is the file's fault
        raise ValueError(
            f"--weights {path!r} is not a readable .npy/.npz file: {type(exc).__name__}: {exc}"
        ) from exc


class _Refused(Exception):
    """A readable file that does not hold what the options ask for (its message says so)."""


def _member(names: list[str], path: str, name: str | None) -> str:
    if name is None and len(names) != 1:
        raise _Refused(
            f"--weights {path!r} holds {len(names)} arrays ({', '.join(names) or 'none'}): "
            "pick one with --array NAME"
        )
    key = names[0] if name is None else name
    if key not in names:
        raise _Refused(f"--array {key!r} is not in {path!r}; it holds {', '.join(names)}")
    return key


def _matrix(args: argparse.Namespace) -> np.ndarray:
    if not args.weights:
        return _random_layer(args.rows, args.cols, args.seed, args.outlier)

    def accept(header: npzfile.Header) -> None:
        shape = header.shape
        if len(shape) != 2 or 0 in shape:
            raise _Refused(f"--weights must hold a non-empty 2-D matrix, got shape {shape}")
        if header.dtype.kind != "f":
            raise _Refused(f"--weights must hold floats, got {header.dtype}")
        need = report_bytes(*shape, args.group_size, args.json, header.dtype.itemsize)
        try:
            memory_check(f"--weights {args.weights!r}: the report of a {shape} matrix", need)
        except UsageError as exc:
            raise _Refused(str(exc)) from None

    w = _load(args.weights, args.array, accept)
    with np.errstate(over="ignore", invalid="ignore"):
        bad = ~np.isfinite(w.astype(np.float32))
    if bad.any():
        i, j = (int(v) for v in np.argwhere(bad)[0])
        what = "not finite" if not np.isfinite(w[i, j]) else "beyond float32's range"
        raise ValueError(
            f"--weights: w[{i}, {j}] is {float(w[i, j])!r}, {what} (the weights must be finite "
            "float32 values)"
        )
    return w


def _summary(e: Any) -> dict[str, Any]:
    """Worst ratios to the bounds, and every per-row (per-group: ``(m, G)`` nested lists;
    the output errors stay per row) array, JSON-ready."""
    rows = {
        name: getattr(e, name).tolist()
        for name in ("scale", "max_err", "bound_max", "rms_err", "typical_rms")
        + ("out_err", "bound_out", "typical_out")
        if getattr(e, name) is not None
    }
    worst = {
        "max_err/bound_max": float(np.max(ratio(e.max_err, e.bound_max))),
        "rms_err/typical_rms": float(np.max(ratio(e.rms_err, e.typical_rms))),
    }
    if e.out_err is not None:
        worst["out_err/bound_out"] = float(np.max(ratio(e.out_err, e.bound_out)))
        worst["out_err/typical_out"] = float(np.max(ratio(e.out_err, e.typical_out)))
    return {"holds": bool(e.holds()), "worst": worst, "rows": rows}


def run(args: argparse.Namespace) -> int:
    w = _matrix(args)
    m, n = w.shape
    x = np.asarray(np.random.default_rng(args.seed + 1).standard_normal(n), dtype=np.float32)
    symmetric = not args.asymmetric
    kind = "symmetric" if symmetric else "asymmetric"
    ok = True
    report: dict[str, Any] = {"shape": [m, n], "bits": args.bits, "symmetric": symmetric}
    with Device(args.device) as dev:
        what = f"--weights {args.weights!r}" if args.weights else f"--cols {n}"
        storage.rows_per_buffer(dev, 4 * n, f"{what}: one row of w as float32")
        report["device"] = dev.info.name
        if not args.json:
            print(f"{m} x {n} weights, {args.bits}-bit {kind} RTN on {dev.info.name}")
        per_channel_error = None
        for label, options in _granularities(args.group_size):
            qt = quantize(w, bits=args.bits, symmetric=symmetric, device=dev, **options)
            e = quant_error(w, qt, x)
            ok &= e.holds()
            report[label.replace(" ", "_")] = _summary(e)
            if not args.json:
                print("  " + format_report(label, e))
            if label == "per channel":
                per_channel_error = e
            group_error = e if e.group_size is not None else None
    if args.json:
        report["holds"] = bool(ok)
        print(json.dumps(report))
        return 0 if ok else 1
    if args.top:
        _print_top(per_channel_error, args.top)
        if group_error is not None:
            _print_top_groups(group_error, args.top)
    print("all worst-case bounds hold" if ok else "A WORST-CASE BOUND FAILED")
    return 0 if ok else 1


def _granularities(group_size: int) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [
        ("per tensor", {"per_channel": False}),
        ("per channel", {"per_channel": True}),
    ]
    if group_size:
        out.append((f"group {group_size}", {"per_channel": True, "group_size": group_size}))
    return out


def _print_top_groups(e: Any, top: int) -> None:
    """The ``top`` groups closest to their worst-case bound."""
    closeness = ratio(e.max_err, e.bound_max).ravel()
    g = e.scale.shape[1]
    print(f"\ngroups of {e.group_size}, the {min(top, closeness.size)} closest to their bound:")
    print("  row/group  scale s_g   max|err|    s_g/2       rms err     s_g/sqrt12")
    for k in np.argsort(-closeness, kind="stable")[:top]:
        i, j = divmod(int(k), g)
        print(
            f"  {f'{i}/{j}':<10} {e.scale[i, j]:.4e}  {e.max_err[i, j]:.4e}  "
            f"{e.bound_max[i, j]:.4e}  {e.rms_err[i, j]:.4e}  {e.typical_rms[i, j]:.4e}"
        )


def _print_top(e: Any, top: int) -> None:
    """The ``top`` per-channel rows closest to their worst-case bound."""
    assert e.out_err is not None and e.bound_out is not None
    closeness = ratio(e.max_err, e.bound_max)
    print(f"\nper channel, the {min(top, len(closeness))} rows closest to their bound:")
    print(
        "  row   scale s_i   max|err|    s_i/2       rms err     s_i/sqrt12  |dy_i|      s_i/2|x|_1"
    )
    for i in np.argsort(-closeness, kind="stable")[:top]:
        print(
            f"  {i:<5} {e.scale[i]:.4e}  {e.max_err[i]:.4e}  {e.bound_max[i]:.4e}  "
            f"{e.rms_err[i]:.4e}  {e.typical_rms[i]:.4e}  {e.out_err[i]:.4e}  {e.bound_out[i]:.4e}"
        )
