"""``vkcore bench --peers``: vkcore against the other Python Vulkan compute packages.

Kompute (``kp``), wgpu-py and vkdispatch make the four call-path figures of
peer_cases.py (numpy in and out, data on the device, 16 dispatches recorded and
submitted, the 16 replayed) on the same tiny kernel as vkcore, timed the same way. Every
package runs in a fresh child process: vkcore in this interpreter's environment, the
peers in their own (``make peers`` makes ``.venv-peers``: kp 0.9.0 needs numpy < 2).
The children alternate, each package once per run, so a slow minute of a shared machine
slows all of them alike; a figure is the median over the runs of each run's median. A
ratio is peer / vkcore: above 1, vkcore is faster.

A peer that is not installed, did not build or fails is a column that says so; the
others are still measured.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vkcore.base import config
from vkcore.tools.bench import peer_cases
from vkcore.tools.bench.harness import Progress
from vkcore.tools.bench.run import cpu_model

PEERS = ("kp", "vkdispatch", "wgpu")
DEFAULT_VENV = ".venv-peers"  # what make peers makes, relative to the repository
DEFAULT_RUNS = 3
PACKAGES = ("vkcore", *PEERS)
FIGURES = peer_cases.FIGURES
NOT_INSTALLED = "not installed: run make peers"
SCRIPT = Path(peer_cases.__file__).resolve()
CHILD_TIMEOUT_S = 300  # one package's four figures take seconds; a hang must not stall all
LABELS = {
    "numpy": "numpy in, numpy out (per call)",
    "device": "data on the device (per call)",
    "record16": "16 recorded and submitted (per 16)",
    "replay16": "the 16 replayed (per 16)",
}

Doc = dict[str, Any]  # one child's record (peer_cases.figures_of)


def peer_python(venv: Path) -> Path | None:
    """The peers' interpreter, or None when ``make peers`` has not made it."""
    python = venv / "bin" / "python"
    return python if python.is_file() else None


def unavailable(venv: Path) -> dict[str, str]:
    """Why each peer that cannot run is missing: no environment, or the line
    install_peers.sh wrote when the peer did not install."""
    if peer_python(venv) is None:
        return dict.fromkeys(PEERS, NOT_INSTALLED)
    missing = {}
    for peer in PEERS:
        note = venv / "failed" / f"{peer}.txt"
        if note.is_file():
            reason = (note.read_text().strip().splitlines() or ["no reason recorded"])[0]
            missing[peer] = f"not installed: {reason}"
    return missing


def child_command(python: Path, package: str, out: Path, calls: int, warmup: int) -> list[str]:
    """``-P``: the script's own folder (vkcore/tools/bench) must not come first on the
    child's path, where its modules could shadow a package's."""
    return [str(python), "-P", str(SCRIPT), package, str(out)] + [
        f"--calls={calls}",
        f"--warmup={warmup}",
    ]


