"""``vkcore cache ls|verify|clear``: the persisted pipeline-cache files.

``ls`` shows every file with its key fields, size, contents and whether it belongs to the
current device; ``verify`` checks every file and exits 1 if any is damaged; ``clear``
removes them all (under the folder's lock, so no save is cut in half).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .. import pipeline_cache as pc
from ..instance import version_string


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="list, verify or clear the persisted pipeline caches")
    p.add_argument(
        "--dir",
        default=None,
        help="cache root (default: $VKCORE_CACHE_DIR, else $XDG_CACHE_HOME/vkcore)",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    ls = actions.add_parser("ls", help="list the files, their keys and whether they match")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.add_argument("--no-device", action="store_true", help="do not open a device to compare keys")
    ls.set_defaults(func=run_ls)
    verify = actions.add_parser("verify", help="check every file; exit 1 if any is damaged")
    verify.set_defaults(func=run_verify)
    clear = actions.add_parser("clear", help="remove every pipeline-cache file")
    clear.set_defaults(func=run_clear)
    p.set_defaults(func=_usage(p))


def _usage(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return run


def _current_key(args: argparse.Namespace) -> tuple[pc.CacheKey | None, str]:
    """The key of the selected device, or None and why it is unknown."""
    from ..device import Device

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
    except (pc.CacheFileError, FileNotFoundError) as exc:
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


def run_ls(args: argparse.Namespace) -> int:
    folder = pc.pipeline_dir(args.dir)
    key, device_name = (None, "not checked") if args.no_device else _current_key(args)
    entries = [describe(p, key) for p in pc.cache_files(folder)]
    if args.json:
        print(
            json.dumps({"folder": str(folder), "device": device_name, "files": entries}, indent=2)
        )
        return 0
    print(f"pipeline caches in {folder} (current device: {device_name})")
    if not entries:
        print("  no pipeline-cache files")
    for entry in entries:
        _print_entry(entry)
    return 0


def run_verify(args: argparse.Namespace) -> int:
    folder = pc.pipeline_dir(args.dir)
    entries = [describe(p, None) for p in pc.cache_files(folder)]
    damaged = 0
    for entry in entries:
        if is_damaged(entry):
            damaged += 1
            print(f"DAMAGED  {entry['name']}: {entry['state']}")
        elif "key" in entry:
            print(f"ok       {entry['name']} ({_contents(entry)})")
        else:
            print(f"note     {entry['name']}: {entry['state']}")
    print(f"{len(entries)} file(s) in {folder}, {damaged} damaged")
    return 1 if damaged else 0


def run_clear(args: argparse.Namespace) -> int:
    folder = pc.pipeline_dir(args.dir)
    if not folder.is_dir():
        print(f"nothing to clear: {folder} does not exist")
        return 0
    removed = 0
    with pc.folder_lock(folder):  # never cut a concurrent save in half
        for path in pc.cache_files(folder):
            if path.is_dir():
                print(f"skipped {path}: a folder, not a cache file")
                continue
            path.unlink(missing_ok=True)
            removed += 1
    print(f"removed {removed} pipeline-cache file(s) from {folder}")
    return 0
