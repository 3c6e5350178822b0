"""Run the decision tests on thousands of real devices: every report of a local clone of
the Vulkan Hardware Database mirror (github.com/kainino0x/gpuinfo-vulkan-reports-mirror)
converted by gpuinfo.py: the newest usable report per device name and OS, Vulkan 1.1
and up.

    git clone https://github.com/kainino0x/gpuinfo-vulkan-reports-mirror /tmp/mirror
    python tests/support/devices/sweep.py /tmp/mirror [--limit N]

The tests run in a copy of tests/ whose devices/ holds the converted reports instead of
the recorded ones (reports without memory types, compute limits, subgroup properties or
a pipeline-cache UUID, or below Vulkan's required limits, are left out). The tests about
the recorded set as a whole (which kinds it covers, named files) are deselected; the
files' few tests on the local Vulkan device run once (they need its driver and the
validation layer). Prints pytest's summary; the exit status is pytest's (2 when no
report is usable).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gpuinfo

TESTS = Path(__file__).resolve().parents[2]
DECISION_TESTS = [
    "device/test_recorded_devices.py",
    "device/test_placement.py",
    "spirv/test_rounding.py",
    "kernels/test_subgroup_variants.py",
    "device/test_portability_drivers.py",
    "caches/test_tune_file.py",
]
# Tests about the recorded set as a whole, or about one named file.
ABOUT_THE_SET = (
    "not cover_the_kinds and not include_one_without and not moltenvk "
    "and not distinct_and_named and not made_up and not bad_arguments"
)
MIN_STORAGE_BUFFER_RANGE = 1 << 27  # the Vulkan minimum
NEEDED_LIMITS = ("maxComputeWorkGroupCount", "maxComputeWorkGroupSize", "maxStorageBufferRange")


class Mirror:
    """The report files of a mirror clone's newest commit, read through one
    ``git cat-file --batch`` (a report is parsed only when asked for)."""

    def __init__(self, path: Path) -> None:
        listing = subprocess.run(
            ["git", "-C", str(path), "ls-tree", "--full-tree", "HEAD", "reports/"],
            capture_output=True,
            text=True,
        )
        if listing.returncode != 0:
            print(f"sweep: {path} is not a clone of the mirror: {listing.stderr}", file=sys.stderr)
            raise SystemExit(2)
        self.blobs = {}  # report id -> blob
        for line in listing.stdout.splitlines():
            blob, name = line.split()[2], Path(line.split("\t")[1]).stem
            if name.isdigit():
                self.blobs[name] = blob
        self._cat = subprocess.Popen(
            ["git", "-C", str(path), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def report(self, rid: str) -> dict | None:
        cat = self._cat
        assert cat.stdin is not None and cat.stdout is not None
        cat.stdin.write(self.blobs[rid].encode() + b"\n")
        cat.stdin.flush()
        header = cat.stdout.readline().split()
        if len(header) < 3:  # "<blob> missing": a partial clone
            return None
        data = cat.stdout.read(int(header[2]))
        cat.stdout.read(1)
        try:
            report = json.loads(data)
        except ValueError:
            return None
        return report if isinstance(report, dict) else None


def _api(report: dict) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in report["properties"]["apiVersionText"].split("."))
    except (KeyError, TypeError, ValueError, AttributeError):
        return (0,)


def newest_usable_per_device(mirror: Mirror) -> list[tuple[str, dict]]:
    """For each device name and OS, the record of its newest usable report: the reports
    are read once to group them, then newest first until one is usable."""
    groups: dict[tuple[str, str], list[str]] = {}
    for rid in mirror.blobs:
        report = mirror.report(rid)
        if report is None or _api(report) < (1, 1):
            continue
        props, env = report.get("properties"), report.get("environment")
        name = props.get("deviceName", "") if isinstance(props, dict) else ""
        key = (str(name), str(env.get("name", "")) if isinstance(env, dict) else "")
        groups.setdefault(key, []).append(rid)
    chosen = []
    for rids in groups.values():
        for rid in sorted(rids, key=int, reverse=True):
            report = mirror.report(rid)
            try:
                record = report and gpuinfo.record(report, f"vulkan.gpuinfo.org report {rid}")
            except gpuinfo.ReportError:
                continue  # damaged: an older report of the device may do
            if record and usable(record):
                chosen.append((rid, record))
                break
    return sorted(chosen, key=lambda item: int(item[0]))


def usable(record: dict) -> bool:
    """A report complete enough for the decisions, of a device within Vulkan's required
    limits (an emulator once reported maxStorageBufferRange 0, another subgroupSize 0)."""
    lim = record.get("limits", {})
    return bool(
        record.get("memory_types")
        and all(k in lim for k in NEEDED_LIMITS)
        and lim["maxStorageBufferRange"] >= MIN_STORAGE_BUFFER_RANGE
        and record.get("subgroup", {}).get("subgroupSize", 0) >= 1
        and "pipeline_cache_uuid" in record
    )


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirror", type=Path, help="a clone of gpuinfo-vulkan-reports-mirror")
    parser.add_argument("--limit", type=_count, default=0, help="at most this many devices")
    args = parser.parse_args(argv)
    mirror = Mirror(args.mirror)
    chosen = newest_usable_per_device(mirror)
    if args.limit:
        chosen = chosen[: args.limit]
    print(f"sweep: {len(chosen)} devices from {len(mirror.blobs)} reports", flush=True)
    if not chosen:
        print("sweep: no usable report: is this the mirror's clone?", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vkcore-sweep-") as tmp:
        copy = Path(tmp) / "tests"
        shutil.copytree(TESTS, copy, ignore=shutil.ignore_patterns("*.json", "__pycache__"))
        for rid, record in chosen:
            (copy / "support" / "devices" / f"r{rid}.json").write_text(json.dumps(record))
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["--tb=line", "-k", ABOUT_THE_SET, "--rootdir", tmp]
        command += [str(copy / name) for name in DECISION_TESTS]
        return subprocess.run(command, cwd=tmp).returncode


if __name__ == "__main__":
    sys.exit(main())
