"""Barriers inside sequences (vkcore.device.submit.commands.Hazards): chains of built-in
kernels and Programs in place, write-after-read orders, replays after writes, independent
steps between dependent ones. Run under VKCORE_VALIDATION=1, synchronization validation
turns a missing barrier into a failure; every result is checked against numpy."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from checks import check_softmax_topk, check_topk

import vkcore
from vkcore import reference

ATOL = 1e-6


# ----------------------------------------------------------------------------- helpers


# ======================================================= 2. barriers inside sequences
def test_chain_of_builtin_kernels_in_place_and_programs(device, rng, scale, copy_words):
    x = rng.standard_normal((4, 3000)).astype(np.float32)
    w = (rng.standard_normal((1000, 512)) * 0.1).astype(np.float32)
    h = rng.standard_normal(512).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    xt = vkcore.asarray(x, device=device)
    ht = vkcore.asarray(h, device=device)
    bias = (rng.standard_normal(1000) * 0.1).astype(np.float32)
    bt = vkcore.asarray(bias, device=device)  # a real bias buffer: see the report (placeholders)
    a = vkcore.Tensor.empty(x.shape, np.float32, device)
    b = vkcore.Tensor.empty(x.shape, np.float32, device)
    try:
        with vkcore.sequence(device=device):
            v0, i0 = vkcore.topk(xt, 17)  # reads x
            scale(xt, a, groups=-(-x.size // 64), a=2.0, n=x.size)  # a = 2x (reads x)
            vkcore.softmax(a, out=a)  # in place: a = softmax(2x)
            vkcore.log_softmax(xt, out=xt)  # writes x, read by the topk and the scale
            copy_words(a.buffer, b.buffer, groups=-(-x.size // 64), n=x.size)  # b = a, bits
            v1, i1 = vkcore.topk(xt, 9)  # reads the new x
            logits = vkcore.matvec(qt, ht, bias=bt)
            vkcore.softmax(logits, out=logits)
            p, ti = vkcore.softmax_topk(logits, 5)
            vt, vi = vkcore.topk(logits, 512)
        check_topk(x, 17, (v0, i0))
        sm = reference.softmax(np.float32(2) * x)
        np.testing.assert_allclose(a.numpy(), sm, atol=ATOL)
        np.testing.assert_array_equal(b.numpy(), a.numpy())
        lx = xt.numpy()
        np.testing.assert_allclose(lx, reference.log_softmax(x), atol=1e-5)
        check_topk(lx, 9, (v1, i1))
        want_logits = vkcore.matvec(qt, h, bias=bias)
        probs = reference.softmax(want_logits)
        np.testing.assert_allclose(logits.numpy(), probs, atol=ATOL)
        got = logits.numpy()
        check_softmax_topk(got, 5, (p, ti))
        check_topk(got, 512, (vt, vi))
    finally:
        qt.release()


def test_write_after_read_orderings(device, rng, scale):
    """Each step writes what the one before it read (no read-after-write between them):
    only the write-after-read rule orders them."""
    n = 4096
    data = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    t = [vkcore.asarray(d, device=device) for d in data]
    g = -(-n // 64)
    with vkcore.sequence(device=device):
        scale(t[0], t[1], groups=g, a=2.0, n=n)  # t1 = 2 t0
        scale(t[2], t[0], groups=g, a=3.0, n=n)  # t0 = 3 t2  (t0 read by step 1)
        scale(t[3], t[2], groups=g, a=5.0, n=n)  # t2 = 5 t3  (t2 read by step 2)
    np.testing.assert_array_equal(t[1].numpy(), np.float32(2) * data[0])
    np.testing.assert_array_equal(t[0].numpy(), np.float32(3) * data[2])
    np.testing.assert_array_equal(t[2].numpy(), np.float32(5) * data[3])


def test_kernels_reading_what_a_later_kernel_overwrites(device, rng):
    """topk, softmax_topk and sample read the logits, an in-place softmax then writes them,
    and the readers run again: two write-after-read hazards and a read-after-write."""
    x = (rng.standard_normal((3, 5000)) * 3).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device):
        v0, i0 = vkcore.topk(xt, 50)
        p0, j0 = vkcore.softmax_topk(xt, 513)  # the sort path
        s0 = vkcore.sample(xt, top_k=20, seed=3)
        vkcore.softmax(xt, out=xt)
        v1, i1 = vkcore.topk(xt, 50)
        s1 = vkcore.sample(xt, temperature=0.0)
    check_topk(x, 50, (v0, i0))
    check_softmax_topk(x, 513, (p0, j0))
    np.testing.assert_array_equal(s0.numpy(), reference.sample(x, top_k=20, seed=3))
    sm = xt.numpy()
    np.testing.assert_allclose(sm, reference.softmax(x), atol=ATOL)
    check_topk(sm, 50, (v1, i1))
    np.testing.assert_array_equal(s1.numpy(), reference.sample(sm, temperature=0.0))


def test_split_row_in_place_softmax_then_topk(device, rng):
    """Split rows: stages over a parts buffer, in place, then a split top-k of the result
    with its own parts, then the in-place softmax again (write after the top-k's reads)."""
    x = rng.standard_normal((1, 300_000)).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    with vkcore.sequence(device=device):
        vkcore.log_softmax(xt, out=xt)
        v, i = vkcore.topk(xt, 300)
        p, j = vkcore.softmax_topk(xt, 40)
        vkcore.softmax(xt, out=xt)
    lx = reference.log_softmax(x)
    vv, ii = v.numpy(), i.numpy()
    np.testing.assert_array_equal(ii, reference.topk(x, 300)[1])  # log_softmax keeps the order
    np.testing.assert_allclose(vv, reference.topk(lx, 300)[0], atol=1e-5)
    np.testing.assert_array_equal(j.numpy(), reference.topk(x, 40)[1])
    np.testing.assert_allclose(p.numpy(), reference.topk(reference.softmax(x), 40)[0], atol=1e-6)
    np.testing.assert_allclose(xt.numpy(), reference.softmax(x), atol=ATOL)


def test_the_same_tensor_twice_in_one_dispatch(device, rng, scale, copy_words):
    n = 5000
    x = rng.standard_normal(n).astype(np.float32)
    t = vkcore.asarray(x, device=device)
    u = vkcore.Tensor.empty((n,), np.float32, device)
    g = -(-n // 64)
    with vkcore.sequence(device=device):
        scale(t, t, groups=g, a=2.0, n=n)  # read and written by one dispatch
        copy_words(t.buffer, t.buffer, groups=g, n=n)  # float32 bits as uint words
        scale(t, u, groups=g, a=0.5, n=n)
        scale(u, u, groups=g, a=4.0, n=n)
        vkcore.softmax(u.reshape(50, 100), out=u.reshape(50, 100))
    np.testing.assert_array_equal(t.numpy(), np.float32(2) * x)
    want = reference.softmax(
        (np.float32(4) * (np.float32(0.5) * (np.float32(2) * x))).reshape(50, 100)
    )
    np.testing.assert_allclose(u.numpy().reshape(50, 100), want, atol=ATOL)


def test_replays_after_writes(device, rng, scale):
    x = (rng.standard_normal((2, 4000)) * 2).astype(np.float32)
    w = (rng.standard_normal((300, 4000)) * 0.05).astype(np.float32)
    qt = vkcore.quantize(w, device=device)
    xt = vkcore.asarray(x, device=device)
    h = vkcore.asarray(x[0], device=device)
    bias = np.linspace(-1, 1, 300).astype(np.float32)
    bt = vkcore.asarray(bias, device=device)
    y = vkcore.Tensor.empty(x.shape, np.float32, device)
    try:
        with vkcore.sequence(device=device) as seq:
            scale(xt, y, groups=-(-x.size // 64), a=1.5, n=x.size)
            vkcore.softmax(y, out=y)
            v, i = vkcore.topk(y, 100)
            logits = vkcore.matvec(qt, h, bias=bt)
            tok = vkcore.sample(logits, top_k=10, seed=9)
            p, j = vkcore.softmax_topk(logits, 7)
        for it in range(3):
            if it:
                x = (rng.standard_normal((2, 4000)) * (it + 1)).astype(np.float32)
                xt.write(x)
                h.write(x[0])
                seq.run()
            sm = reference.softmax(np.float32(1.5) * x)
            np.testing.assert_allclose(y.numpy(), sm, atol=ATOL)
            np.testing.assert_array_equal(i.numpy(), reference.topk(y.numpy(), 100)[1])
            lg = vkcore.matvec(qt, x[0], bias=bias)
            np.testing.assert_array_equal(logits.numpy(), lg)
            np.testing.assert_array_equal(tok.numpy(), reference.sample(lg, top_k=10, seed=9))
            check_softmax_topk(lg, 7, (p, j))
    finally:
        qt.release()


def test_independent_kernels_between_dependent_ones(device, rng):
    """Several independent kernels (no barriers between them) interleaved with ones that
    depend on an earlier step."""
    xs = [rng.standard_normal((2, 700 + 4 * i)).astype(np.float32) for i in range(4)]
    ts = [vkcore.asarray(x, device=device) for x in xs]
    with vkcore.sequence(device=device):
        sms = [vkcore.softmax(t) for t in ts]  # independent
        tops = [vkcore.topk(s, 8) for s in sms]  # each reads one of them
        logs = [vkcore.log_softmax(t, out=t) for t in ts]  # write after the softmax reads
        again = [vkcore.topk(t, 3) for t in ts]
    for x, s, top, lg, ag in zip(xs, sms, tops, logs, again, strict=True):
        np.testing.assert_allclose(s.numpy(), reference.softmax(x), atol=ATOL)
        check_topk(s.numpy(), 8, top)
        np.testing.assert_allclose(lg.numpy(), reference.log_softmax(x), atol=1e-5)
        check_topk(lg.numpy(), 3, ag)


def test_matvec_variants_in_a_sequence(device, rng):
    w = (rng.standard_normal((257, 640)) * 0.1).astype(np.float32)
    h = rng.standard_normal(640).astype(np.float32)
    qts = [
        vkcore.quantize(w, device=device),
        vkcore.quantize(w, symmetric=False, device=device),
        vkcore.quantize(w, bits=4, group_size=64, device=device),
    ]
    try:
        ht = vkcore.asarray(h, device=device)
        bias = np.linspace(-2, 2, 257).astype(np.float32)
        bt = vkcore.asarray(bias, device=device)  # a real bias buffer (see the report)
        with vkcore.sequence(device=device):
            ys = [
                (qt, act, vkcore.matvec(qt, ht, bias=bt, activations=act))
                for qt in qts
                for act in ("float", "int8", "uint8")
            ]
            # every matvec before any top-k (see the report: placeholders)
            outs = [(qt, act, y, vkcore.softmax(y), vkcore.topk(y, 5)) for qt, act, y in ys]
            vkcore.softmax(ht.reshape(1, 640), out=ht.reshape(1, 640))  # after every read
        for qt, act, y, s, top in outs:
            want = vkcore.matvec(qt, h, bias=bias, activations=act)
            np.testing.assert_array_equal(y.numpy(), want)
            np.testing.assert_allclose(s.numpy(), reference.softmax(want), atol=ATOL)
            check_topk(want, 5, top)
        np.testing.assert_allclose(ht.numpy(), reference.softmax(h), atol=ATOL)
    finally:
        for qt in qts:
            qt.release()


# ================================================== 3. leased pool buffers, recordings
def test_numpy_calls_interleaved_with_tensor_results_of_the_same_sizes(device, rng):
    shape = (8, 1000)
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(6)]
    kept = []
    for rep in range(4):
        for j, x in enumerate(xs):
            np.testing.assert_allclose(
                vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL
            )
            t = vkcore.asarray(x, device=device)
            y = vkcore.softmax(t)  # leases a pool buffer of the numpy call's size
            v, i = vkcore.topk(t, 40)
            if (rep + j) % 2:
                kept.append((x, y, v, i))
            else:
                del y, v, i  # back to the pool
            if j % 3 == 0:
                gc.collect()
            check_topk(x, 40, vkcore.topk(x, 40, device=device))
            check_softmax_topk(x, 7, vkcore.softmax_topk(x, 7, device=device))
            np.testing.assert_allclose(
                vkcore.log_softmax(x, device=device), reference.log_softmax(x), atol=1e-5
            )
    for x, y, v, i in kept:
        np.testing.assert_allclose(y.numpy(), reference.softmax(x), atol=ATOL)
        check_topk(x, 40, (v, i))


def test_destroyed_results_and_recorded_calls(device, rng):
    """Tensor results destroyed explicitly (take_back) between repeats of numpy calls that
    reuse their recordings; the pool's buffers go back and forth."""
    shape = (4, 2048)
    x = rng.standard_normal(shape).astype(np.float32)
    for rep in range(6):
        x = x + np.float32(0.25)
        np.testing.assert_allclose(
            vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL
        )
        t = vkcore.asarray(x, device=device)
        outs = [vkcore.softmax(t) for _ in range(3)]
        for o in outs[rep % 3 :]:
            o.buffer.destroy()
        got = vkcore.softmax(x, device=device)
        np.testing.assert_allclose(got, reference.softmax(x), atol=ATOL)
        for o in outs[: rep % 3]:
            np.testing.assert_allclose(o.numpy(), reference.softmax(x), atol=ATOL)
        v, i = vkcore.topk(t, 64)
        check_topk(x, 64, vkcore.topk(x, 64, device=device))
        check_topk(x, 64, (v, i))
        v.buffer.destroy()
        check_topk(x, 64, vkcore.topk(x, 64, device=device))
        del outs, v, i, t
        gc.collect()


def test_tensor_results_fed_to_programs_with_numpy_arguments(device, rng, scale):
    """A Program called on numpy arrays (staging buffers from the pool, recordings kept)
    and on Tensor results whose buffers the pool leased: sizes above the held staging
    size, so the staging buffers come and go through the pool."""
    n = 1 << 15  # 128 KiB: staged through the pool, not held by the Program
    g = n // 64
    x = rng.standard_normal(n).astype(np.float32)
    for rep in range(5):
        out = np.empty_like(x)
        scale(x, out, groups=g, a=float(rep + 1), n=n)
        np.testing.assert_array_equal(out, np.float32(rep + 1) * x)
        t = vkcore.asarray(x.reshape(8, -1), device=device)
        y = vkcore.softmax(t)  # may lease the staging buffer the Program just gave back
        out2 = np.empty_like(x)
        scale(y, out2, groups=g, a=2.0, n=n)
        np.testing.assert_allclose(
            out2, 2 * reference.softmax(x.reshape(8, -1)).reshape(-1), atol=2e-6
        )
        scale(x, out, groups=g, a=float(rep + 1), n=n)  # the first call's buffers again
        np.testing.assert_array_equal(out, np.float32(rep + 1) * x)
        if rep % 2:
            y.buffer.destroy()
        del y, t
        gc.collect()


UNIFORM_AND_TEXEL = """#version 450
layout(local_size_x = 64) in;
layout(std140, binding = 0) uniform U { vec4 k[16]; } u;
layout(binding = 1) uniform textureBuffer tex;
layout(std430, binding = 2) writeonly buffer O { float o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < 1024u) o[i] = texelFetch(tex, int(i)).x * u.k[i % 16u][i % 4u];
}
"""


def test_uniform_and_texel_reads_of_what_a_step_wrote(device, rng, scale):
    """A step writes Tensors as storage buffers; the next reads them as a uniform block
    and as a texel buffer (other access types than storage reads), then a third writes
    them again (write after those reads)."""
    prog = vkcore.Program(UNIFORM_AND_TEXEL, texel={1: "r32f"}, device=device)
    k = rng.standard_normal(64).astype(np.float32)
    t = rng.standard_normal(1024).astype(np.float32)
    kt, tt = vkcore.asarray(k, device=device), vkcore.asarray(t, device=device)
    ku, tu = (
        vkcore.Tensor.empty((64,), np.float32, device),
        vkcore.Tensor.empty((1024,), np.float32, device),
    )
    o = vkcore.Tensor.empty((1024,), np.float32, device)
    with vkcore.sequence(device=device):
        scale(kt, ku, groups=1, a=2.0, n=64)
        scale(tt, tu, groups=16, a=3.0, n=1024)
        prog(ku, tu, o, groups=16)
        scale(kt, ku, groups=1, a=-1.0, n=64)  # overwrites the uniform block just read
        scale(o, tu, groups=16, a=1.0, n=1024)  # overwrites the texels just read
    i = np.arange(1024)
    want = (np.float32(3) * t) * (np.float32(2) * k)[(i % 16) * 4 + i % 4]
    np.testing.assert_array_equal(o.numpy(), want)
    np.testing.assert_array_equal(tu.numpy(), want)
    np.testing.assert_array_equal(ku.numpy(), -k)


def test_non_waiting_sequences_chained_and_replayed(device, rng, scale):
    """Sequences in flight together, each reading what the one before wrote, replayed in
    another order (each submission's leading barrier orders it after the ones before)."""
    n = 1 << 14
    g = n // 64
    x = rng.standard_normal(n).astype(np.float32)
    a = vkcore.asarray(x, device=device)
    b, c = (
        vkcore.Tensor.empty((n,), np.float32, device),
        vkcore.Tensor.empty((n,), np.float32, device),
    )
    with vkcore.sequence(wait=False, device=device) as s1:
        scale(a, b, groups=g, a=2.0, n=n)  # b = 2a
    with vkcore.sequence(wait=False, device=device) as s2:
        scale(b, c, groups=g, a=3.0, n=n)  # c = 3b
        vkcore.softmax(c.reshape(16, -1), out=c.reshape(16, -1))
    with vkcore.sequence(wait=False, device=device) as s3:
        scale(c, a, groups=g, a=1.0, n=n)  # a = c: written after s1 read it
    s3.wait()
    sm = reference.softmax((np.float32(3) * (np.float32(2) * x)).reshape(16, -1)).reshape(-1)
    np.testing.assert_allclose(c.numpy(), sm, atol=ATOL)
    np.testing.assert_array_equal(a.numpy(), c.numpy())
    s1.run()  # b = 2 * (the new a)
    s2.run()
    want_b = np.float32(2) * a.numpy()
    np.testing.assert_array_equal(b.numpy(), want_b)
    np.testing.assert_allclose(
        c.numpy(),
        reference.softmax((np.float32(3) * want_b).reshape(16, -1)).reshape(-1),
        atol=ATOL,
    )
    for s in (s1, s2, s3):
        s.release()


def test_random_mix_of_pooled_calls(device, rng, scale):
    """A seeded random walk over numpy calls (recordings reused), Tensor calls (leases),
    explicit destroys, dropped results, collections and Program calls, on a few shapes
    whose byte sizes collide (x of one is the values or indices of another)."""
    shapes = [(4, 500), (2, 1000), (8, 250), (4, 1000)]  # 8000 bytes x3, 16000 bytes
    data = {s: rng.standard_normal(s).astype(np.float32) for s in shapes}
    live: list[tuple[str, object, object]] = []
    walk = np.random.default_rng(99)
    for _ in range(160):
        s = shapes[walk.integers(len(shapes))]
        x = data[s]
        op = walk.integers(9)
        if op == 0:
            np.testing.assert_allclose(
                vkcore.softmax(x, device=device), reference.softmax(x), atol=ATOL
            )
        elif op == 1:
            k = s[1] // 2  # the indices are as large as x
            check_topk(x, k, vkcore.topk(x, k, device=device))
        elif op == 2:
            check_softmax_topk(x, s[1], vkcore.softmax_topk(x, s[1], device=device))  # k = n
        elif op == 3:
            live.append(("softmax", x, vkcore.softmax(vkcore.asarray(x, device=device))))
        elif op == 4:
            k = s[1] // 2
            live.append(("topk", x, vkcore.topk(vkcore.asarray(x, device=device), k)))
        elif op == 5 and live:
            kind, _, res = live.pop(walk.integers(len(live)))
            for t in res if isinstance(res, tuple) else (res,):
                t.buffer.destroy()
        elif op == 6 and live:
            live.pop(walk.integers(len(live)))  # dropped: collected now or later
            if walk.integers(2):
                gc.collect()
        elif op == 7:
            out = np.empty(x.size, np.float32)
            scale(x.reshape(-1), out, groups=-(-x.size // 64), a=0.5, n=x.size)
            np.testing.assert_array_equal(out, np.float32(0.5) * x.reshape(-1))
        elif op == 8:
            np.testing.assert_allclose(
                vkcore.log_softmax(x, device=device), reference.log_softmax(x), atol=1e-5
            )
        for kind, xx, res in live[-2:]:  # the newest results still hold their values
            if kind == "softmax":
                np.testing.assert_allclose(res.numpy(), reference.softmax(xx), atol=ATOL)
            else:
                check_topk(xx, xx.shape[1] // 2, res)
    for kind, xx, res in live:
        if kind == "softmax":
            np.testing.assert_allclose(res.numpy(), reference.softmax(xx), atol=ATOL)
        else:
            check_topk(xx, xx.shape[1] // 2, res)


@pytest.mark.parametrize("algorithm", ["online", "safe"])
@pytest.mark.parametrize("shape", [(1, 300_000), (3, 70_001), (64, 1000)])
def test_in_place_softmax_chains_in_a_sequence(device, rng, algorithm, shape):
    """softmax and log_softmax in place (out= the input, through a reshape too), each pass
    of the split stages reading what it then overwrites, then a top-k of the result."""
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    xt = vkcore.asarray(x, device=device)
    flat = xt.reshape(-1)
    with vkcore.sequence(device=device):
        vkcore.log_softmax(xt, algorithm=algorithm, out=xt)
        vkcore.softmax(xt, algorithm=algorithm, out=flat.reshape(shape))
        v, i = vkcore.topk(xt, 7)
    want = reference.softmax(reference.log_softmax(x))
    got = xt.numpy()
    np.testing.assert_allclose(got, want, atol=1e-6)
    check_topk(got, 7, (v, i))
