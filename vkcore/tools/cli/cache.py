"""``vkcore cache ls|verify|clear``: every file vkcore's caches keep.

Three kinds: SPIR-V entries (``<root>/spirv/*.spv``), pipeline-cache files
(``<root>/pipeline/*.vkpc``) and tune files (``<root>/pipeline/*.tune.json``). ``ls``
shows each file with its state (pipeline files also with their key fields, contents and
whether they belong to the current device); ``verify`` runs the same checks a load runs
(digest, structure, key, owner, folder mode) and exits 1 if any file is damaged or not
trusted; ``clear`` removes every file of the three kinds, damaged ones, leftover temp
files and folders found in an entry's place included (under each folder's lock, so no
write is cut in half).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from vkcore.base import cachefs, config
from vkcore.device.info import version_string
from vkcore.device.pipelines import cache_file as pc
from vkcore.kernels import tuning
from vkcore.spirv import entries
from vkcore.tools.cli._args import cache_folder


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, verify or clear the SPIR-V, pipeline and tune caches")
    p.add_argument(
        "--dir",
        default=None,
        type=cache_folder,
        help="cache root (default: $VKCORE_CACHE_DIR, else $XDG_CACHE_HOME/vkcore)",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    ls = actions.add_parser("ls", help="list the files, their keys and whether they match")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument("--no-device", action="store_true", help="do not open a device to compare keys")
    ls.set_defaults(func=run_ls)
    verify = actions.add_parser("verify", help="check every file; exit 1 if any is damaged")
    verify.set_defaults(func=run_verify)
    clear = actions.add_parser("clear", help="remove every SPIR-V, pipeline-cache and tune file")
    clear.set_defaults(func=run_clear)
    p.set_defaults(func=_usage(p))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return run


def _current_key(args: argparse.Namespace) -> tuple[pc.CacheKey | None, str]:
    """The key of the selected device, or None and why it is unknown."""
    from vkcore.device.device import Device

    try:
        with Device(args.device, validation=False, pipeline_cache=False) as dev:
            return pc.CacheKey.from_info(dev.info), dev.info.name
    except Exception as exc:  # noqa: BLE001 - listing files must work without a device
        return None, f"no device ({exc})"


def describe(path: Path, key: pc.CacheKey | None) -> dict[str, Any]:
    """One file's entry: size, key fields, contents, state relative to ``key``."""
    entry: dict[str, Any] = {"file": str(path), "name": path.name}
    try:
        entry["size"] = path.stat().st_size
    except OSError as exc:
        entry["size"] = None
        entry["state"] = f"damaged: cannot stat ({exc.strerror or exc})"
        return entry
    if pc.is_temp_file(path):
        entry["state"] = "leftover temp file (an interrupted save); 'vkcore cache clear' removes it"
        return entry
    try:
        parsed = pc.decode(pc.read_file(path, pc.max_bytes()))
    except (cachefs.EntryError, FileNotFoundError) as exc:
        entry["state"] = f"damaged: {exc}"
        return entry
    entry["key"] = parsed.key.to_dict()
    entry["payload_bytes"] = len(parsed.payload)
    entry["header_only"] = parsed.header_only
    if path.name != parsed.key.file_name():
        entry["state"] = f"misnamed: its key belongs in {parsed.key.file_name()}"
    elif key is None:
        entry["state"] = "intact"
    elif parsed.key == key:
        entry["state"] = "matches the current device"
    else:
        entry["state"] = "another device or driver: " + "; ".join(key.differences(parsed.key))
    return entry


def is_damaged(entry: dict[str, Any]) -> bool:
    state = str(entry.get("state", ""))
    return state.startswith(("damaged", "misnamed"))


def _contents(entry: dict[str, Any]) -> str:
    if entry["header_only"]:
        return "header only: this driver does not serialize pipelines"
    return f"{entry['payload_bytes']} bytes of driver data"


def _print_entry(entry: dict[str, Any]) -> None:
    print(entry["file"])
    size = entry.get("size")
    rows: list[tuple[str, Any]] = [("size", f"{size} bytes" if size is not None else "?")]
    key = entry.get("key")
    if key is not None:
        rows += [
            ("vendorID", key["vendor_id_hex"]),
            ("deviceID", key["device_id_hex"]),
            ("driverVersion", key["driver_version"]),
            ("pipelineCacheUUID", key["pipeline_cache_uuid"]),
            ("deviceUUID", key["device_uuid"]),
            ("driverID", key["driver_id"]),
            ("driver", f"{key['driver_name']} / {key['driver_info']}"),
            ("apiVersion", version_string(key["api_version"])),
            ("pointer size", key["pointer_size"]),
            ("format version", key["format_version"]),
            ("contents", _contents(entry)),
        ]
    rows.append(("state", entry["state"]))
    width = max(len(k) for k, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def _root(args: argparse.Namespace) -> Path:
    return Path(args.dir).expanduser() if args.dir is not None else config.cache_dir()


def _simple(path: Path, state: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"file": str(path), "name": path.name, "state": state}
    try:
        entry["size"] = path.lstat().st_size
    except OSError:
        entry["size"] = None
    return entry


def spirv_entries(root: Path) -> list[dict[str, Any]]:
    return [_simple(p, entries.entry_state(p)) for p in entries.entry_files(root / "spirv")]


def tune_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(tuning.SUFFIX))


