"""Run the decision tests on thousands of real devices: every report of a local clone of
the Vulkan Hardware Database mirror (github.com/kainino0x/gpuinfo-vulkan-reports-mirror)
converted by gpuinfo.py, the newest report per device name and OS, Vulkan 1.1 and up.

    git clone https://github.com/kainino0x/gpuinfo-vulkan-reports-mirror /tmp/mirror
    python tests/devices/sweep.py /tmp/mirror [--limit N]

The tests run in a copy of tests/ whose devices/ holds the converted reports instead of
the recorded ones (reports without memory types, compute limits or subgroup properties,
or below Vulkan's required limits, are left out). The tests about the recorded set as a
whole (which kinds it covers, named files) are deselected. Prints pytest's summary; the
exit status is pytest's.
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

TESTS = Path(__file__).resolve().parents[1]
DECISION_TESTS = [
    "test_recorded_devices.py",
    "test_placement.py",
    "test_rounding.py",
    "test_subgroup_variants.py",
    "test_portability.py",
    "test_tune_file.py",
]
# Tests about the recorded set as a whole, or about one named file.
ABOUT_THE_SET = (
    "not cover_the_kinds and not include_one_without and not moltenvk "
    "and not distinct_and_named and not made_up and not bad_arguments"
)
MIN_STORAGE_BUFFER_RANGE = 1 << 27  # the Vulkan minimum
NEEDED_LIMITS = ("maxComputeWorkGroupCount", "maxComputeWorkGroupSize", "maxStorageBufferRange")


def _reports(mirror: Path) -> list[tuple[str, dict]]:
    """(report id, report) for every report file of the mirror's newest commit."""
    tree = subprocess.run(
        ["git", "-C", str(mirror), "ls-tree", "HEAD", "reports/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    cat = subprocess.Popen(
        ["git", "-C", str(mirror), "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert cat.stdin is not None and cat.stdout is not None
    out = []
    for line in tree:
        sha, path = line.split()[2], line.split("\t")[1]
        cat.stdin.write(sha.encode() + b"\n")
        cat.stdin.flush()
        size = int(cat.stdout.readline().split()[2])
        data = cat.stdout.read(size)
        cat.stdout.read(1)
        try:
            out.append((Path(path).stem, json.loads(data)))
        except ValueError:
            continue
    cat.stdin.close()
    cat.wait()
    return out


def _api(report: dict) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in report["properties"]["apiVersionText"].split("."))
    except (KeyError, ValueError):
        return (0,)


def newest_per_device(reports: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    best: dict[tuple[str, str], tuple[int, str, dict]] = {}
    for rid, report in reports:
        if not rid.isdigit() or _api(report) < (1, 1):
            continue
        key = (report["properties"].get("deviceName", ""), report["environment"].get("name", ""))
        if key not in best or int(rid) > best[key][0]:
            best[key] = (int(rid), rid, report)
    return [(rid, report) for _, rid, report in sorted(best.values())]


def usable(record: dict) -> bool:
    """A report complete enough for the decisions, of a device within Vulkan's required
    limits (an emulator once reported maxStorageBufferRange 0)."""
    lim = record.get("limits", {})
    return bool(
        record.get("memory_types")
        and all(k in lim for k in NEEDED_LIMITS)
        and lim["maxStorageBufferRange"] >= MIN_STORAGE_BUFFER_RANGE
        and "subgroup" in record
        and "pipeline_cache_uuid" in record
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirror", type=Path, help="a clone of gpuinfo-vulkan-reports-mirror")
    parser.add_argument("--limit", type=int, default=0, help="at most this many devices")
    args = parser.parse_args(argv)
    chosen = newest_per_device(_reports(args.mirror))
    with tempfile.TemporaryDirectory(prefix="vkcore-sweep-") as tmp:
        copy = Path(tmp) / "tests"
        shutil.copytree(TESTS, copy, ignore=shutil.ignore_patterns("*.json", "__pycache__"))
        written = 0
        for rid, report in chosen:
            record = gpuinfo.record(report, f"vulkan.gpuinfo.org report {rid}")
            if usable(record):
                (copy / "devices" / f"r{rid}.json").write_text(json.dumps(record))
                written += 1
                if written == args.limit:
                    break
        print(f"sweep: {written} devices from {len(chosen)} newest reports", flush=True)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["--tb=line", "-k", ABOUT_THE_SET, "--rootdir", tmp]
        command += [str(copy / name) for name in DECISION_TESTS]
        return subprocess.run(command, cwd=tmp).returncode


if __name__ == "__main__":
    sys.exit(main())
