"""Every kernel again under other device configurations, each in its own process:

* subgroups of 4 (``LP_NATIVE_VECTOR_WIDTH=128`` on Mesa 22's lavapipe; its default is 8),
  so that no kernel silently depends on one subgroup size;
* the staging path (``VKCORE_FORCE_STAGING=1``): device-local buffers reached through a
  staging buffer, as on a discrete GPU without resizable BAR (texel and storage loads).

Each runs ``tests/support/kernel_tour.py`` (every kernel tour, checked against numpy) under the
validation layer, and asserts that the configuration really took effect. Under subgroups
of 4 the tours read through texel buffers only (the storage-load variants are the same
arithmetic, run by the full tour in-process), and start from this session's SPIR-V
cache: SPIR-V does not depend on these settings, the driver's compilation (what they
change) still happens.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import SUPPORT

TOUR = SUPPORT / "kernel_tour.py"
REPO = TOUR.parents[1]


def run_tour(
    tmp_path: Path, env_extra: dict[str, str], *flags: str, texel_only: bool = True
) -> dict:
    cache = tmp_path / "cache"
    session_spirv = Path(os.environ["VKCORE_CACHE_DIR"]) / "spirv"
    if session_spirv.is_dir():
        shutil.copytree(session_spirv, cache / "spirv")
        cache.chmod(0o700)
    env = dict(os.environ, VKCORE_VALIDATION="1", VKCORE_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, str(TOUR), "--native-only", *(["--texel-only"] * texel_only), *flags],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, f"kernel tour failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return json.loads(out.stdout)


def test_every_kernel_with_subgroups_of_4(device, tmp_path):
    if "llvmpipe" not in device.info.name or "Mesa 22" not in device.info.driver_info:
        pytest.skip("LP_NATIVE_VECTOR_WIDTH is Mesa 22 lavapipe's (Mesa 25's crashes with it)")
    summary = run_tour(tmp_path, {"LP_NATIVE_VECTOR_WIDTH": "128"}, "--expect-subgroup", "4")
    assert summary["subgroup_size"] == 4
    assert len(summary["checks"]) >= 40


def test_every_kernel_on_the_staging_path(tmp_path):
    """Both load paths (texel and storage buffers): staging changes where every buffer
    lives and how each input and result travels, whichever variant reads it. The forced
    feature profiles (no RTE, shared-memory reductions) change only shader arithmetic,
    not memory, and run in-process in tests/test_packaging.py."""
    summary = run_tour(
        tmp_path, {"VKCORE_FORCE_STAGING": "1"}, "--expect-staging", texel_only=False
    )
    assert summary["tensors_mapped"] is False
    checks = summary["checks"]
    assert len(checks) >= 80
    for texel in ("0", "1"):
        assert any(f"[texel={texel}," in c and c.startswith("softmax") for c in checks)
        assert any(f"[texel={texel}," in c and "matvec" in c for c in checks)


LANE_DRIFT = """
import numpy as np
import vkcore
from vkcore import reference
from vkcore.kernels.sampling import topk_steps

dev = vkcore.Device()
lanes = dev.info.subgroup_size
assert lanes == 16, lanes
n = lanes * topk_steps.max_elements_per_invocation(1, lanes)
plan = topk_steps.select_plan(dev, 8, n, 1)
assert plan.nchunks == 1 and plan.workgroup == lanes
blocks = n // (4 * lanes)  # blocks per lane


def at(lane, block):
    return 4 * (block * lanes + lane)


x = np.full((8, n), -10.0, np.float32)
x[:, at(0, blocks - 1)] = 1.0  # lane 0 reaches the floor only at its last block
for block in range(blocks):  # the last lane's blocks keep rising: it queues every one
    x[:, at(lanes - 1, block)] = 2.0 + block
for lane in range(1, lanes - 1):  # lane j queues its first 8j blocks, then falls behind
    for block in range(min(8 * lane, blocks)):
        x[:, at(lane, block)] = 2.0 + block
values, idx = vkcore.topk(x, 1, device=dev)
want_v, want_i = reference.topk(x, 1)
assert np.array_equal(idx, want_i), (idx[:, 0], want_i[0, 0])
print("ok")
"""


def test_topk_lanes_that_drift_apart_stay_within_the_loop_budget(device, tmp_path):
    """llvmpipe counts loop iterations per SIMD group: with 16 lanes whose candidate
    queues fill at different blocks, a plan that counted one lane's steps only lost
    elements (a wrong top-1, silently)."""
    if "llvmpipe" not in device.info.name or "Mesa 22" not in device.info.driver_info:
        pytest.skip("LP_NATIVE_VECTOR_WIDTH is Mesa 22 lavapipe's (Mesa 25's crashes with it)")
    env = dict(os.environ, VKCORE_VALIDATION="1", LP_NATIVE_VECTOR_WIDTH="512")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", LANE_DRIFT], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
