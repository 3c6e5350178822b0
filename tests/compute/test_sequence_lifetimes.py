"""Sequences in flight survive the collector, the exit and threads: everything the device
may still be using stays alive until its work has finished, whatever refers to what and
whatever order finalizers run in.

Each scenario of tests/support/sequence_lifetime_worker.py runs in a child process (a freed
buffer the device still reads crashed the interpreter), with and without the validation
layer (which reports memory freed while in use): a reference cycle through the sequence
or through a user's object holding it, its Tensors and a Program; the device dropped in
the same collection; every order of dropping without cycles; the cycle collected by
another thread; the interpreter exiting with sequences in cycles still running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from checks import python_path_with
from repo_paths import SUPPORT

import vkcore

WORKER = SUPPORT / "sequence_lifetime_worker.py"
SCENARIOS = ["cycles_then_del_orders", "holder_cycle", "device_dropped", "thread_gc", "exit"]


@pytest.mark.parametrize("validation", ["1", "0"], ids=["validated", "plain"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sequences_in_flight_survive_what_drops_them(scenario, validation):
    root = str(Path(vkcore.__file__).resolve().parents[1])  # this vkcore, not another
    env = dict(os.environ, VKCORE_VALIDATION=validation, PYTHONPATH=python_path_with(root))
    try:
        out = subprocess.run(
            [sys.executable, str(WORKER), scenario],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=WORKER.parent,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scenario {scenario!r} hung: {exc.stdout!r} {exc.stderr!r}")
    text = out.stdout + out.stderr[-3000:]
    assert out.returncode == 0, f"exit status {out.returncode} (negative: a signal)\n{text}"
    assert "FAIL" not in out.stdout and out.stdout.rstrip().endswith("OK"), text
