"""Subgroups as the device has them: every shader that uses subgroup arithmetic has a
shared-memory-only variant (SUBGROUP=0), chosen by vkcore.kernels.variants.defines for a
device without subgroup arithmetic in compute shaders; forced on lavapipe it gives the
same integers bit for bit and floats within the usual tolerances. Shared memory per
workgroup is checked against maxComputeSharedMemorySize (variants.fit_rows).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from devices import NAMES, device_info, load
from spirv_words import declared_spirv, instructions, recording

import vkcore
from vkcore import reference, spirv
from vkcore.compute import program_limits as limits
from vkcore.device.info import STAGE_COMPUTE, SUBGROUP_ARITHMETIC
from vkcore.kernels import programs, tuning, variants
from vkcore.kernels.attention import plan
from vkcore.kernels.matvec import activation
from vkcore.kernels.matvec import program as mv
from vkcore.kernels.quant import rtn
from vkcore.kernels.softmax import stages as sm

OP_CAPABILITY = 17
CAP_GROUP_NON_UNIFORM, CAP_GROUP_NON_UNIFORM_ARITHMETIC = 61, 63
REDUCING = {
    "matvec.comp",
    "matvec_batch.comp",
    "quantize_rows.comp",
    "quantize_act.comp",
    "topk_select.comp",
    "attention_lanes.comp",  # each block's maximum per row: subgroupMax
}
REDUCING_SOFTMAX_STAGES = {"softmax_online.comp": {0, 1}, "softmax_safe.comp": {0, 1, 2}}


def capabilities(code: bytes) -> set[int]:
    return {args[0] for op, args in instructions(code) if op == OP_CAPABILITY}


def reduces(name: str, defines: dict) -> bool:
    if name == "matvec.comp" and defines.get("GROUPED") and defines["MODE"] != 0:
        return False  # grouped integer modes and row sums exchange sums in shared memory
    if name == "quantize_act.comp" and defines["ACT"] == 0:
        return False  # the batched kernel's float columns: a copy, no reduction
    return name in REDUCING or defines.get("STAGE") in REDUCING_SOFTMAX_STAGES.get(name, ())


def test_every_subgroup_arithmetic_variant_has_a_shared_memory_twin():
    declared = spirv.variants()
    ids = {(n, tuple(sorted(d.items()))) for n, d in declared}
    for name, defines, code in declared_spirv():
        caps = capabilities(code)
        if defines.get("SUBGROUP") == 0:
            assert not caps & {CAP_GROUP_NON_UNIFORM, CAP_GROUP_NON_UNIFORM_ARITHMETIC}, name
            continue
        twin_defines = {**defines, "SUBGROUP": 0}
        if twin_defines.get("SHUFFLE"):  # shuffled weights need subgroups: the twin shares
            twin_defines["SHUFFLE"] = 0  # them through shared memory
        twin = (name, tuple(sorted(twin_defines.items())))
        assert (CAP_GROUP_NON_UNIFORM_ARITHMETIC in caps) == reduces(name, defines), (name, defines)
        assert (twin in ids) == reduces(name, defines), (name, defines)


def _without(info, *, operations=None, stages=None):
    return dataclasses.replace(
        info,
        subgroup_supported_operations=info.subgroup_supported_operations
        if operations is None
        else operations,
        subgroup_supported_stages=info.subgroup_supported_stages if stages is None else stages,
    )


def test_the_choice_needs_arithmetic_and_the_compute_stage(device):
    info = device.info
    full = _without(info, operations=0xFF, stages=STAGE_COMPUTE)
    no_arith = _without(info, operations=0xFF & ~SUBGROUP_ARITHMETIC)
    no_compute = _without(info, operations=0xFF, stages=0x10)  # fragment only
    assert variants.defines(full, exact=False, reduces=True) == {}
    assert variants.defines(no_arith, exact=False, reduces=True) == {"SUBGROUP": 0}
    assert variants.defines(no_compute, exact=False, reduces=True) == {"SUBGROUP": 0}
    assert variants.defines(no_arith, exact=False, reduces=False) == {}


@pytest.mark.parametrize("name", NAMES)
def test_recorded_devices_choose_by_their_subgroup_properties(name):
    record = load(name)
    info = device_info(record)
    sub = record["subgroup"]
    arith = "ARITHMETIC" in sub["supportedOperations"] and "COMPUTE" in sub["supportedStages"]
    assert ("SUBGROUP" not in variants.defines(info, exact=False, reduces=True)) == arith
    assert variants.exactness(info)["subgroup_reductions"] == arith


@pytest.mark.parametrize("name", NAMES)
def test_shared_memory_fits_every_recorded_device(name):
    """matvec's sh_acc[ROWS][workgroup] for every rows value tune may choose, and the
    12 bytes per invocation of softmax and quantize_act at their largest workgroups."""
    info = device_info(load(name))
    limit = info.max_compute_shared_memory_size
    assert limit >= 16384  # the Vulkan minimum, which every report meets
    dev = type("D", (), {"info": info})()
    wg = mv.workgroup_size(dev)
    for rows in (*tuning.ROW_CANDIDATES["matvec_rows"], mv.ROWS, mv.ROWS_F32):
        fitted = variants.fit_rows(info, wg, rows)
        assert 1 <= fitted <= rows and fitted * wg * 4 <= limit
        assert fitted == rows  # 16 KiB holds every candidate at one subgroup per workgroup
    biggest = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    assert 12 * max(biggest, activation.ACT_WORKGROUP) <= limit


def test_rows_are_halved_until_they_fit(device):
    small = dataclasses.replace(device.info, max_compute_shared_memory_size=1024)
    assert variants.fit_rows(small, 32, 16) == 8  # 8 * 32 * 4 = 1024
    assert variants.fit_rows(small, 8, 16) == 16
    assert variants.fit_rows(small, 256, 4) == 1
    with pytest.raises(ValueError, match="maxComputeSharedMemorySize"):
        variants.fit_rows(small, 512, 1)
    unknown = dataclasses.replace(device.info, max_compute_shared_memory_size=0)
    assert variants.fit_rows(unknown, 256, 32) == 16  # held to Vulkan's 16 KiB
    with pytest.raises(ValueError, match="positive"):
        variants.fit_rows(small, 0, 4)


def test_matvec_on_a_device_with_little_shared_memory(device, rng, monkeypatch):
    """The rows per workgroup shrink to fit; results are unchanged."""
    w = (rng.standard_normal((37, 300)) * 0.1).astype(np.float32)
    x = rng.standard_normal(300).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    q, s, z = reference.quantize(w)
    wg = mv.workgroup_size(device)
    # Every Program is checked against the shared memory of the info it is made with
    # (vkcore.compute.program_limits): the lowered limit still holds the activation
    # quantizer, and the rows asked for are twice what it holds of sh_acc[ROWS][wg].
    vkcore.matvec(qt, x, activations="int8")
    quantizer = max(
        limits.shared_bytes(p.interface, p.spec)
        for p in programs.made(device).values()
        if p.name.startswith("quantize_act")
    )
    fit = 1
    while 4 * wg * fit < quantizer:
        fit *= 2
    monkeypatch.setattr(mv, "ROWS", 2 * fit)
    monkeypatch.setattr(
        device,
        "info",
        dataclasses.replace(device.info, max_compute_shared_memory_size=4 * wg * fit),
    )
    assert mv.rows_per_workgroup(device, 1) == fit
    for activations in ("int8", "uint8"):
        y = vkcore.matvec(qt, x, activations=activations)
        assert np.array_equal(y, reference.matvec(q, s, z, x, activations=activations))
    qt.release()


def _kernel_results(device, rng):
    """(name, result, exact) for every reducing kernel on small inputs."""
    out = []
    x = (rng.standard_normal((5, 3001)) * 4).astype(np.float32)
    x[0, :3] = -np.inf
    long_row = rng.standard_normal((1, 70_001)).astype(np.float32)  # split and merged
    for alg in ("online", "safe"):
        for data in (x, long_row):
            out.append((f"softmax {alg}", vkcore.softmax(data, algorithm=alg, device=device), 0))
            out.append(
                (f"log_softmax {alg}", vkcore.log_softmax(data, algorithm=alg, device=device), 0)
            )
    for data in (x, long_row):  # top-k selection is exact; the fused probabilities are not
        values, indices = vkcore.topk(data, 40, device=device)
        probs, where = vkcore.softmax_topk(data, 40, device=device)
        out += [("topk values", values, 1), ("topk indices", indices, 1)]
        out += [("softmax_topk", probs, 0), ("softmax_topk indices", where, 1)]
    w = (rng.standard_normal((37, 600)) * 0.1).astype(np.float32)
    w[4, 590] = 3.0  # a row maximum late in the row
    v = rng.standard_normal(600).astype(np.float32)
    for symmetric in (True, False):
        qt = vkcore.quantize(w, symmetric=symmetric, device=device)  # symmetric: quantize_rows
        out += [("q", qt.q, 1), ("scale", qt.scale, 1)]
        batch = np.stack([v, -v, 2 * v], axis=1)  # (n, 3): the batched kernel
        for act in ("float", "int8", "uint8"):
            out.append((f"matvec {act}", vkcore.matvec(qt, v, activations=act), act != "float"))
            out.append(
                (f"batched {act}", vkcore.matvec(qt, batch, activations=act), act != "float")
            )
        qt.release()
    out.append(("matvec_f32", vkcore.matvec_f32(w, v, device=device), 0))
    # rows of whole word groups: the lanes kernel on a CPU device (block maxima reduced)
    q = rng.standard_normal((1, 4, 3, 24)).astype(np.float32)
    k = rng.standard_normal((1, 2, 300, 24)).astype(np.float32)
    values = rng.standard_normal((1, 2, 300, 20)).astype(np.float32)
    out.append(("attention", vkcore.attention(q, k, values, causal=True, device=device), 0))
    return out


def test_shared_memory_variants_on_lavapipe(device, rng, monkeypatch):
    if not device.info.subgroup_arithmetic_in_compute:
        pytest.skip("the device itself has no subgroup arithmetic")
    seed = int(rng.integers(2**32))
    native = _kernel_results(device, np.random.default_rng(seed))
    asked = recording(device, monkeypatch)
    monkeypatch.setattr(
        device,
        "info",
        _without(
            device.info, operations=device.info.subgroup_supported_operations & ~SUBGROUP_ARITHMETIC
        ),
    )
    shared = _kernel_results(device, np.random.default_rng(seed))
    used = {n for n, d in asked if d.get("SUBGROUP") == 0}
    expected = REDUCING | set(REDUCING_SOFTMAX_STAGES)
    if not plan.lanes_kernel(device.info, 24, 20):  # a GPU keeps attention.comp
        expected -= {"attention_lanes.comp"}
    assert used >= expected
    assert all(d.get("SUBGROUP") == 0 for n, d in asked if reduces(n, d))
    for (name, a, exact), (_, b, _) in zip(native, shared, strict=True):
        if exact:
            assert a.tobytes() == b.tobytes(), name
        else:  # another summation order: within float32 summation error
            fin = np.isfinite(a)
            assert np.array_equal(fin, np.isfinite(b)) and np.array_equal(a[~fin], b[~fin]), name
            np.testing.assert_allclose(b[fin], a[fin], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("size", [1, 12, "max"])
def test_shared_memory_variants_any_workgroup(device, rng, monkeypatch, size):
    info = device.info
    biggest = min(info.max_compute_work_group_size[0], info.max_compute_work_group_invocations)
    wg = biggest if size == "max" else size
    monkeypatch.setattr(
        device,
        "info",
        _without(info, operations=info.subgroup_supported_operations & ~SUBGROUP_ARITHMETIC),
    )
    monkeypatch.setattr(sm, "workgroup_size", lambda d: wg)
    monkeypatch.setattr(rtn, "_row_workgroup", lambda d: wg)
    mwg = min(wg, 16384 // (4 * mv.ROWS))
    monkeypatch.setattr(mv, "workgroup_size", lambda d: mwg)
    monkeypatch.setattr(activation, "ACT_WORKGROUP", wg)
    x = np.sort((rng.standard_normal((3, 5001)) * 4).astype(np.float32))
    for alg in ("online", "safe"):
        y = vkcore.softmax(x, algorithm=alg, device=device)
        np.testing.assert_allclose(y, reference.softmax(x), atol=1e-6, rtol=0)
    w = (rng.standard_normal((37, 600)) * 0.1).astype(np.float32)
    v = rng.standard_normal(600).astype(np.float32)
    q, s, z = reference.quantize(w)
    qt = vkcore.quantize(w, device=device)
    assert np.array_equal(qt.q, q) and np.array_equal(qt.scale, s)
    for act in ("int8", "uint8"):
        got = vkcore.matvec(qt, v, activations=act)
        assert np.array_equal(got, reference.matvec(q, s, z, v, activations=act)), act
    qt.release()
