"""``vkcore tune``: measure the per-device kernel parameters and store the fastest."""

from __future__ import annotations

import argparse
import json

from vkcore.device.device import Device
from vkcore.kernels import tuning
from vkcore.tools import tuner
from vkcore.tools.cli._args import positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="choose kernel parameters for this device by measurement")
    p.add_argument(
        "--repeats", type=positive_int, default=3, help="timed runs per candidate and path (median)"
    )
    p.add_argument("--reset", action="store_true", help="delete this device's stored choices")
    p.add_argument("--show", action="store_true", help="print the stored choices, measure nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with Device(args.device) as dev:
        path = tuning.tune_path(dev)
        if args.reset:
            removed = tuning.reset(dev)
            print(f"{'removed' if removed else 'no file at'} {path}")
            return 0
        if args.show:
            choices = tuning.load(dev)
            print(
                json.dumps({"path": str(path), "choices": choices}, indent=2)
                if args.json
                else f"{path}: {choices or 'no stored choices (defaults apply)'}"
            )
            return 0
        record = tuner.tune(dev, repeats=args.repeats)
    if args.json:
        print(json.dumps({"path": str(path), **record}, indent=2))
        return 0
    print(_clock_line(record["clock"]))
    for name, measured in record["measured"].items():
        shape = "x".join(str(d) for d in measured["shape"])
        paths = measured["median_seconds"]
        print(f"  {name} ({shape}; {', '.join(paths)}; chosen on the sum):")
        for value, total in measured["total_seconds"].items():
            parts = " + ".join(f"{t[value] * 1e3:.2f}" for t in paths.values())
            print(f"    {value:>4}: {total * 1e3:8.2f} ms = {parts}")
    chosen = ", ".join(f"{k}={v}" for k, v in record["choices"].items())
    print(f"chose {chosen}; stored in {path}")
    return 0


def _clock_line(clock: str) -> str:
    if clock == "wall":
        return (
            "wall time per call (host clock): this device's compute queue has no timestamps "
            "(timestampValidBits = 0)"
        )
    return "device time per call (timestamp queries)"
