"""The integer-dot-product matvec path (DOT=1: OpSDot / OpUDot / OpSUDot on four packed
bytes), forced on lavapipe (which supports the instructions, unaccelerated) by reporting
the accelerated flag: bit for bit with the reference and with the bitfieldExtract path in
every mode and 8-bit layout it covers; packed codes and devices without the feature never
take it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.kernels.matvec import groups as mg
from vkcore.kernels.matvec import matvec as mv


@pytest.fixture
def dot_device(device, monkeypatch):
    """The session device reporting accelerated 4x8-bit dot products."""
    assert device.info.integer_dot_product, "lavapipe reports shaderIntegerDotProduct"
    info = dataclasses.replace(device.info, integer_dot_product_8bit_accelerated=True)
    monkeypatch.setattr(device, "info", info)
    return device


def ran_dot(device) -> bool:
    return any("DOT=1" in p["name"] for p in device.pipeline_stats())


LAYOUTS = [(False, None), (True, None), (True, 32), (True, 7), (True, 1)]


@pytest.mark.parametrize("bits", [5, 6, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(("per_channel", "group_size"), LAYOUTS)
def test_dot_path_bit_for_bit(dot_device, rng, bits, symmetric, per_channel, group_size):
    m, n = 21, 200
    w = (rng.standard_normal((m, n)) * 0.1).astype(np.float32)
    w[3] *= 30
    x = (rng.standard_normal(n) - 0.3).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    qt = vkcore.quantize(
        w,
        bits=bits,
        symmetric=symmetric,
        per_channel=per_channel,
        group_size=group_size,
        device=dot_device,
    )
    q, s, z = qt.q, qt.scale, qt.zero_point
    for activations in ("int8", "uint8"):
        assert mg.use_dot(dot_device, qt, activations)
        y = vkcore.matvec(qt, x, bias=b, activations=activations)
        want = reference.matvec(q, s, z, x, b, activations, group_size)
        assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), activations
        acc = mv.integer_accumulators(qt, x, activations)
        qx, _, zx = reference.quantize_activations(x, activations)
        ref_acc = reference.matvec_accumulators(q, z, qx, zx, group_size)
        assert np.array_equal(acc.astype(np.int64), ref_acc.reshape(acc.shape))
    assert ran_dot(dot_device)
    qt.release()


def test_dot_path_at_the_extremes(dot_device):
    """Every code at its extreme (255 - z with z = 0, and -127), activations at +-127 / 255:
    the raw dot products and the zero-point correction wrap nowhere they should not."""
    n = 4096
    for symmetric in (True, False):
        w = np.ones((2, n), np.float32)
        w[1] = -1
        if not symmetric:
            w[0, 0] = 0  # range [0, 1]: z = 0, codes 255
        qt = vkcore.quantize(w, symmetric=symmetric, device=dot_device)
        for x in (np.ones(n, np.float32), -np.ones(n, np.float32)):
            for activations in ("int8", "uint8"):
                y = vkcore.matvec(qt, x, activations=activations)
                want = reference.matvec(qt.q, qt.scale, qt.zero_point, x, None, activations)
                assert np.array_equal(y, want), (symmetric, activations)


def test_dot_and_bitfield_paths_agree(device, rng, monkeypatch):
    w = rng.standard_normal((40, 333)).astype(np.float32)
    x = rng.standard_normal(333).astype(np.float32)
    qt = vkcore.quantize(w, symmetric=False, group_size=64, device=device)
    plain = [vkcore.matvec(qt, x, activations=a) for a in ("int8", "uint8")]
    info = dataclasses.replace(device.info, integer_dot_product_8bit_accelerated=True)
    monkeypatch.setattr(device, "info", info)
    dot = [vkcore.matvec(qt, x, activations=a) for a in ("int8", "uint8")]
    for a, b in zip(plain, dot, strict=True):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_packed_codes_and_devices_without_the_feature_keep_bitfield(dot_device, rng):
    qt4 = vkcore.quantize(rng.standard_normal((8, 64)).astype(np.float32), bits=4)
    assert not mg.use_dot(dot_device, qt4, "int8")
    qt8 = vkcore.quantize(rng.standard_normal((8, 64)).astype(np.float32), device=dot_device)
    assert not mg.use_dot(dot_device, qt8, "float")
    no_feature = dataclasses.replace(dot_device.info, integer_dot_product=False)
    assert not mg.dot_default(no_feature)
    not_accelerated = dataclasses.replace(
        dot_device.info, integer_dot_product_8bit_accelerated=False
    )
    assert not mg.dot_default(not_accelerated)
    assert mg.dot_default(dot_device.info)
