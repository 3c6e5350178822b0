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

import subprocess

import pytest
from checks import run_worker
from repo_paths import SUPPORT

WORKER = SUPPORT / "sequence_lifetime_worker.py"
SCENARIOS = ["cycles_then_del_orders", "holder_cycle", "device_dropped", "thread_gc", "exit"]


@pytest.mark.parametrize("validation", ["1", "0"], ids=["validated", "plain"])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sequences_in_flight_survive_what_drops_them(scenario, validation):
    try:
        stdout, text = run_worker(WORKER, scenario, validation=validation, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"scenario {scenario!r} hung: {exc.stdout!r} {exc.stderr!r}")
    assert "FAIL" not in stdout and stdout.rstrip().endswith("OK"), text
