"""``vkcore coldwarm``: cold versus warm pipeline creation, one fresh process per sample."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from vkcore.tools import coldwarm
from vkcore.tools.cli._args import (
    assignment,
    input_file,
    int_or_text,
    nonnegative_float,
    number,
    output_file,
    positive_int,
)
from vkcore.tools.coldwarm.shader import DEFAULT_ELEMENTS, ShaderCase


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
        default=None,
        help=f"comma-separated kernels (default: all: {','.join(coldwarm.KERNELS)}; "
        "none with --shader)",
    )
    p.add_argument(
        "--shader",
        metavar="PATH",
        type=input_file,
        default=None,
        help="also measure your own GLSL compute shader (a vkcore.Program from this file)",
    )
    p.add_argument(
        "--define",
        metavar="NAME=VALUE",
        action="append",
        type=assignment(int_or_text),
        default=[],
        help="a #define for --shader (repeatable)",
    )
    p.add_argument(
        "--include",
        metavar="DIR",
        action="append",
        default=[],
        help="an include folder for --shader (repeatable; its own folder is searched first)",
    )
    p.add_argument(
        "--push",
        metavar="NAME=VALUE",
        action="append",
        type=assignment(number),
        default=[],
        help="a push constant for --shader's dispatch (repeatable; others are 0)",
    )
    p.add_argument(
        "--elements",
        type=positive_int,
        default=DEFAULT_ELEMENTS,
        help=f"elements of each runtime array of --shader's buffers (default {DEFAULT_ELEMENTS})",
    )
    p.add_argument(
        "--conditions",
        default=",".join(coldwarm.CONDITIONS),
        help=f"comma-separated conditions (default: {','.join(coldwarm.CONDITIONS)})",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=3,
        help="fresh processes per kernel and condition (default 3)",
    )
    p.add_argument(
        "--max-seconds",
        type=nonnegative_float,
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
        type=output_file(".png", ".svg", ".pdf", requires="matplotlib"),
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
    shader = None
    if args.shader is not None:
        shader = ShaderCase(
            args.shader,
            defines=dict(args.define),
            include_dirs=tuple(args.include),
            elements=args.elements,
            push=dict(args.push),
        )
        shader.check(args.device)  # --push values, --elements: before anything runs
    elif args.define or args.push or args.include:
        raise ValueError("--define, --include and --push apply to --shader")
    if args.kernels is None:
        kernels = [] if shader is not None else list(coldwarm.KERNELS)
    else:
        kernels = coldwarm.check_names(_split(args.kernels), coldwarm.KERNELS, "--kernels")
    conditions = coldwarm.check_names(_split(args.conditions), coldwarm.CONDITIONS, "--conditions")
    progress = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    report = coldwarm.measure(
        kernels,
        conditions,
        args.repeats,
        max_seconds=args.max_seconds or None,
        selector=args.device,
        progress=progress,
        shader=shader,
    )
    # The report first: a plot that fails afterwards cannot lose it.
    print(json.dumps(report, indent=2) if args.json else coldwarm.format_report(report))
    if args.plot is None:
        return 0
    try:
        coldwarm.plot(report, args.plot)
    except (OSError, RuntimeError) as exc:
        print(f"vkcore: error: the plot could not be written: {exc}", file=sys.stderr)
        return 1
    print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


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
