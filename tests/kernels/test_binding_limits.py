"""quantize, dequantize and matvec with inputs, outputs and per-row vectors larger than one
storage binding: the device's maxStorageBufferRange is lowered (a copy of device.info), and
every storage buffer bound by any dispatch is checked against it. Rows are split across
bindings; what cannot be split (a row of x longer than a binding) is a ValueError naming
the argument."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from binding_limits import LIMIT, assert_within

import vkcore
from vkcore import reference

MODES = [(8, True, True), (8, False, True), (4, True, False), (8, False, False)]


@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), MODES)
@pytest.mark.parametrize("n", [40, 42])  # 40: scales found on the device; 42: on the host
def test_quantize_and_dequantize_split_by_rows(
    device, rng, small_binding, bits, symmetric, per_channel, n
):
    w = rng.standard_normal((150, n)).astype(np.float32)  # 24 KB: ~25 bindings of input
    w[5] += 3
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)
    assert len(qt.chunks) > (2 if bits <= 4 else 5)  # 4 bits: two codes a byte, half the rows
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    assert np.array_equal(qt.q, q)
    assert np.array_equal(qt.scale.view(np.uint32), s.view(np.uint32))
    assert np.array_equal(qt.zero_point, z)
    got = vkcore.dequantize(qt)
    assert np.array_equal(got.view(np.uint32), reference.dequantize(q, s, z).view(np.uint32))
    assert_within(small_binding)


@pytest.mark.parametrize(("bits", "symmetric", "per_channel"), MODES)
def test_matvec_more_rows_than_one_binding_of_y(
    device, rng, small_binding, bits, symmetric, per_channel
):
    m, n = 300, 60  # y, bias, scales, zero points, row sums: 1200 bytes each
    w = rng.standard_normal((m, n)).astype(np.float32)
    w[::7] += 2
    x = (rng.standard_normal(n) * 2 - 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    qt = vkcore.quantize(w, bits=bits, symmetric=symmetric, per_channel=per_channel, device=device)
    q, s, z = reference.quantize(w, bits, symmetric, per_channel)
    xt, bt = vkcore.asarray(x, device=device), vkcore.asarray(b, device=device)
    for activations, (xin, bin_) in (
        (a, inputs) for a in ("float", "int8", "uint8") for inputs in ((x, b), (xt, bt))
    ):
        want = reference.matvec(q, s, z, x, b, activations)
        y = vkcore.matvec(qt, xin, bias=bin_, activations=activations)
        y = y if isinstance(y, np.ndarray) else y.numpy()
        if activations == "float":
            v = q.astype(np.float64) - np.broadcast_to(z, (m,))[:, None]
            tol = np.broadcast_to(s, (m,)) * (np.abs(v) @ np.abs(x)) * n * 2.0**-23 + 1e-6
            assert np.all(np.abs(y - want) <= tol)
        else:
            assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), activations
    assert_within(small_binding)


def test_matvec_f32_more_rows_than_one_binding(device, rng, small_binding):
    w = rng.standard_normal((300, 30)).astype(np.float32)
    x = rng.standard_normal(30).astype(np.float32)
    b = rng.standard_normal(300).astype(np.float32)
    want = w.astype(np.float64) @ x + b
    tol = (np.abs(w) @ np.abs(x) + np.abs(b)) * 30 * 2.0**-23
    mat = vkcore.F32Matrix(w, device=device)
    assert len(mat.chunks) > 1
    for y in (vkcore.matvec_f32(mat, x, bias=b), vkcore.matvec_f32(w, x, bias=b, device=device)):
        assert np.all(np.abs(y - want) <= tol)
    assert_within(small_binding)


def test_what_cannot_be_split_is_a_value_error(device, rng, monkeypatch):
    # Quantized under the device's own limit: 300 int8 weights a row fit the lowered
    # binding, 300 float32 activations or dequantized values do not.
    qt = vkcore.quantize(rng.standard_normal((4, 300)).astype(np.float32), device=device)
    monkeypatch.setattr(
        device, "info", dataclasses.replace(device.info, max_storage_buffer_range=LIMIT)
    )
    x = np.ones(300, np.float32)
    for activations in ("float", "int8", "uint8"):
        with pytest.raises(ValueError, match=r"^x needs 1200 bytes in one storage binding.*1024"):
            vkcore.matvec(qt, x, activations=activations)
    with pytest.raises(ValueError, match=r"^one row of the result of dequantize\(qt\) needs 1200 "):
        vkcore.dequantize(qt)
    with pytest.raises(ValueError, match="^one row of w as float32 needs 1200 bytes.*1024"):
        vkcore.quantize(np.ones((2, 300), np.float32), device=device)
    with pytest.raises(ValueError, match=r"^one row of w \(padded float32\) needs 1216 bytes"):
        vkcore.F32Matrix(np.ones((2, 300), np.float32), device=device)
