"""Assertions shared by several test modules."""

from __future__ import annotations

import numpy as np

import vkcore
from vkcore import reference


def assert_matvec_matches(y: np.ndarray, want: np.ndarray, activations: str) -> None:
    """Integer modes bit for bit; the float mode within float32 summation error."""
    if activations == "float":
        scale = float(np.abs(want).max()) + 1.0
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * scale)
    else:
        np.testing.assert_array_equal(y, want)


def assert_every_matvec_mode(device: vkcore.Device, w: np.ndarray, x: np.ndarray) -> None:
    """quantize (symmetric and not) then matvec in every mode, and the float32 kernel,
    against the references: the integer modes bit for bit."""
    for symmetric in (True, False):
        qt = vkcore.quantize(w, symmetric=symmetric, device=device)
        q, s, z = reference.quantize(w, 8, symmetric, True)
        for activations in ("int8", "uint8"):
            y = vkcore.matvec(qt, x, activations=activations)
            assert np.array_equal(y, reference.matvec(q, s, z, x, activations=activations))
        y = vkcore.matvec(qt, x)
        np.testing.assert_allclose(y, reference.matvec(q, s, z, x), rtol=1e-5, atol=1e-5)
        qt.release()
    f32 = vkcore.F32Matrix(w, device=device)
    np.testing.assert_allclose(vkcore.matvec_f32(f32, x), w @ x, rtol=1e-5, atol=1e-5)
    f32.release()
