"""``vkcore tune``: choose kernel parameters by measurement, once per device.

Parameters whose best value differs between devices:

* ``softmax_workgroup``: lavapipe runs a one-subgroup workgroup several times faster than
  a larger one, a GPU wants hundreds of invocations;
* ``matvec_rows`` and ``matvec_f32_rows``: rows per matvec workgroup (each loaded block of
  x serves that many rows; more rows, more registers), INT8 and float32 kernels;
* ``quant_rows``: rows per quantize/dequantize invocation.

``tune(device)`` times each candidate value on every kernel path it steers (the softmax
workgroup: the online and safe softmax and log_softmax; the INT8 rows: the float, int8 and uint8
activation modes; the quantize rows: quantize and dequantize), takes each path's median,
and stores the value with the smallest sum over its paths beside the pipeline cache, in
``<cache root>/pipeline/<pipeline-cache file name>.tune.json``: the same key as the
pipeline cache, so another GPU, driver or driver version never reads these choices.
Kernels ask :func:`choice`; with no file they use their defaults (the values measured
best on lavapipe). The rows parameters are specialization constants: no new SPIR-V per
value. Times are device time from timestamp queries where the compute queue has them,
else wall time around each call (a queue with ``timestampValidBits == 0``): the record
says which (``"clock": "device"`` or ``"wall"``).

A tune file is checked like every cache file (:mod:`vkcore.cachefs`: a regular file of at
most 1 MiB, owned by this user, in a folder others cannot write), then as JSON: format 2,
the key (the pipeline-cache file name it sits next to) equal to this device's, and the
SHA-256 of its canonical JSON. A file failing any of these is ignored as a whole. Then
every stored value must be one that ``tune`` itself could have stored on this device:
an ``int`` in :func:`allowed` (the candidate set it measures, derived from the device's
properties). Anything else is ignored, with one warning per file naming the values.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import logging
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import cachefs
from .device import Device
from .per_device import per_device_map
from .pipeline_cache_file import CacheKey, pipeline_dir

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

_choices = per_device_map()  # Device -> its choices; never keeps the device alive
_lock = threading.Lock()


def tune_path(device: Device) -> Path:
    """Where ``device``'s choices live: next to its pipeline-cache file, same key."""
    cache = getattr(device, "pipeline_cache", None)
    folder = cache.folder if cache is not None and cache.folder is not None else pipeline_dir()
    return folder / (key_of(device) + SUFFIX)


def _workgroup_limit(device: Device) -> int:
    info = device.info
    return min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)


def allowed(device: Device, name: str) -> frozenset[int]:
    """Exactly the values ``tune`` may store for ``name`` on ``device``."""
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


def choice(device: Device, name: str) -> Any:
    """A tuned parameter for ``device`` or None (read once per device, then memoized)."""
    if name not in PARAMETERS:
        raise ValueError(f"name must be one of {PARAMETERS}, got {name!r}")
    with _lock:
        found = _choices.get(device)
        if found is None:
            found = _choices[device] = load(device)
    return found.get(name)


def forget(device: Device) -> None:
    """Drop the memoized choices of ``device`` (after a tune or a reset)."""
    with _lock:
        _choices.pop(device, None)


@contextlib.contextmanager
def _trial(device: Device, name: str, value: int) -> Iterator[None]:
    """Kernels on ``device`` see ``name = value`` inside the block (memoized choices only;
    the file is untouched)."""
    with _lock:
        saved = _choices.get(device)
        trial = dict(saved if saved is not None else load(device))
        trial[name] = value
        _choices[device] = trial
    try:
        yield
    finally:
        with _lock:
            if saved is None:
                _choices.pop(device, None)
            else:
                _choices[device] = saved


