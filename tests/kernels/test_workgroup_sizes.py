"""Every kernel is correct for any workgroup size a device allows, not only multiples of
the subgroup size: devices choose subgroup sizes the host cannot predict, and a workgroup
of 12 made of subgroups of 8 and 4 once made softmax rows sum to 2.

The workgroup size of each kernel is forced through the function or constant its module
reads it from; integers are compared bit for bit, floats within the stated tolerances.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from checks import assert_every_matvec_mode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkcore
from vkcore import reference
from vkcore.kernels.matvec import activation
from vkcore.kernels.matvec import program as mv
from vkcore.kernels.quant import launch, rtn
from vkcore.kernels.softmax import stages as sm

SIZES = [1, 3, 12, 13, 100, "max"]
FEW_SIZES = [1, 13, 100, "max"]  # for the slower kernels
# matvec keeps ROWS accumulators per invocation in shared memory (ROWS * size * 4 bytes),
# so its largest size is bounded by maxComputeSharedMemorySize (16 KiB at least).
MATVEC_SHARED_BYTES = 16384


def resolve(device, size, cap=None):
    info = device.info
    limit = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    if cap is not None:
        limit = min(limit, cap)
    return limit if size == "max" else size


@pytest.mark.parametrize("size", SIZES)
def test_softmax_any_workgroup(device, rng, monkeypatch, size):
    wg = resolve(device, size)
    monkeypatch.setattr(sm, "workgroup_size", lambda d: wg)
    for shape in [(3, 3000), (2, 3001), (1, 100_003), (5, 7), (4, 1)]:
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        x[0, 0] = -np.inf
        if shape[0] > 2:
            x[1, -1] = np.nan
            x[2] = np.sort(x[2])  # a growing maximum across invocations
        ref = reference.softmax(x)
        for alg in ("online", "safe"):
            y = vkcore.softmax(x, algorithm=alg, device=device)
            np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
            np.testing.assert_allclose(y, ref, atol=1e-6, rtol=0)
            live = ~np.isnan(ref).any(axis=-1) & (shape[1] > 1)
            np.testing.assert_allclose(y[live].sum(-1, dtype=np.float64), 1.0, atol=1e-5)
    assert any(p.workgroup == wg for p in sm._plans.get(device, {}).values())


@pytest.mark.parametrize("size", SIZES)
def test_quantize_rows_any_workgroup(device, rng, monkeypatch, size):
    wg = resolve(device, size)
    monkeypatch.setattr(rtn, "_row_workgroup", lambda d: wg)
    w = (rng.standard_normal((9, 1028)) * 0.3).astype(np.float32)  # scales on the device
    w[3] *= 1e-3
    w[4, 1000] = 7.0  # the maximum late in a row
    qt = vkcore.quantize(w, device=device)
    q, s, z = reference.quantize(w, 8, True, True)
    assert np.array_equal(qt.q, q)
    assert np.array_equal(qt.scale.view(np.uint32), np.asarray(s, np.float32).view(np.uint32))
    qt.release()


@pytest.mark.parametrize("size", FEW_SIZES)
def test_quantize_and_dequantize_any_workgroup(device, rng, monkeypatch, size):
    wg = resolve(device, size)
    monkeypatch.setattr(launch, "WORKGROUP", wg)
    w = rng.standard_normal((37, 99)).astype(np.float32)
    for symmetric, per_channel in ((False, True), (True, False)):
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        q, s, z = reference.quantize(w, 8, symmetric, per_channel)
        assert np.array_equal(qt.q, q)
        assert np.array_equal(vkcore.dequantize(qt), reference.dequantize(q, s, z))
        qt.release()


@pytest.mark.parametrize("size", FEW_SIZES)
def test_matvec_any_workgroup(device, rng, monkeypatch, size):
    wg = resolve(device, size, cap=MATVEC_SHARED_BYTES // (4 * mv.ROWS))
    monkeypatch.setattr(mv, "workgroup_size", lambda d: wg)
    monkeypatch.setattr(activation, "ACT_WORKGROUP", wg)  # quantize_act.comp
    m, n = 37, 600
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    x = rng.standard_normal(n).astype(np.float32)
    x[n - 3] = 9.0  # the activation range is set late in the row
    assert_every_matvec_mode(device, w, x)


@settings(
    max_examples=int(os.environ.get("VKCORE_PROPERTY_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_softmax_any_drawn_workgroup(device, data):
    """Any size from 1 to the device's maximum, on a drawn shape and ordering."""
    wg = data.draw(st.integers(1, resolve(device, "max")), label="workgroup")
    rows = data.draw(st.integers(1, 5), label="rows")
    n = data.draw(st.sampled_from([1, 2, 7, 64, 999, 4096, 20_001, 70_000]), label="n")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = (rng.standard_normal((rows, n)) * data.draw(st.sampled_from([0.1, 3.0, 30.0]))).astype(
        np.float32
    )
    if data.draw(st.booleans(), label="sorted"):
        x = np.sort(x, axis=-1)
    orig = sm.workgroup_size
    sm.workgroup_size = lambda d: wg  # noqa: ARG005 (hypothesis and monkeypatch do not mix)
    try:
        for alg in ("online", "safe"):
            y = vkcore.softmax(x, algorithm=alg, device=device)
            np.testing.assert_allclose(y, reference.softmax(x), atol=1e-6, rtol=0)
            np.testing.assert_allclose(y.sum(-1, dtype=np.float64), 1.0, atol=1e-5)
    finally:
        sm.workgroup_size = orig


