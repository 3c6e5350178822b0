"""Leased pool buffers against recorded command buffers: BufferPool.lease hands over the
pool's own Buffer object, inside sequences, replays and between matvecs; results checked
against numpy."""

from __future__ import annotations

import gc

import numpy as np

import vkcore
from vkcore import reference

ATOL = 1e-6


# ----------------------------------------------------------------------------- helpers


def test_leases_inside_sequences_and_replays(device, rng):
    shape = (4, 1000)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    seqs = []
    for _ in range(3):
        with vkcore.sequence(device=device) as seq:
            y = vkcore.softmax(xt)
            v, i = vkcore.topk(y, 30)
        del y  # the sequence still binds it
        gc.collect()
        np.testing.assert_allclose(
            vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL
        )
        np.testing.assert_array_equal(i.numpy(), reference.topk(x, 30)[1])
        seqs.append((seq, v, i))
    x2 = (x * 3).astype(np.float32)
    xt.write(x2)
    for seq, v, i in seqs:
        seq.run()
        np.testing.assert_array_equal(i.numpy(), reference.topk(x2, 30)[1])
        np.testing.assert_allclose(
            v.numpy(), reference.topk(reference.softmax(x2), 30)[0], atol=ATOL
        )
        np.testing.assert_allclose(
            vkcore.softmax(x2, device=device), reference.softmax(x2), atol=ATOL
        )
        seq.release()
    gc.collect()
    for _ in range(3):
        t = vkcore.softmax(xt)
        np.testing.assert_allclose(t.numpy(), reference.softmax(x2), atol=ATOL)
        np.testing.assert_allclose(
            vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL
        )


def test_quantized_weights_leased_and_released_between_matvecs(device, rng):
    w = (rng.standard_normal((200, 256)) * 0.1).astype(np.float32)
    h = rng.standard_normal(256).astype(np.float32)
    want = None
    for rep in range(5):
        qt = vkcore.quantize(w, device=device)
        y = vkcore.matvec(qt, h)
        if want is None:
            want = y
        np.testing.assert_array_equal(y, want)
        t = vkcore.matvec(qt, vkcore.asarray(h, device=device))
        np.testing.assert_array_equal(t.numpy(), want)
        np.testing.assert_allclose(
            vkcore.softmax(y, device=device), reference.softmax(y), atol=ATOL
        )
        qt.release()
        s = vkcore.softmax(vkcore.asarray(w, device=device))  # a lease of the weights' size
        np.testing.assert_allclose(s.numpy(), reference.softmax(w), atol=ATOL)
        if rep % 2:
            del s
            gc.collect()