def tune_entry(path: Path) -> dict[str, Any]:
    """A tune file's entry: its checks without a device (the key is its own file name)."""
    if cachefs.is_temp(path):
        return _simple(path, "leftover temp file (an interrupted write)")
    try:
        record = tuning.read_record(path, path.name[: -len(tuning.SUFFIX)])
    except (cachefs.EntryError, FileNotFoundError) as exc:
        return _simple(path, f"damaged: {exc}")
    entry = _simple(path, "intact")
    entry["choices"] = record["choices"]
    return entry


def folder_states(root: Path) -> list[dict[str, Any]]:
    """The cache folders that exist but are not trusted (nothing in them would be used)."""
    out = []
    for folder in (root / "spirv", pc.pipeline_dir(root)):
        problem = cachefs.folder_problem(folder) if folder.is_dir() else None
        if problem is not None:
            out.append({"file": str(folder), "name": folder.name, "state": f"damaged: {problem}"})
    return out


def run_ls(args: argparse.Namespace) -> int:
    root = _root(args)
    folder = pc.pipeline_dir(root)
    key, device_name = (None, "not checked") if args.no_device else _current_key(args)
    entries = [describe(p, key) for p in pc.cache_files(folder)]
    shaders, tunes = spirv_entries(root), [tune_entry(p) for p in tune_files(folder)]
    folders = folder_states(root)
    if args.json:
        listing = {
            "folder": str(folder),
            "device": device_name,
            "files": entries,
            "spirv": shaders,
            "tune": tunes,
            "folders": folders,
        }
        print(json.dumps(listing, indent=2))
        return 0
    for entry in folders:
        print(f"folder {entry['file']}: {entry['state']}")
    print(f"pipeline caches in {folder} (current device: {device_name})")
    if not entries:
        print("  no pipeline-cache files")
    for entry in entries:
        _print_entry(entry)
    print(f"tune files in {folder}")
    for entry in tunes or [{"name": "none", "state": "defaults apply"}]:
        choices = entry.get("choices")
        print(f"  {entry['name']}: {entry['state']}" + (f" {choices}" if choices else ""))
    print(f"SPIR-V entries in {root / 'spirv'}: {len(shaders)}")
    for entry in shaders:
        print(f"  {entry['name']} ({entry['size']} bytes): {entry['state']}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    root = _root(args)
    folder = pc.pipeline_dir(root)
    kinds = {
        "pipeline": [describe(p, None) for p in pc.cache_files(folder)],
        "tune": [tune_entry(p) for p in tune_files(folder)],
        "SPIR-V": spirv_entries(root),
        "folder": folder_states(root),
    }
    damaged = 0
    for kind, listed in kinds.items():
        for entry in listed:
            if is_damaged(entry):
                damaged += 1
                print(f"DAMAGED  {kind} {entry['name']}: {entry['state']}")
            elif "key" in entry:
                print(f"ok       {kind} {entry['name']} ({_contents(entry)})")
            elif entry["state"] == "intact":
                print(f"ok       {kind} {entry['name']}")
            else:
                print(f"note     {kind} {entry['name']}: {entry['state']}")
    counts = ", ".join(f"{len(v)} {k}" for k, v in kinds.items() if k != "folder")
    print(f"{counts} file(s) in {root}, {damaged} damaged")
    return 1 if damaged else 0


def _clear_folder(folder: Path, paths: list[Path]) -> int:
    """Remove ``paths`` (entries of ``folder``) under its lock; returns how many."""
    if not paths:
        return 0
    with cachefs.folder_lock(folder):  # never cut a concurrent write in half
        for path in paths:
            cachefs.remove_entry(path)
    return len(paths)


def run_clear(args: argparse.Namespace) -> int:
    root = _root(args)
    folder = pc.pipeline_dir(root)
    if not root.is_dir():
        print(f"nothing to clear: {root} does not exist")
        return 0
    n_pc = _clear_folder(folder, pc.cache_files(folder))
    n_tune = _clear_folder(folder, tune_files(folder))
    n_spv = _clear_folder(root / "spirv", entries.entry_files(root / "spirv"))
    print(f"removed {n_pc} pipeline-cache file(s) from {folder}")
    print(f"removed {n_tune} tune file(s) from {folder}")
    print(f"removed {n_spv} SPIR-V entries from {root / 'spirv'}")
    return 0