SUBGROUPS_OF_4 = """
import numpy as np, vkcore
from vkcore import reference
from vkcore.kernels.softmax import stages as sm
dev = vkcore.Device(validation=True)
assert dev.info.subgroup_size == 4, dev.info.subgroup_size
rng = np.random.default_rng(3)
x = np.sort((rng.standard_normal((3, 5001)) * 4).astype(np.float32))
for wg in (1, 3, 4, 6, 13, 100):
    sm.workgroup_size = lambda d, wg=wg: wg
    for alg in ("online", "safe"):
        y = vkcore.softmax(x, algorithm=alg, device=dev)
        assert np.abs(y - reference.softmax(x)).max() <= 1e-6, (wg, alg)
        assert np.abs(y.sum(-1, dtype=np.float64) - 1).max() <= 1e-5, (wg, alg)
from vkcore.kernels.matvec import activation
from vkcore.kernels.matvec import activation
from vkcore.kernels.matvec import program as mv
from vkcore.kernels.quant import rtn
from vkcore.kernels.quant import launch, rtn
w = (rng.standard_normal((37, 600)) * 0.1).astype(np.float32)
v = rng.standard_normal(600).astype(np.float32)
q, s, z = reference.quantize(w, 8, True, True)
for wg in (3, 6, 13):
    rtn._row_workgroup = mv.workgroup_size = lambda d, wg=wg: wg
    activation.ACT_WORKGROUP = wg
    qt = vkcore.quantize(w, device=dev)
    assert np.array_equal(qt.q, q), wg
    for act in ("int8", "uint8"):
        got = vkcore.matvec(qt, v, activations=act)
        assert np.array_equal(got, reference.matvec(q, s, z, v, activations=act)), (wg, act)
    qt.release()
assert dev.validation_messages == [], dev.validation_messages
dev.close()
print("ok")
"""


def test_softmax_with_subgroups_of_4(device):
    """Mesa 22's lavapipe makes subgroups of 4 with LP_NATIVE_VECTOR_WIDTH=128 (Mesa 25's
    crashes there: skipped unless the default device reports subgroups of 8)."""
    if not device.info.is_cpu or device.info.subgroup_size != 8:
        pytest.skip("needs lavapipe with 256-bit vectors")
    if not device.info.driver_info.startswith("Mesa 22"):
        pytest.skip(f"LP_NATIVE_VECTOR_WIDTH works on Mesa 22 only: {device.info.driver_info}")
    env = dict(os.environ, LP_NATIVE_VECTOR_WIDTH="128")
    out = subprocess.run(
        [sys.executable, "-c", SUBGROUPS_OF_4], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
