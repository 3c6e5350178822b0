"""``vkcore coldwarm``: cold versus warm pipeline creation, one fresh process per sample."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from typing import TextIO

from .. import coldwarm


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "coldwarm",
        help="measure cold vs warm pipeline creation in fresh processes",
        description="Time device creation, SPIR-V, shader module, vkCreateComputePipelines, "
        "the first and second dispatch and the time to the first result, each in a fresh "
        "Python process, with no cache (cold), vkcore's caches, the driver's disk cache, or "
        "all of them warm. Every condition uses its own temporary folders, removed afterwards; "
        "your cache folders are never read or written.",
    )
    p.add_argument(
        "--kernels",
        default=",".join(coldwarm.KERNELS),
        help=f"comma-separated kernels (default: all: {','.join(coldwarm.KERNELS)})",
    )
    p.add_argument(
        "--conditions",
        default=",".join(coldwarm.CONDITIONS),
        help=f"comma-separated conditions (default: {','.join(coldwarm.CONDITIONS)})",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="fresh processes per kernel and condition (default 3)",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=100.0,
        help="start no repetition that would end past this many seconds; the first always "
        "runs (default 100, 0 = no limit)",
    )
    p.add_argument(
        "--json", action="store_true", help="print the whole report (every sample) as JSON"
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="draw grouped bars per stage and condition "
        "(needs matplotlib: pip install 'vkcore[plot]')",
    )
    p.add_argument("--list", action="store_true", help="list the kernels and conditions, then exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("kernels:    " + " ".join(coldwarm.KERNELS))
        for cond in coldwarm.CONDITIONS.values():
            print(f"condition:  {cond.name:<8} {cond.description}")
        return 0
    kernels = coldwarm.check_names(_split(args.kernels), coldwarm.KERNELS, "--kernels")
    conditions = coldwarm.check_names(_split(args.conditions), coldwarm.CONDITIONS, "--conditions")
    if args.repeats < 1:
        raise ValueError(f"--repeats must be at least 1, got {args.repeats}")
    if args.max_seconds < 0:
        raise ValueError(f"--max-seconds must be 0 (no limit) or positive, got {args.max_seconds}")
    if args.plot is not None:
        _check_plot_target(args.plot)
        if importlib.util.find_spec("matplotlib") is None:
            print(
                "vkcore: error: --plot needs matplotlib: pip install 'vkcore[plot]'",
                file=sys.stderr,
            )
            return 2
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    report = coldwarm.measure(
        kernels,
        conditions,
        args.repeats,
        max_seconds=args.max_seconds or None,
        selector=args.device,
        progress=progress,
    )
    if args.plot is not None:
        coldwarm.plot(report, args.plot)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(coldwarm.format_report(report))
        if args.plot is not None:
            print(f"\nplot written to {args.plot}")
    return 0


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _check_plot_target(path: str) -> None:
    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"--plot must name a .png, .svg or .pdf file, got {path!r}")
    if not target.parent.resolve().is_dir():
        raise ValueError(f"--plot: folder {str(target.parent)!r} does not exist")


class ProgressBar:
    """One redrawn line on a terminal: bar, count and what runs now."""

    def __init__(self, stream: TextIO, width: int = 28) -> None:
        self.stream = stream
        self.width = width

    def __call__(self, done: int, total: int, label: str) -> None:
        filled = self.width * done // max(total, 1)
        line = f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {label}"
        self.stream.write(f"{line:<80}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
