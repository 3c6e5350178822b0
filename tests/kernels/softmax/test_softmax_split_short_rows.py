"""Softmax of many short rows larger than one storage binding: the rows go in groups
whose data and partial (m, l) states each fit one binding (the states, 16 bytes per row
and workgroup, outgrew it for rows of fewer than 4 floats: a ValueError naming buffer P
for ``vkcore demo --rows 40000000 --cols 1``)."""

from __future__ import annotations

import numpy as np
import pytest
from binding_limits import assert_within

import vkcore
from vkcore import reference


@pytest.mark.parametrize("n", [1, 2, 3])  # from 4 floats a row the states never outgrow x
@pytest.mark.parametrize("algorithm", ["online", "safe"])
def test_many_short_rows_beyond_one_binding(device, rng, small_binding, n, algorithm):  # noqa: F811
    x = rng.standard_normal((700, n)).astype(np.float32) * 3  # 700 n floats: > 1024 bytes
    for log in (False, True):
        f = vkcore.log_softmax if log else vkcore.softmax
        y = f(x, algorithm=algorithm, device=device)
        want = reference.log_softmax(x) if log else reference.softmax(x)
        assert np.allclose(y, want, atol=2e-6, rtol=1e-6)
    assert_within(small_binding)