def candidates(device: Device) -> list[int]:
    """Workgroup sizes worth timing: the subgroup size and a few multiples up to 256, and
    the smallest subgroup size the driver may compile for (RDNA on RADV: 32 of 32..64)."""
    sub = max(1, device.info.subgroup_size or 1)
    sizes = sorted({sub, 2 * sub, 64, 128, 256} | _smallest_subgroup(device))
    return [s for s in sizes if s <= _workgroup_limit(device)]


def _smallest_subgroup(device: Device) -> set[int]:
    low = int(device.info.min_subgroup_size or 0)
    return {low} if 1 <= low < (device.info.subgroup_size or 0) else set()


def clock(device: Device) -> str:
    """``"device"`` where the compute queue has timestamps, else ``"wall"``: a queue with
    ``timestampValidBits == 0`` is timed by the host clock around each call."""
    return "device" if device.submitter.timestamps else "wall"


@contextlib.contextmanager
def _device_seconds(device: Device) -> Iterator[list[float]]:
    """Inside the block, the device seconds of every submission are appended to the
    yielded list (a kernel call may submit more than once, e.g. one per row chunk)."""
    sub = device.submitter
    original = sub.run
    spent: list[float] = []

    def run(dispatches: Any, *, timed: bool = True, read_seconds: bool = True) -> float | None:
        out = original(dispatches, timed=timed, read_seconds=read_seconds)
        spent.append(sub.last_device_seconds or 0.0)
        return out

    setattr(sub, "run", run)  # noqa: B010 - an instance attribute shadows the method
    try:
        yield spent
    finally:
        delattr(sub, "run")


def _seconds(device: Device, call: Callable[[], Any], kind: str) -> float:
    """Seconds of one ``call`` by ``kind`` of clock: device time summed over its
    submissions, or wall time from the host clock."""
    if kind == "wall":
        start = time.perf_counter()
        call()
        return time.perf_counter() - start
    with _device_seconds(device) as spent:
        call()
    return sum(spent)


def _median_seconds(device: Device, call: Callable[[], Any], repeats: int, kind: str) -> float:
    call()  # the first call creates the pipeline for this value (and compiles the variant)
    return statistics.median(_seconds(device, call, kind) for _ in range(repeats))


@contextlib.contextmanager
def _paths(
    device: Device, name: str, shape: tuple[int, int]
) -> Iterator[dict[str, Callable[[], Any]]]:
    """Every kernel path that ``name`` steers, as calls on random data of ``shape``: the
    choice must suit all of them. The data is released when the block ends."""
    import vkcore

    rng = np.random.default_rng(0)
    held: list[Any] = []
    try:
        if name == "softmax_workgroup":
            x = vkcore.asarray(rng.standard_normal(shape, dtype=np.float32), device=device)
            held.append(x)
            paths = {a: functools.partial(_softmax, x, a) for a in ("online", "safe")}
            # log_softmax's write stage is its own variant; its safe form differs from the
            # online one as softmax's does, so one algorithm suffices there.
            yield {**paths, "log_softmax": functools.partial(_softmax, x, "online", log=True)}
            return
        w = (rng.standard_normal(shape, dtype=np.float32) * 0.05).astype(np.float32)
        xv = rng.standard_normal(shape[1], dtype=np.float32)
        if name == "matvec_dot":  # 8-bit per-channel weights, the modes the dot path serves
            qt = vkcore.quantize(w, device=device)
            held.append(qt)
            yield {a: functools.partial(_matvec, qt, xv, a) for a in ("int8", "uint8")}
        elif name == "matvec_rows":  # one weight layout (the default), every activation mode
            qt = vkcore.quantize(w, device=device)
            held.append(qt)
            yield {a: functools.partial(_matvec, qt, xv, a) for a in ("float", "int8", "uint8")}
        elif name == "matvec_f32_rows":
            f32 = vkcore.F32Matrix(w, device=device)
            held.append(f32)
            yield {"float32": lambda: vkcore.matvec_f32(f32, xv)}
        else:  # quant_rows steers quantize.comp (host scales: the asymmetric path) and dequantize
            q = vkcore.quantize(w, symmetric=False, device=device)
            held.append(q)
            yield {
                "quantize": lambda: vkcore.quantize(w, symmetric=False, device=device).release(),
                "dequantize": lambda: vkcore.dequantize(q),
            }
    finally:
        for obj in held:
            _free(obj)


