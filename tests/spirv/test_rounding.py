"""Exact rounding guaranteed, not assumed: the kernels whose results are promised bit for
bit request round-to-nearest-even (SPV_KHR_float_controls) where the device supports it,
the choice is one function of DeviceInfo (vkcore.kernels.variants.defines), and the
results are the same bits with either variant on lavapipe (which rounds to nearest even
either way, so the comparison shows that the RTE request changes nothing else).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from devices import NAMES, device_info, load
from spirv_words import declared_spirv, instructions, recording

import vkcore
from vkcore import reference, spirv
from vkcore.device import instance as inst
from vkcore.kernels import variants

OP_CAPABILITY, OP_EXECUTION_MODE = 17, 16
CAP_ROUNDING_MODE_RTE, MODE_ROUNDING_MODE_RTE = 4467, 4462
# Shaders whose results the documentation promises bit for bit (matvec: integer modes;
# kv_append: the int8 cache's codes and scales, the float16 cache's halves).
EXACT = {
    "quantize.comp",
    "quantize_rows.comp",
    "quantize_act.comp",
    "dequantize.comp",
    "kv_append.comp",
}


def requests_rte(code: bytes) -> bool:
    """OpExecutionMode <entry> RoundingModeRTE 32 with its capability."""
    ops = instructions(code)
    mode = any(
        op == OP_EXECUTION_MODE and args[1:] == (MODE_ROUNDING_MODE_RTE, 32) for op, args in ops
    )
    cap = (OP_CAPABILITY, (CAP_ROUNDING_MODE_RTE,)) in ops
    assert mode == cap, "execution mode and capability must come together"
    return mode


def promised_exact(name: str, defines: dict) -> bool:
    integer_modes = name in ("matvec.comp", "matvec_batch.comp") and defines["MODE"] in (1, 2)
    return name in EXACT or integer_modes


def test_rte_variants_request_the_mode_and_the_others_do_not():
    declared = spirv.variants()
    for name, defines, code in declared_spirv():
        assert requests_rte(code) == (defines.get("RTE") == 1), (name, defines)
    # Every exact shader has an RTE twin of each of its variants, the others have none.
    ids = {(n, tuple(sorted(d.items()))) for n, d in declared}
    for name, defines in declared:
        if "RTE" in defines:
            continue
        twin = (name, tuple(sorted({**defines, "RTE": 1}.items())))
        assert (twin in ids) == promised_exact(name, defines), (name, defines)


def test_the_choice_follows_shader_rounding_mode_rte_float32(device):
    on = dataclasses.replace(device.info, rounding_mode_rte_float32=True)
    off = dataclasses.replace(device.info, rounding_mode_rte_float32=False)
    assert variants.defines(on, exact=True, reduces=False) == {"RTE": 1}
    assert variants.defines(off, exact=True, reduces=False) == {}
    assert variants.defines(on, exact=False, reduces=False) == {}  # not promised exact


@pytest.mark.parametrize("name", NAMES)
def test_recorded_devices_get_rte_as_their_float_controls_say(name):
    record = load(name)
    info = device_info(record)
    floats = record.get("float_controls", {})  # absent: a report without float controls
    rte = floats.get("shaderRoundingModeRTEFloat32", False)
    assert ("RTE" in variants.defines(info, exact=True, reduces=False)) == rte
    report = variants.exactness(info)
    assert report["rounding_mode_rte_requested"] == rte
    assert (report["dequantize"] == "bit for bit") == rte
    # Decided by exact products and comparisons: exact on every device.
    assert report["quantize_q"] == report["matvec_int32_accumulator"] == "bit for bit"
    preserve = floats.get("shaderDenormPreserveFloat32", False)
    assert ("kept (shaderDenormPreserveFloat32)" in report["denormals"]) == preserve


def test_the_recorded_devices_include_one_without_rte():
    floats = [load(n).get("float_controls", {}) for n in NAMES]
    assert any(not f.get("shaderRoundingModeRTEFloat32", False) for f in floats)


@pytest.mark.parametrize("name", NAMES)
def test_rte_is_requested_only_where_the_capability_is_allowed(name):
    """Core in 1.2; below, the device must have VK_KHR_shader_float_controls enabled."""
    info = device_info(load(name))
    v11 = dataclasses.replace(
        info,
        api_version=1 << 22 | 1 << 12,
        extensions=info.extensions | {"VK_KHR_shader_float_controls"},
    )
    for case in (info, v11):
        if "RTE" in variants.defines(case, exact=True, reduces=False):
            enabled = inst.enabled_device_extensions(case.extensions, case.api_version)
            core = case.api_version >= (1 << 22 | 2 << 12)
            assert core or "VK_KHR_shader_float_controls" in enabled, (name, case.api_version)


def test_float_controls_extension_is_enabled_below_vulkan_1_2_only():
    offered = {"VK_KHR_shader_float_controls"}
    v11 = inst.enabled_device_extensions(offered, 1 << 22 | 1 << 12)
    v12 = inst.enabled_device_extensions(offered, 1 << 22 | 2 << 12)
    assert "VK_KHR_shader_float_controls" in v11  # the capability needs it there
    assert "VK_KHR_shader_float_controls" not in v12  # core
    assert inst.enabled_device_extensions(set(), 1 << 22 | 1 << 12) == []


def _exact_results(device, rng):
    """Every result promised bit for bit: q, scales, dequantized weights, integer-mode y."""
    out = []
    w = (rng.standard_normal((37, 100)) * 0.1).astype(np.float32)
    w[3, :8] = 1e-40  # subnormal weights count as 0 on every device
    x = rng.standard_normal(100).astype(np.float32)
    bias = rng.standard_normal(37).astype(np.float32)
    for symmetric, per_channel in ((True, True), (False, True), (True, False)):
        qt = vkcore.quantize(w, symmetric=symmetric, per_channel=per_channel, device=device)
        q, scale, zero = reference.quantize(w, symmetric=symmetric, per_channel=per_channel)
        assert np.array_equal(qt.q, q) and np.array_equal(qt.scale, scale)
        out += [qt.q, qt.scale, qt.zero_point, vkcore.dequantize(qt)]
        for activations in ("int8", "uint8"):
            y = vkcore.matvec(qt, x, bias=bias, activations=activations)
            ref = reference.matvec(q, scale, zero, x, bias, activations=activations)
            assert np.array_equal(y, ref), (symmetric, per_channel, activations)
            out.append(y)
        qt.release()
    return out


def test_both_variants_give_the_same_bits_on_lavapipe(device, monkeypatch):
    if not device.info.rounding_mode_rte_float32:
        pytest.skip("the device cannot request RTE")
    asked = recording(device, monkeypatch)
    with_rte = _exact_results(device, np.random.default_rng(3))
    exact = [(n, d) for n, d in asked if promised_exact(n, d)]
    assert {n for n, _ in exact} >= {"quantize.comp", "dequantize.comp", "quantize_act.comp"}
    assert all(d.get("RTE") == 1 for _, d in exact)
    asked.clear()
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, rounding_mode_rte_float32=False)
    )
    without = _exact_results(device, np.random.default_rng(3))
    assert asked and not any("RTE" in d for _, d in asked)
    assert len(with_rte) == len(without)
    for a, b in zip(with_rte, without, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_dequantized_subnormals_are_kept_or_flushed_as_documented(device):
    """A row whose scale is subnormal (max|w| < 127 * 2^-126): its q and scale are exact
    everywhere; its dequantized values are the reference's where the device preserves
    denormals, else the reference's or 0 (a device may flush the subnormal scale). Rows
    with normal scales are always the reference's bits."""
    w = np.full((4, 32), np.float32(2.0**-122), np.float32)
    w[:, ::2] *= -1
    w[0] *= np.float32(2.0**20)  # a normal scale
    qt = vkcore.quantize(w, device=device)
    q, scale, zero = reference.quantize(w)
    assert np.array_equal(qt.q, q) and np.array_equal(qt.scale, scale)
    tiny = scale < np.finfo(np.float32).tiny
    assert list(tiny) == [False, True, True, True]
    got, ref = vkcore.dequantize(qt), reference.dequantize(q, scale, zero)
    assert np.array_equal(got[~tiny], ref[~tiny])
    same = got[tiny] == ref[tiny]
    assert np.all(same if device.info.denorm_preserve_float32 else same | (got[tiny] == 0))