def run_child(python: Path, package: str, calls: int, warmup: int) -> Doc:
    """One package's figures from a fresh process, or a record of why there are none."""
    with tempfile.TemporaryDirectory(prefix="vkcore-peers-") as tmp:
        out = Path(tmp) / "figures.json"
        # wgpu's display probe complains without a runtime folder (a private 0700 one).
        env = dict(os.environ, XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR") or tmp)
        try:
            proc = subprocess.run(
                child_command(python, package, out, calls, warmup),
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return {"package": package, "ok": False, "error": f"no result in {CHILD_TIMEOUT_S} s"}
        try:
            return dict(json.loads(out.read_text()))
        except (OSError, ValueError):
            said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
            error = f"exit status {proc.returncode}: {said[0][:200]}"
            return {"package": package, "ok": False, "error": error}


def measure_runs(
    venv: Path,
    runs: int,
    calls: int = peer_cases.TIMED,
    warmup: int = peer_cases.WARMUP,
    progress: bool = True,
) -> tuple[list[dict[str, Doc]], dict[str, str]]:
    """``runs`` rounds of every package that can run, each once per round in the same
    order; and why the others cannot."""
    missing = unavailable(venv)
    pythons = {"vkcore": Path(sys.executable), **dict.fromkeys(PEERS, peer_python(venv))}
    present = [p for p in PACKAGES if p not in missing]
    bar = Progress(runs * len(present), enabled=progress)
    rounds = []
    for r in range(runs):
        docs = {}
        for package in present:
            python = pythons[package]
            assert python is not None  # a peer without its interpreter is in ``missing``
            docs[package] = run_child(python, package, calls, warmup)
            bar.step(f"run {r + 1}/{runs}: {package}")
        rounds.append(docs)
    return rounds, missing


def column(docs: list[Doc], missing: str | None) -> dict[str, Any]:
    """One package's column: each figure's median over the runs that succeeded (None
    where the package cannot make it), or why there is none."""
    if missing is not None:
        return {"status": missing, "us": None}
    ok = [d for d in docs if d.get("ok")]
    failed = [d for d in docs if not d.get("ok")]
    if not ok:
        if failed and not all(d.get("installed", True) for d in failed):
            return {"status": NOT_INSTALLED, "us": None}
        reason = failed[0].get("error", "no result") if failed else "not run"
        return {"status": f"failed: {reason}", "us": None}
    figures = {}
    for figure in FIGURES:
        values = [d["us"][figure] for d in ok if d["us"].get(figure) is not None]
        figures[figure] = statistics.median(values) if values else None
    notes = [ok[0]["info"]["notes"]] if ok[0].get("info", {}).get("notes") else []
    if failed:
        notes.append(f"{len(failed)} of {len(docs)} runs failed: {failed[0].get('error')}")
    return {
        "status": "ok",
        "version": ok[0].get("version"),
        "info": ok[0].get("info", {}),
        "runs": len(ok),
        "us": figures,
        "notes": notes,
    }


def ratios(columns: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """peer / vkcore per figure (above 1: vkcore is faster); None where either is absent."""
    base = columns["vkcore"]["us"] or {}
    out = {}
    for peer in PEERS:
        theirs = columns[peer]["us"] or {}
        out[peer] = {
            f: (theirs[f] / base[f] if theirs.get(f) and base.get(f) else None) for f in FIGURES
        }
    return out


def summarize(rounds: list[dict[str, Doc]], missing: dict[str, str]) -> dict[str, Any]:
    """Every package's column and the ratios, from the rounds' records."""
    columns = {p: column([r[p] for r in rounds if p in r], missing.get(p)) for p in PACKAGES}
    return {"packages": columns, "ratios": ratios(columns)}


def machine() -> dict[str, Any]:
    """What the figures depend on besides the packages: the CPUs this process may use
    (what ``nproc`` prints), their model, the load."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "nproc": cpus,
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def run_peers(
    venv: Path,
    runs: int = DEFAULT_RUNS,
    calls: int = peer_cases.TIMED,
    warmup: int = peer_cases.WARMUP,
    progress: bool = True,
) -> dict[str, Any]:
    """The whole comparison as a JSON-ready dict: the environment, the columns, the
    ratios and every child's record."""
    started = datetime.datetime.now(datetime.UTC)
    before = machine()
    rounds, missing = measure_runs(venv, runs, calls, warmup, progress)
    return {
        "date": started.isoformat(timespec="seconds"),
        "machine": before,
        "load_average_after": machine()["load_average"],
        "workload": {**peer_cases.WORKLOAD, "calls": calls, "warmup": warmup, "runs": runs},
        "peers_venv": str(venv),
        **summarize(rounds, missing),
        "runs": rounds,
    }


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def _us(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "n/a"


def cell(col: dict[str, Any], ratio: dict[str, float | None] | None, figure: str) -> str:
    """A figure in microseconds, with the ratio to vkcore for a peer; a missing
    package's cell is its status (a failure's reason is printed below the table)."""
    if col["status"] != "ok":
        return col["status"] if col["status"] == NOT_INSTALLED else col["status"].split(":")[0]
    text = _us(col["us"][figure])
    r = ratio.get(figure) if ratio is not None else None
    return f"{text} ({r:.2f}x)" if r is not None else text


def header(result: dict[str, Any]) -> list[str]:
    """Date, driver, machine and what the numbers are."""
    vk = result["packages"]["vkcore"]
    info = vk.get("info") or {}
    driver = (
        f"{info['device']}, driver {info['driver']}, Vulkan {info['vulkan']}"
        if info
        else "unknown (the vkcore child failed)"
    )
    m, w = result["machine"], result["workload"]
    load = m.get("load_average")
    after = result.get("load_average_after")
    return [
        f"vkcore and its peers: {w['kernel']}, {w['n']} {w['dtype']} values, workgroups of "
        f"{w['local_size_x']}, a and n as push constants",
        f"date {result['date']}  device {driver}",
        f"machine: nproc {m['nproc']}, {m['cpu_model']}"
        + (f"; load average {load[0]:.2f} before, {after[0]:.2f} after" if load and after else ""),
        f"microseconds, the median over {_runs(w['runs'])} of each run's median of {w['calls']} "
        f"calls after {w['warmup']} warm-ups; in brackets peer / vkcore (> 1: vkcore faster)",
    ]


def footnotes(result: dict[str, Any]) -> Iterable[str]:
    """Why a package or a figure is missing, and devices other than vkcore's."""
    cols = result["packages"]
    device = (cols["vkcore"].get("info") or {}).get("device")
    for package in PACKAGES:
        col = cols[package]
        if col["status"] not in ("ok", NOT_INSTALLED):
            yield f"{package}: {col['status']}"
        for note in col.get("notes", []):
            yield f"{package}: {note}"
        other = (col.get("info") or {}).get("device")
        if device and other and other != device:
            yield f"{package} ran on {other}"


def format_table(result: dict[str, Any]) -> str:
    """The comparison as text: the header, one row per figure, one column per package."""
    cols, rats = result["packages"], result["ratios"]
    names = [f"{p} {cols[p]['version']}" if cols[p]["status"] == "ok" else p for p in PACKAGES]
    rows = [["figure", *names]]
    for figure in FIGURES:
        row = [LABELS[figure], cell(cols["vkcore"], None, figure)]
        rows.append(row + [cell(cols[p], rats[p], figure) for p in PEERS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [*header(result), ""]
    for row in rows:
        first = row[0].ljust(widths[0])
        lines.append(
            "  ".join([first, *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))])
        )
    notes = list(footnotes(result))
    return "\n".join(lines + ([""] + notes if notes else []))


def default_json_path() -> Path:
    """``peers.json`` in vkcore's cache folder: cache/ of the repository under make."""
    return config.cache_dir() / "peers.json"


def write_json(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
