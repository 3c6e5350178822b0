"""Environment variables read by vkcore, in one place, with one rule for bad values.

Every ``VKCORE_*`` variable, its values and its default, and the rule for a value that
cannot be used (one warning, then the default; never an exception, never another
result) are in docs/environment.md; the functions below are that rule.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger("vkcore")

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()
T = TypeVar("T")


def _text(name: str) -> str | None:
    """The variable's value stripped, or None when it is unset or blank."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


# The variables that choose a kernel's variant at every call (not once per device or
# process): an exact repeat of a kept call (vkcore.compute.repeat) holds only under the
# same values. (LP_NUM_THREADS, read for planning too, sizes lavapipe's thread pool when
# the device is created, and the plans made from it are memoized by shape.)
PER_CALL = ("VKCORE_TEXEL", "VKCORE_DEVICE_SCALES")


def per_call_values() -> tuple[str | None, ...]:
    """The raw values of :data:`PER_CALL` (parsed where they are used)."""
    return tuple(map(os.environ.get, PER_CALL))


def warn_ignored(name: str, value: str, why: str, default: object) -> None:
    """The one warning for an unusable value (once per variable and value)."""
    with _warned_lock:
        if (name, value) in _warned:
            return
        _warned.add((name, value))
    log.warning("ignoring %s=%r: %s; using the default (%s)", name, value, why, default)


def env_flag(name: str, default: bool = False) -> bool:
    """``1 true yes on`` is True, ``0 false no off`` is False (any case); unset or blank is
    ``default``; anything else warns once and is ``default``."""
    value = _text(name)
    if value is None:
        return default
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    warn_ignored(name, value, f"a flag is one of {'/'.join(_TRUE + _FALSE)}", default)
    return default


def env_int(name: str, default: int, *, lo: int, hi: int) -> int:
    """A decimal integer in ``[lo, hi]``; unset or blank is ``default``; anything else
    warns once and is ``default``."""
    value = _text(name)
    if value is None:
        return default
    # ASCII digits only (int() also takes "1_000" and other scripts' digits), bounded length
    number = int(value) if re.fullmatch(r"[+-]?[0-9]{1,40}", value) else None
    if number is None or not lo <= number <= hi:
        warn_ignored(name, value, f"expected an integer from {lo} to {hi}", default)
        return default
    return number


def env_dir(name: str, *, must_exist: bool) -> Path | None:
    """A folder path (``~`` expanded), or None when unset, blank or unusable (warned once):
    not a folder when it exists, or missing when ``must_exist``."""
    value = _text(name)
    if value is None:
        return None
    try:
        path = Path(value).expanduser()
        exists, is_dir = path.exists(), path.is_dir()
    except (OSError, RuntimeError, ValueError) as exc:  # unresolvable ~user, too long, NUL
        warn_ignored(name, value, f"not a usable path ({exc})", "unset")
        return None
    if (exists and not is_dir) or (must_exist and not exists):
        warn_ignored(name, value, "not a folder" if exists else "no such folder", "unset")
        return None
    return path


def env_choice(name: str, pick: Callable[[str | None], T]) -> T:
    """``pick(value)``; when it raises ValueError on the variable's value, one warning and
    ``pick(None)`` (its default)."""
    value = _text(name)
    if value is None:
        return pick(None)
    try:
        return pick(value)
    except ValueError as exc:
        warn_ignored(name, value, str(exc), "the default choice")
        return pick(None)


def cache_dir() -> Path:
    """Root of vkcore's on-disk caches, following the Mesa/pip/Triton convention."""
    explicit = env_dir("VKCORE_CACHE_DIR", must_exist=False)
    if explicit is not None:
        return explicit
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "vkcore"
    if xdg.strip():  # the XDG spec: a relative value is invalid and ignored
        warn_ignored("XDG_CACHE_HOME", xdg, "not an absolute path", "~/.cache")
    return Path.home() / ".cache" / "vkcore"


def validation_requested() -> bool:
    return env_flag("VKCORE_VALIDATION")
