"""Assertions shared by several test modules."""

from __future__ import annotations

import numpy as np


def assert_matvec_matches(y: np.ndarray, want: np.ndarray, activations: str) -> None:
    """Integer modes bit for bit; the float mode within float32 summation error."""
    if activations == "float":
        scale = float(np.abs(want).max()) + 1.0
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * scale)
    else:
        np.testing.assert_array_equal(y, want)
