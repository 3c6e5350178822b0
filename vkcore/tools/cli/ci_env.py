"""``vkcore ci-env``: the environment of a deterministic CI run on lavapipe, as shell lines."""

from __future__ import annotations

import argparse
import shlex

from vkcore.tools.ci import THREADS_MAX, lavapipe_settings
from vkcore.tools.cli._args import int_range


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ci-env",
        help="print the settings of a deterministic CI run on lavapipe (eval them, or "
        "append them to $GITHUB_ENV with --github)",
    )
    p.add_argument(
        "--threads",
        type=int_range(1, THREADS_MAX),
        default=None,
        help="LP_NUM_THREADS (default: the CPU count)",
    )
    p.add_argument("--github", action="store_true", help="NAME=value lines (for >> $GITHUB_ENV)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name, value in lavapipe_settings(args.threads).items():
        print(f"{name}={value}" if args.github else f"export {name}={shlex.quote(value)}")
    return 0
