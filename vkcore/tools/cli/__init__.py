"""The ``vkcore`` command line (also ``python -m vkcore``).

Each subcommand lives in its own module of this package with ``register(subparsers)``,
which adds a parser whose ``func(args) -> int`` runs it. Exit status: 0 success, 1 a
failed check, 2 bad usage. Errors print one line; ``--debug`` shows the traceback.

Every option's value is checked while the command line is parsed (the types in
``_args``, then a subcommand's check of its options together, such as a layer that must
fit in memory), before a device is opened or a measurement starts: a bad number, a missing
input file or an output path that cannot be written is status 2 at once, with argparse's
one-line message naming the option. ``main`` returns that status rather than raising
SystemExit, as it does for every other outcome.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from vkcore import __version__
from vkcore.tools.cli._args import UsageError

# Subcommand modules, in the order ``--help`` lists them.
SUBCOMMANDS = ["info", "demo", "cache", "coldwarm", "quant_report", "bench", "tune", "ci_env"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vkcore",
        description="GPU compute kernels through Vulkan (softmax, RTN quantization, matvec, "
        "top-k and sampling) with a persisted pipeline cache.",
    )
    parser.add_argument("--version", action="version", version=f"vkcore {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    parser.add_argument(
        "--device", default=None, help="device index or name substring (default: $VKCORE_DEVICE)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check = getattr(args, "_after_parse", None)
        if check is not None:  # what depends on several options (cli._args.after_parse)
            try:
                check(args)
            except UsageError as exc:
                args._parser.error(str(exc))
    except SystemExit as exc:  # bad usage (2), or --help/--version (0): already printed
        return exc.code if isinstance(exc.code, int) else 2
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="vkcore: %(levelname)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("vkcore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`vkcore cache ls | head -1`): not an error
        # Python would report the pipe again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, TypeError) as exc:
        if args.debug:
            raise
        print(f"vkcore: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - one clear line, traceback only with --debug
        if args.debug:
            raise
        print(f"vkcore: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
