"""The tuned kernel parameters of a device: the file the kernels read, and its checks.

Parameters whose best value differs between devices:

* ``softmax_workgroup``: lavapipe runs a one-subgroup workgroup several times faster than
  a larger one, a GPU wants hundreds of invocations;
* ``matvec_rows`` and ``matvec_f32_rows``: rows per matvec workgroup (each loaded block of
  x serves that many rows; more rows, more registers), INT8 and float32 kernels;
* ``quant_rows``: rows per quantize/dequantize invocation;
* ``matvec_dot``: 1 to use OpSDot where the device has it but does not mark it accelerated.

The values are chosen by measurement (:mod:`vkcore.tools.tuner`, ``vkcore tune``) and stored
beside the pipeline cache, in ``<cache root>/pipeline/<pipeline-cache file name>.tune.json``:
the same key as the pipeline cache, so another GPU, driver or driver version never reads
these choices. Kernels ask :func:`choice`; with no file they use their defaults (the
values measured best on lavapipe). The rows parameters are specialization constants: no
new SPIR-V per value. This module imports no kernel and not the package itself: the
kernels import it.

A tune file is checked like every cache file before one value is used, and a value the
tuner could not have stored on this device is ignored with one warning (the checks and
the format: docs/caches.md, "Tune file format").
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vkcore.base import cachefs
from vkcore.base.per_device import PerDeviceMap
from vkcore.device.device import Device
from vkcore.device.pipelines.cache_file import CacheKey, pipeline_dir
from vkcore.errors import shown

log = logging.getLogger("vkcore")

FORMAT = 2
SUFFIX = ".tune.json"
MAX_BYTES = 1 << 20
# Parameters a tune file may hold; the rows parameters with the values worth timing (and
# the only ones accepted from a file).
PARAMETERS = ("softmax_workgroup", "matvec_rows", "matvec_f32_rows", "quant_rows", "matvec_dot")
ROW_CANDIDATES: dict[str, tuple[int, ...]] = {
    "matvec_rows": (4, 8, 16, 32),
    "matvec_f32_rows": (4, 8, 16),
    "quant_rows": (1, 2, 4, 8),
}

_choices: PerDeviceMap[dict[str, Any]] = PerDeviceMap()  # never keeps a device alive
_lock = threading.Lock()


def tune_path(device: Device) -> Path:
    """Where ``device``'s choices live: next to its pipeline-cache file, same key."""
    folder = device.pipeline_cache_folder or pipeline_dir()
    return folder / (key_of(device) + SUFFIX)


def _workgroup_limit(device: Device) -> int:
    info = device.info
    return min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)


def allowed(device: Device, name: str) -> frozenset[int]:
    """Exactly the values the tuner may store for ``name`` on ``device``."""
    if name in ("softmax_workgroup", "matvec_dot"):
        return frozenset(values(device, name))
    return frozenset(ROW_CANDIDATES[name])


