"""``vkcore bench``: kernels against their baselines; ``--quick``, ``--json``, ``--plot``;
``--probes`` for the measurements behind the explanations in docs/performance.md;
``--peers`` for vkcore against the other Python Vulkan packages (``make peers``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vkcore.device.device import Device
from vkcore.tools import bench, probes
from vkcore.tools.bench import compare, peers
from vkcore.tools.cli._args import (
    UsageError,
    after_parse,
    cache_folder,
    output_file,
    positive_int,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench", help="measure every kernel against its baseline (ratios, bandwidth)"
    )
    p.add_argument("--quick", action="store_true", help="fewer shapes and repeats (under a minute)")
    p.add_argument(
        "--json", action="store_true", help="print every sample and the environment as JSON"
    )
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        type=output_file(".png", requires="matplotlib"),
        help="write ratios and the roofline to a PNG (matplotlib; checked before the run)",
    )
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help="repetitions per comparison (default 5 quick, 11 full); with --peers, runs of "
        f"every package (default {peers.DEFAULT_RUNS})",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--check", action="store_true", help="exit 1 when a measured target is missed")
    p.add_argument(
        "--probes",
        action="store_true",
        help="only the probes behind docs/performance.md (first-touch pages, OpenBLAS "
        "spin, dequantize, softmax passes), not the comparisons",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="no run: the targets of two sets of --json outputs (comma-separated files "
        "each) side by side, medians and after/before",
    )
    add_peer_options(p)
    p.set_defaults(func=run)
    after_parse(p, check_peer_options)


def add_peer_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--peers",
        action="store_true",
        help="only vkcore against Kompute (kp), wgpu-py and vkdispatch on one tiny kernel, "
        "each in its own process (make peers installs them)",
    )
    p.add_argument(
        "--peers-venv",
        metavar="DIR",
        type=cache_folder,
        help=f"the peers' virtual environment (default {peers.DEFAULT_VENV})",
    )
    p.add_argument(
        "--peers-json",
        metavar="FILE.json",
        type=output_file(".json"),
        help="where --peers writes its results (default: peers.json in the cache folder)",
    )


# What --peers cannot be combined with: it runs alone and writes no plot.
NOT_WITH_PEERS = ("quick", "plot", "check", "probes", "compare")


def check_peer_options(args: Any) -> None:
    if not args.peers:
        for name in ("peers_venv", "peers_json"):
            if getattr(args, name) is not None:
                raise UsageError(f"--{name.replace('_', '-')} is for --peers")
        return
    for name in NOT_WITH_PEERS:
        if getattr(args, name):
            raise UsageError(f"--peers runs alone, not with --{name}")


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return run_compare(args)
    if args.probes:
        return run_probes(args)
    if args.peers:
        return run_peers(args)
    with Device(args.device, timed=True) as dev:  # rows report device time too
        result = bench.run_bench(
            dev, quick=args.quick, repeats=args.repeats, progress=not args.no_progress
        )
    # The results first: a plot that fails afterwards cannot lose them.
    print(bench.to_json(result) if args.json else bench.format_table(result), flush=True)
    status = 0
    if args.plot:
        try:
            bench.write_plot(result, args.plot)
            print(f"plot written to {args.plot}", file=sys.stderr)
        except (OSError, RuntimeError, ImportError) as exc:
            print(f"vkcore: error: the plot could not be written: {exc}", file=sys.stderr)
            status = 1
    missed = [t for t in result["targets"] if t["met"] is False]
    if result["errors"]:
        return 1  # a comparison could not run: say so in the exit status too
    return 1 if (args.check and missed) or status else 0


def run_compare(args: argparse.Namespace) -> int:
    try:
        before, after = (compare.load_runs(side) for side in args.compare)
    except compare.CompareError as exc:
        print(f"vkcore: error: --compare: {exc}", file=sys.stderr)
        return 2
    rows = compare.compare(before, after)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(compare.format_compare(rows, len(before), len(after)))
    return 0


def run_probes(args: argparse.Namespace) -> int:
    with Device(args.device, timed=True) as dev:
        results = probes.run_probes(dev, repeats=args.repeats or 7)
        header = f"device {dev.info.name}  driver {dev.info.driver_name} {dev.info.driver_info}"
    if args.json:
        print(json.dumps({"device": header, "probes": results}, indent=2))
    else:
        print(header + "\n" + probes.format_probes(results))
    return 0


def run_peers(args: argparse.Namespace) -> int:
    """The table (or the JSON) first, then the file; status 1 only when vkcore's own
    figures failed: a peer that is missing or fails is a column that says so."""
    venv = Path(args.peers_venv or peers.DEFAULT_VENV)
    result = peers.run_peers(
        venv, runs=args.repeats or peers.DEFAULT_RUNS, progress=not args.no_progress
    )
    print(json.dumps(result, indent=2) if args.json else peers.format_table(result), flush=True)
    path = Path(args.peers_json) if args.peers_json else peers.default_json_path()
    try:
        peers.write_json(result, path)
    except OSError as exc:
        print(f"vkcore: error: {path} could not be written: {exc}", file=sys.stderr)
        return 1
    print(f"results written to {path}", file=sys.stderr)
    return 0 if result["packages"]["vkcore"]["status"] == "ok" else 1
