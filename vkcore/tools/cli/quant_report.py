"""``vkcore quant-report``: quantize a weight matrix and hold its errors to the RTN bounds.

The matrix is a ``.npy`` file, an ``.npz`` file (its only array, or the one ``--array``
names) given by ``--weights``, or a seeded random layer, optionally with one row scaled
up (``--outlier``). Prints, per granularity (per tensor, per channel, and groups of
``--group-size`` columns), the worst ratios to the worst-case bounds (``s/2``, and for
the output ``sum_g s_g/2 ||x_g||_1``) and the ratios to the typical values
(``s/sqrt(12)``, ``sqrt(sum_g s_g^2/12 ||x_g||_2^2)``), then the rows (and groups)
closest to their bound.
Exit 1 if a worst-case bound fails.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from vkcore.device.device import Device
from vkcore.kernels.quant.report import format_report, quant_error, ratio
from vkcore.kernels.quant.rtn import quantize
from vkcore.tools.cli._args import (
    finite_float,
    input_file,
    int_range,
    nonnegative_int,
    positive_int,
)


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
        "--outlier", type=finite_float, default=100.0, help="scale of row 0 of the random layer"
    )
    p.add_argument("--bits", type=int_range(2, 8), default=8, help="bits per weight, 2 to 8")
    p.add_argument("--asymmetric", action="store_true", help="asymmetric (uint8, zero point)")
    p.add_argument(
        "--group-size",
        type=nonnegative_int,
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


def _load(path: str, name: str | None) -> np.ndarray:
    """The array in a .npy file, or in an .npz file (its only one, or ``name``). Any
    failure to open or read it (a damaged zip: whatever zipfile or numpy raise) is a
    ValueError naming the file, so the command exits 2 with the reason."""
    try:
        with open(path, "rb") as fh:
            data = np.load(fh, allow_pickle=False)
            if isinstance(data, np.ndarray):
                if name is not None:
                    raise _Refused(f"--array is for .npz files; {path!r} holds a single array")
                return data
            with data:
                return _member(data, path, name)
    except _Refused as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # every failure to read is the file's fault
        raise ValueError(
            f"--weights {path!r} is not a readable .npy/.npz file: {type(exc).__name__}: {exc}"
        ) from exc


class _Refused(Exception):
    """A readable file that does not hold what the options ask for (its message says so)."""


def _member(data: Any, path: str, name: str | None) -> np.ndarray:
    names = list(data.files)
    if name is None and len(names) != 1:
        raise _Refused(
            f"--weights {path!r} holds {len(names)} arrays ({', '.join(names) or 'none'}): "
            "pick one with --array NAME"
        )
    key = names[0] if name is None else name
    if key not in names:
        raise _Refused(f"--array {key!r} is not in {path!r}; it holds {', '.join(names)}")
    return np.asarray(data[key])


def _matrix(args: argparse.Namespace) -> np.ndarray:
    if args.weights:
        w = _load(args.weights, args.array)
        if w.ndim != 2 or w.size == 0:
            raise ValueError(f"--weights must hold a non-empty 2-D matrix, got shape {w.shape}")
        if w.dtype.kind != "f":
            raise ValueError(f"--weights must hold floats, got {w.dtype}")
        return w
    if args.array is not None:
        raise ValueError("--array needs --weights FILE.npz")
    rng = np.random.default_rng(args.seed)
    w = np.asarray(rng.standard_normal((args.rows, args.cols)) / np.sqrt(args.cols))
    w[0] *= args.outlier
    return w.astype(np.float32)


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