def key_of(device: Device) -> str:
    """The key a tune file carries: its pipeline-cache file name without the suffix."""
    return CacheKey.from_info(device.info).file_name().rsplit(".", 1)[0]


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with its ``sha256`` field (of the canonical JSON of everything else)."""
    clean = {k: v for k, v in body.items() if k != "sha256"}
    return {**clean, "sha256": cachefs.sha256(_canonical(clean)).hex()}


def decode(data: bytes, key: str | None) -> dict[str, Any]:
    """The record in a tune file's bytes, checked (JSON object, format, digest, and the key
    when ``key`` is given); :class:`cachefs.EntryError` saying what is wrong."""
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise cachefs.EntryError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(record, dict):
        raise cachefs.EntryError(f"not a JSON object but {type(record).__name__}")
    if type(record.get("format")) is not int or record["format"] != FORMAT:
        raise cachefs.EntryError(f"format {record.get('format')!r}, this vkcore reads {FORMAT}")
    try:
        intact = encode(record)["sha256"] == record.get("sha256")
    except (TypeError, ValueError, RecursionError):  # only reachable from hand-made JSON
        intact = False
    if not intact:
        raise cachefs.EntryError("SHA-256 mismatch (damaged or edited file)")
    if key is not None and record.get("key") != key:
        raise cachefs.EntryError(f"written for key {record.get('key')!r}, this device is {key}")
    if not isinstance(record.get("choices"), dict):
        raise cachefs.EntryError("no choices object")
    return record


def read_record(path: Path, key: str | None) -> dict[str, Any]:
    """Read and check the tune file at ``path`` (FileNotFoundError when there is none)."""
    return decode(cachefs.read_entry(path, MAX_BYTES), key)


def load(device: Device) -> dict[str, Any]:
    """The stored choices for ``device`` that it may use (empty when there is no usable
    file); never raises for anything a file may hold."""
    path = tune_path(device)
    try:
        choices = read_record(path, key_of(device))["choices"]
    except FileNotFoundError:
        return {}
    except cachefs.EntryError as exc:
        cachefs.report(exc, "tune file %s ignored, defaults apply: %s", path, exc)
        return {}
    out, ignored = {}, []
    for name, value in choices.items():
        if name in PARAMETERS and type(value) is int and value in allowed(device, name):
            out[name] = value
        else:
            ignored.append(f"{str(name)[:40]}={_short(value)}")
    if ignored:
        log.warning(
            "tune file %s: ignoring %s (not a value vkcore tune stores on this device)",
            path,
            ", ".join(ignored),
        )
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_generation = [0]  # bumped whenever memoized choices may change (a trial, a forget)


def generation() -> int:
    """How many times the memoized choices may have changed: a kept call (an exact
    repeat's, vkcore.compute.repeat) made under another generation is not a repeat."""
    return _generation[0]


def choice(device: Device, name: str) -> Any:
    """A tuned parameter for ``device`` or None (read once per device, then memoized)."""
    if name not in PARAMETERS:
        raise ValueError(f"name must be one of {PARAMETERS}, got {shown(name)}")
    with _lock:
        found = _choices.get(device)
        if found is None:
            found = _choices[device] = load(device)
    return found.get(name)


def forget(device: Device) -> None:
    """Drop the memoized choices of ``device`` (after a tune or a reset)."""
    with _lock:
        _choices.pop(device, None)
        _generation[0] += 1


@contextlib.contextmanager
def trial(device: Device, name: str, value: int) -> Iterator[None]:
    """Kernels on ``device`` see ``name = value`` inside the block (memoized choices only;
    the file is untouched)."""
    with _lock:
        saved = _choices.get(device)
        tried = dict(saved if saved is not None else load(device))
        tried[name] = value
        _choices[device] = tried
        _generation[0] += 1
    try:
        yield
    finally:
        with _lock:
            if saved is None:
                _choices.pop(device, None)
            else:
                _choices[device] = saved
            _generation[0] += 1


def candidates(device: Device) -> list[int]:
    """Workgroup sizes worth timing: the subgroup size and a few multiples up to 256, and
    the smallest subgroup size the driver may compile for (RDNA on RADV: 32 of 32..64)."""
    sub = max(1, device.info.subgroup_size or 1)
    sizes = sorted({sub, 2 * sub, 64, 128, 256} | _smallest_subgroup(device))
    return [s for s in sizes if s <= _workgroup_limit(device)]


def _smallest_subgroup(device: Device) -> set[int]:
    low = int(device.info.min_subgroup_size or 0)
    return {low} if 1 <= low < (device.info.subgroup_size or 0) else set()


def values(device: Device, name: str) -> list[int]:
    """The candidate values the tuner times for ``name``, in order."""
    if name == "softmax_workgroup":
        return candidates(device)
    if name == "matvec_dot":  # 1: OpSDot where the device has the instruction at all
        return [0, 1] if device.info.integer_dot_product else [0]
    return list(ROW_CANDIDATES[name])


def save(device: Device, body: dict[str, Any]) -> dict[str, Any]:
    """Sign ``body`` (see :func:`encode`), write it as ``device``'s tune file and return
    the record; the memoized choices are dropped, so kernels read the new file."""
    record = encode(body)
    cachefs.store(tune_path(device), (json.dumps(record, indent=2) + "\n").encode())
    forget(device)
    return record


def reset(device: Device) -> bool:
    """Delete ``device``'s tune file; True if there was one."""
    path = tune_path(device)
    forget(device)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
