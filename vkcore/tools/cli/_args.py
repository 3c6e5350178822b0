"""argparse types for the subcommands: every option is checked while the command line is
parsed, before a device is created or a measurement starts, so a bad value is exit status
2 with one line naming the option (argparse's own error), never a traceback or lost work.

What depends on several options together (a ``--rows`` x ``--cols`` layer that must fit
in memory) is checked right after parsing by the subcommand's ``check(args)``
(:func:`after_parse`), which raises :class:`UsageError`; it is reported the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vkcore.base import hostmem


class UsageError(Exception):
    """A combination of options that cannot work; the message names the options."""


def after_parse(parser: argparse.ArgumentParser, check: Callable[[Any], None]) -> None:
    """Run ``check(args)`` once the command line is parsed, before the command starts; a
    :class:`UsageError` it raises is ``parser``'s usage error (exit status 2)."""
    parser.set_defaults(_after_parse=check, _parser=parser)  # names no option takes


def memory_check(what: str, nbytes: int) -> None:
    """A :class:`UsageError` naming ``what`` when ``nbytes`` cannot fit in the memory
    available (:func:`vkcore.base.hostmem.available`; unknown: nothing is refused)."""
    short = hostmem.shortfall(nbytes)
    if short is not None:
        raise UsageError(f"{what} {short}")


def _int(text: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An integer ``lo <= n`` (and ``<= hi`` when given)."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < lo or (hi is not None and value > hi):
            bounds = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}, got {value}")
        return value

    parse.__name__ = "integer"  # what argparse names in "invalid integer value"
    return parse


positive_int = int_range(1)
nonnegative_int = int_range(0)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


FLOAT32_MAX = 3.4028234663852886e38


def float32_range(text: str) -> float:
    """A finite number of float32's range (a scale applied to float32 data)."""
    value = finite_float(text)
    if abs(value) > FLOAT32_MAX:
        raise argparse.ArgumentTypeError(
            f"must be within float32's range (magnitude at most {FLOAT32_MAX:.7g}), got {text!r}"
        )
    return value


def nonnegative_float(text: str) -> float:
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def input_file(text: str) -> str:
    """An existing, readable regular file."""
    path = Path(text).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"not a file: {text!r}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"cannot read {text!r} (permission denied)")
    return str(path)


def cache_folder(text: str) -> str:
    """A folder that may not exist yet (an empty cache), but is not a file."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"not a folder: {text!r}")
    return str(path)


def output_file(*suffixes: str, requires: str | None = None) -> Callable[[str], str]:
    """A file that can be written: one of ``suffixes``, not a folder, in an existing folder
    this user may write to (and, when the file exists, writable itself); ``requires``
    names a module the writer needs (matplotlib for plots). Checked before any work
    starts, so a long run is never lost to a bad path at the end."""

    def parse(text: str) -> str:
        if requires is not None and importlib.util.find_spec(requires) is None:
            raise argparse.ArgumentTypeError(
                f"needs {requires}, which is not installed: pip install 'vkcore[plot]'"
            )
        path = Path(text).expanduser()
        if path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(
                f"must name a {' or '.join(suffixes)} file, got {text!r}"
            )
        if path.is_dir():
            raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file")
        folder = path.parent
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"folder {str(folder)!r} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK) or (
            path.exists() and not os.access(path, os.W_OK)
        ):
            raise argparse.ArgumentTypeError(f"cannot write {text!r} (permission denied)")
        return str(path)

    parse.__name__ = "file"
    return parse


def int_or_text(text: str) -> int | str:
    """A #define value: an integer where it is one, else the text as given."""
    try:
        return int(text, 10)
    except ValueError:
        return text


def number(text: str) -> int | float:
    """A push-constant value: an integer literal stays an int, else a finite float."""
    try:
        return int(text, 10)
    except ValueError:
        return finite_float(text)


def assignment(value: Callable[[str], Any]) -> Callable[[str], tuple[str, Any]]:
    """``NAME=VALUE`` with NAME an identifier and VALUE parsed by ``value``."""

    def parse(text: str) -> tuple[str, Any]:
        name, sep, raw = text.partition("=")
        if not sep or not name.isidentifier():
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
        return name, value(raw)

    parse.__name__ = "NAME=VALUE"
    return parse