def _softmax(x: Any, algorithm: str, log: bool = False) -> None:
    import vkcore

    _free((vkcore.log_softmax if log else vkcore.softmax)(x, algorithm=algorithm))


def _matvec(qt: Any, x: np.ndarray, activations: str) -> None:
    import vkcore

    vkcore.matvec(qt, x, activations=activations)


def _free(obj: Any) -> None:
    """Free a Tensor's buffer or a weight's memory now, not at collection."""
    if hasattr(obj, "release"):
        obj.release()
    elif getattr(obj, "buffer", None) is not None:
        obj.buffer.destroy()


def values(device: Device, name: str) -> list[int]:
    """The candidate values ``tune`` times for ``name``, in order."""
    if name == "softmax_workgroup":
        return candidates(device)
    if name == "matvec_dot":  # 1: OpSDot where the device has the instruction at all
        return [0, 1] if device.info.integer_dot_product else [0]
    return list(ROW_CANDIDATES[name])


def measure(
    device: Device, name: str, shape: tuple[int, int], repeats: int, kind: str | None = None
) -> dict[str, dict[int, float]]:
    """Median seconds per path that ``name`` steers and per candidate value, by ``kind``
    of clock (default: :func:`clock`)."""
    kind = kind or clock(device)
    with _paths(device, name, shape) as paths:
        out: dict[str, dict[int, float]] = {path: {} for path in paths}
        for value in values(device, name):
            with _trial(device, name, value):
                for path, call in paths.items():
                    out[path][value] = _median_seconds(device, call, repeats, kind)
    return out


def best(per_path: dict[str, dict[int, float]]) -> tuple[int, dict[int, float]]:
    """The value with the smallest sum of medians over every path, and those sums: one
    call of each path, as a model that runs them all (ties: the first candidate)."""
    first = next(iter(per_path.values()))
    totals = {v: sum(t[v] for t in per_path.values()) for v in first}
    return min(totals, key=totals.__getitem__), totals


def tune(
    device: Device,
    *,
    shape: tuple[int, int] = (512, 4096),
    rows_shape: tuple[int, int] = (4096, 4096),
    repeats: int = 3,
) -> dict[str, Any]:
    """Measure, store and return the choices for ``device`` (the file's content):
    the softmax workgroup on ``shape``, the rows parameters on ``rows_shape`` weights,
    each on every path it steers (see :func:`best`), by device time where the queue has
    timestamps and wall time where it has none (``clock`` in the record)."""
    if type(repeats) is not int or repeats < 1:
        raise ValueError(f"repeats must be an integer of at least 1, got {repeats!r}")
    kind = clock(device)
    choices: dict[str, int] = {}
    measured: dict[str, Any] = {}
    for name in PARAMETERS:
        used = shape if name == "softmax_workgroup" else rows_shape
        per_path = measure(device, name, used, repeats, kind)
        choices[name], totals = best(per_path)
        measured[name] = {
            "shape": list(used),
            "repeats": repeats,
            "median_seconds": {p: {str(k): v for k, v in t.items()} for p, t in per_path.items()},
            "total_seconds": {str(k): v for k, v in totals.items()},
        }
    body = {
        "format": FORMAT,
        "key": key_of(device),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": device.info.name,
        "driver": f"{device.info.driver_name} {device.info.driver_info}".strip(),
        "clock": kind,
        "choices": choices,
        "measured": measured,
    }
    record = encode(body)
    path = tune_path(device)
    cachefs.store(path, (json.dumps(record, indent=2) + "\n").encode())
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
