"""A pooled buffer handed from one Buffer object to another (lease, take back) is owned by
exactly one of them whatever fails or is interrupted during the handover: two owners would
both free the memory (a double free that aborts the process), none would leak it.

Each case runs in its own process, so a double free shows as a failed case, not a dead run.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from repo_paths import REPO

SCRIPT = r"""
import gc, sys
import numpy as np
import vkcore
from vkcore import reference; from vkcore.device import device as D

step, error = sys.argv[1], {"interrupt": KeyboardInterrupt, "error": RuntimeError}[sys.argv[2]]
w = np.random.default_rng(0).standard_normal((300, 1024)).astype(np.float32)
dev = vkcore.Device(validation=True, pipeline_cache=False)
vkcore.quantize(w, symmetric=False, device=dev).release()  # warm the pool: leases follow
real = getattr(D.Device, step)
calls = {"n": 0}


def once(self, buf):
    calls["n"] += 1
    setattr(D.Device, step, real)
    raise error("injected")


setattr(D.Device, step, once)
try:
    qt = vkcore.quantize(w, symmetric=False, device=dev)
    qt.release()  # take_back runs here
except (KeyboardInterrupt, RuntimeError):
    pass
setattr(D.Device, step, real)
gc.collect()
assert calls["n"] == 1, "the failure was never injected"
q, s, z = reference.quantize(w, 8, False, True)
for _ in range(3):
    qt = vkcore.quantize(w, symmetric=False, device=dev)
    assert np.array_equal(qt.q, q) and np.array_equal(qt.scale, s)
    qt.release()
    gc.collect()
x = vkcore.asarray(np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32), device=dev)
for _ in range(3):
    y = vkcore.softmax(x)
    assert np.abs(y.numpy() - reference.softmax(x.numpy())).max() <= 1e-6
    y.buffer.destroy()
dev.close()
assert dev.validation_messages == [], dev.validation_messages
print("ok")
"""


@pytest.mark.parametrize("error", ["interrupt", "error"])
@pytest.mark.parametrize("step", ["forget_buffer", "register_buffer"])
def test_a_failed_handover_leaves_one_owner(tmp_path, step, error):
    env = dict(os.environ, VKCORE_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, step, error],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (
        f"exit {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )
