"""vkcore.KVCache: what it holds (int8 codes and scales bit for bit with
vkcore.reference.kv_quantize, float16 within half a float16 ulp), attention over it, the
int8 error bound of docs/attention.md, its length under exceptions and Ctrl-C at every
step, and a decode step (append, attention, INT8 matvec, sample) in one sequence that
replays."""

from __future__ import annotations

import numpy as np
import pytest

import vkcore
from vkcore import reference
from vkcore.compute.sequence import Sequence
from vkcore.kernels import programs, storage

REL = 1e-5


def rand(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_cache_holds_and_attends(device, rng, dtype):
    cache = vkcore.KVCache(2, 13, 40, batch=2, dtype=dtype, device=device)
    parts = [(rand(rng, 2, 2, t, 13, scale=3), rand(rng, 2, 2, t, 13)) for t in (5, 1, 20)]
    for k, v in parts:
        cache.append(k, v)
    assert len(cache) == 26
    k_all = np.concatenate([p[0] for p in parts], axis=2)
    v_all = np.concatenate([p[1] for p in parts], axis=2)
    keys, values = cache.numpy()
    if dtype == "float32":
        np.testing.assert_array_equal(keys, k_all)
    elif dtype == "float16":
        # Either neighbour of a float16 rounding: within one float16 ulp.
        ulp = np.spacing(np.abs(k_all).astype(np.float16)).astype(np.float32)
        assert np.all(np.abs(keys - k_all) <= ulp)
    else:
        kq, ks, vq, vs = cache.codes()
        rq, rs = reference.kv_quantize(k_all)
        np.testing.assert_array_equal(kq, rq)
        np.testing.assert_array_equal(ks, rs)
        rq, rs = reference.kv_quantize(v_all)
        np.testing.assert_array_equal(vq, rq)
        np.testing.assert_array_equal(vs, rs)
        np.testing.assert_array_equal(keys, reference.kv_dequantize(kq, ks))
    for lq, causal in ((1, False), (3, True), (26, True)):
        q = rand(rng, 2, 6, lq, 13)
        got = vkcore.attention(q, cache, causal=causal)
        ref = reference.attention(q, keys, values, causal=causal)
        assert np.abs(got - ref).max() <= REL * np.abs(values).max()


def test_int8_cache_special_rows(device):
    """Rows of zeros and subnormals get scale 1 and codes 0; a row with a NaN or an
    infinity gets a NaN scale, and only the queries attending it become NaN."""
    cache = vkcore.KVCache(1, 5, 8, dtype="int8", device=device)
    k = np.zeros((1, 4, 5), np.float32)
    k[0, 1] = 1e-40
    k[0, 2] = [1, -2, 3, 127, -127]
    k[0, 3, 2] = np.inf
    cache.append(k, np.ones_like(k))
    kq, ks, _, _ = cache.codes()
    rq, rs = reference.kv_quantize(k)
    np.testing.assert_array_equal(kq[0], rq)
    np.testing.assert_array_equal(ks[0], rs)
    assert ks[0, 0, 0] == 1 and ks[0, 0, 1] == 1 and np.isnan(ks[0, 0, 3])
    q = np.ones((1, 4, 5), np.float32)
    out = vkcore.attention(q, cache, causal=True)  # query i attends keys 0..i
    assert np.isfinite(out[0, :3]).all() and np.isnan(out[0, 3]).all()


def test_int8_error_bound_against_unquantized(device, rng):
    """The bound of docs/attention.md: with per-element errors at most s/2, each score
    moves by at most delta = |scale| * ||q||_1 * max_j s_kj / 2, so the weights by a
    factor within e^(+-2 delta), and the output by at most
    (e^(2 delta) - 1) max|v| + max_j s_vj / 2 (plus the float32 bound)."""
    for spread in (0.5, 2.0):
        k, v = rand(rng, 1, 2, 300, 64, scale=spread), rand(rng, 1, 2, 300, 64)
        q = rand(rng, 1, 4, 3, 64, scale=spread)
        cache = vkcore.KVCache(2, 64, 300, dtype="int8", device=device)
        cache.append(k, v)
        got = vkcore.attention(q, cache)
        exact = reference.attention(q, k, v)
        _, ks = reference.kv_quantize(k)
        _, vs = reference.kv_quantize(v)
        group = q.shape[1] // k.shape[1]
        delta = (1 / 8) * np.abs(q).sum(-1) * np.repeat(ks.max(-1), group, axis=1)[..., None] / 2
        max_v = np.abs(v).max()
        bound = np.expm1(2 * delta) * max_v + np.repeat(vs.max(-1), group, axis=1)[..., None] / 2
        bound = bound[..., None] + REL * max_v
        err = np.abs(got - exact)
        assert np.all(err <= bound), f"worst ratio {float((err / bound).max()):.3f}"
        assert float((err / bound).max()) > 1e-3  # the bound is not vacuous here


def test_append_errors_name_the_argument(device, rng):
    cache = vkcore.KVCache(2, 4, 6, dtype="float16", device=device)
    k = rand(rng, 2, 4, 4)
    cache.append(k, k)
    with pytest.raises(ValueError, match="capacity"):
        cache.append(rand(rng, 2, 3, 4), rand(rng, 2, 3, 4))
    with pytest.raises(ValueError, match="k_new"):
        cache.append(rand(rng, 3, 1, 4), rand(rng, 2, 1, 4))
    with pytest.raises(ValueError, match="v_new"):
        cache.append(rand(rng, 2, 1, 4), rand(rng, 2, 1, 5))
    with pytest.raises(TypeError, match="k_new"):
        cache.append(np.ones((2, 1, 4), np.int32), rand(rng, 2, 1, 4))
    with pytest.raises(TypeError, match="v_new"):
        cache.append(rand(rng, 2, 1, 4), "values")
    assert len(cache) == 4
    for kwargs, word in (
        ({"heads": 0}, "heads"),
        ({"head_dim": 2.5}, "head_dim"),
        ({"capacity": -1}, "capacity"),
        ({"batch": True}, "batch"),
        ({"dtype": "bfloat16"}, "dtype"),
    ):
        args = {"heads": 2, "head_dim": 4, "capacity": 6, **kwargs}
        with pytest.raises((TypeError, ValueError), match=word):
            vkcore.KVCache(
                args.pop("heads"), args.pop("head_dim"), args.pop("capacity"), device=device, **args
            )
    with pytest.raises(ValueError, match="capacity"):
        vkcore.KVCache(1024, 1024, 2**20, device=device)  # beyond one storage binding
    with pytest.raises(TypeError, match="v must be omitted"):
        vkcore.attention(rand(rng, 2, 1, 4), cache, k)
    with pytest.raises(ValueError, match="q"):
        vkcore.attention(rand(rng, 3, 1, 4), cache)
    with pytest.raises(ValueError, match="D"):
        vkcore.attention(rand(rng, 2, 1, 5), cache)


FAILING_STEPS = [
    (storage.Loans, "holding"),  # the upload of the new rows
    (programs, "program"),  # the pipeline
    (vkcore.Program, "record"),  # the dispatch
    (vkcore.Device, "run"),  # the submission
]


@pytest.mark.parametrize("owner, name", FAILING_STEPS)
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_append_failing_at_every_step_changes_nothing(device, rng, monkeypatch, owner, name, error):
    cache = vkcore.KVCache(2, 4, 8, dtype="int8", device=device)
    k, v = rand(rng, 2, 3, 4), rand(rng, 2, 3, 4)
    cache.append(k, v)
    before = cache.numpy()

    def fail(*a, **kw):
        raise error("interrupted")

    with monkeypatch.context() as m:
        m.setattr(owner, name, fail)
        with pytest.raises(error):
            cache.append(rand(rng, 2, 2, 4), rand(rng, 2, 2, 4))
    assert len(cache) == 3
    after = cache.numpy()
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    cache.append(k[:, :1], v[:, :1])  # still usable, at the old length
    assert len(cache) == 4


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_append_in_a_failed_sequence_changes_nothing(device, rng, monkeypatch, error):
    cache = vkcore.KVCache(1, 4, 8, dtype="float16", device=device)
    cache.append(rand(rng, 1, 2, 4), rand(rng, 1, 2, 4))
    with pytest.raises(error), vkcore.sequence(device=device):
        cache.append(rand(rng, 1, 1, 4), rand(rng, 1, 1, 4))
        assert len(cache) == 2  # recorded, not run
        raise error("inside the block")
    assert len(cache) == 2

    def fail(self):
        raise error("at submission")

    with monkeypatch.context() as m:
        m.setattr(Sequence, "_submit_now", fail)
        with pytest.raises(error), vkcore.sequence(device=device):
            cache.append(rand(rng, 1, 1, 4), rand(rng, 1, 1, 4))
    assert len(cache) == 2
    cache.append(rand(rng, 1, 1, 4), rand(rng, 1, 1, 4))
    assert len(cache) == 3


def test_not_waiting_sequence_grows_once_done(device, rng):
    cache = vkcore.KVCache(1, 4, 8, dtype="float32", device=device)
    with vkcore.sequence(wait=False, device=device) as seq:
        cache.append(rand(rng, 1, 2, 4), rand(rng, 1, 2, 4))
        cache.append(rand(rng, 1, 1, 4), rand(rng, 1, 1, 4))  # at the recorded length
    seq.wait()
    assert len(cache) == 3


def test_decode_step_in_one_sequence_replays(device, rng):
    """append, attention over the cache, an INT8 matvec and sample recorded as one
    submission; a replay on new input overwrites the same position and draws again."""
    heads, kv_heads, dim, vocab = 4, 2, 16, 50
    cache = vkcore.KVCache(kv_heads, dim, 32, dtype="int8", device=device)
    cache.append(rand(rng, kv_heads, 5, dim), rand(rng, kv_heads, 5, dim))
    w_out = rand(rng, vocab, heads * dim, scale=0.3)
    qt = vkcore.quantize(w_out, device=device)
    k_in = vkcore.asarray(rand(rng, kv_heads, 1, dim), device=device)
    v_in = vkcore.asarray(rand(rng, kv_heads, 1, dim), device=device)
    q_in = vkcore.asarray(rand(rng, heads, 1, dim), device=device)
    with vkcore.sequence(device=device) as seq:
        cache.append(k_in, v_in)
        ctx = vkcore.attention(q_in, cache, causal=True)
        logits = vkcore.matvec(qt, ctx.reshape(heads * dim))
        tokens = vkcore.sample(logits, temperature=0)
    assert len(cache) == 6

    def check():
        keys, values = cache.numpy()
        expect = reference.attention(q_in.numpy()[None], keys, values, causal=True)[0]
        got = ctx.numpy()
        assert np.abs(got - expect).max() <= REL * np.abs(values).max()
        expect_logits = vkcore.matvec(qt, got.reshape(-1))
        np.testing.assert_array_equal(logits.numpy(), expect_logits)
        assert int(tokens.numpy()) == int(np.argmax(expect_logits))
        return got

    first = check()
    k_in.write(rand(rng, kv_heads, 1, dim))
    v_in.write(rand(rng, kv_heads, 1, dim, scale=4))
    seq.run()
    assert len(cache) == 6
    second = check()
    assert not np.allclose(first, second)


CACHE_USES = {
    "append": lambda cache, x: cache.append(x, x),
    "attention": lambda cache, x: vkcore.attention(x, cache),
    "numpy": lambda cache, x: cache.numpy(),
    "codes": lambda cache, x: cache.codes(),
}


@pytest.mark.parametrize("use", sorted(CACHE_USES))
def test_every_use_of_a_released_or_closed_cache_is_refused(device, rng, use):
    """After release() every use is a ReleasedError, after its device closed a
    RuntimeError saying so (never a KeyError or a read of freed memory)."""
    x = rand(rng, 1, 1, 4)
    released = vkcore.KVCache(1, 4, capacity=4, dtype="int8", device=device)
    released.append(x, x)
    released.release()
    with pytest.raises(RuntimeError, match="released"):
        CACHE_USES[use](released, x)
    other = vkcore.Device()
    closed = vkcore.KVCache(1, 4, capacity=4, dtype="int8", device=other)
    closed.append(x, x)
    other.close()
    with pytest.raises(RuntimeError, match="closed"):
        CACHE_USES[use](closed, x)
    assert len(closed) == 1 and len(released) == 1
